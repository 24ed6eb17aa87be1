// Command agentjob: see the package github.com/agentplane/agentplane/pkg/cli/agentjob.
package main

import (
	"os"

	"github.com/agentplane/agentplane/pkg/cli/agentjob"
)

func main() { os.Exit(agentjob.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
