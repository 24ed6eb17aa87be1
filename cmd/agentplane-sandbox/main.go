// Command agentplane-sandbox is the sandbox helper of agentsh, agentjob
// and agentsh sessions, as a program of its own: it links only the sandbox
// engine, so that it starts in a fraction of the time the full programs
// take (they fall back to running themselves as the helper when it is not
// installed beside them). It is not for people to run.
package main

import (
	"fmt"
	"os"

	"github.com/agentplane/agentplane/pkg/sandbox"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == sandbox.HelperCommand {
		os.Exit(sandbox.HelperMain(os.Args[2:]))
	}
	fmt.Fprintln(os.Stderr, "agentplane-sandbox: error: this is the sandbox helper of agentsh and agentjob, not a command to run")
	os.Exit(2)
}
