// Command agentsh runs one command for an agent and reports it as JSON.
package main

import (
	"os"

	"github.com/agentplane/agentplane/pkg/cli/agentsh"
)

func main() { os.Exit(agentsh.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
