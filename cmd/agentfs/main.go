// Command agentfs: see the package github.com/agentplane/agentplane/pkg/cli/agentfs.
package main

import (
	"os"

	"github.com/agentplane/agentplane/pkg/cli/agentfs"
)

func main() { os.Exit(agentfs.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
