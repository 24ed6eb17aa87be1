// Command agentplane-sandbox is the sandbox helper of agentsh, agentjob
// and agentsh sessions, as a program of its own: it links only the helper's
// side of the sandbox (pkg/sandbox/confine: no network proxy, no resolver,
// no cgo, a static program), so that it starts in a fraction of the time
// the full programs take (they fall back to running themselves as the
// helper when it is not installed beside them). It is not for people to
// run.
//
// The helper lives as long as the command, a few milliseconds for most:
// the runtime's goroutine that watches for a changed CPU limit to update
// GOMAXPROCS would only add to its start.
//
//go:debug updatemaxprocs=0
package main

import (
	"fmt"
	"os"

	"github.com/agentplane/agentplane/pkg/sandbox/confine"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == confine.Command {
		os.Exit(confine.Main(os.Args[2:]))
	}
	fmt.Fprintln(os.Stderr, "agentplane-sandbox: error: this is the sandbox helper of agentsh and agentjob, not a command to run")
	os.Exit(2)
}
