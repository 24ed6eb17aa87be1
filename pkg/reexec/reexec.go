// Package reexec is the one table of the hidden entry points by which
// agentsh and agentjob start themselves again to run a helper instead of
// their command line: a session server, a job supervisor, a containment
// watchdog, the sandbox helper, the runtime policy guard. It follows moby's
// reexec package (every re-exec entry point registered in one table, looked
// up in one place) without its global registry: each name is declared here
// once with the programs that serve it, and each program's Main hands its
// functions to Dispatch, which CheckServed verifies against the table.
package reexec

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/agentplane/agentplane/pkg/execguard"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/sandbox"
)

// The names, argv[1] of the re-executed program. Never rename one: a
// running server or supervisor is recognised by it (DetachedServers).
const (
	SessionServer = "__session-serve"        // a session's server: STATE_DIR ID
	JobSupervisor = "__supervise"            // a job's supervisor: STATE_DIR ID [SLURM_JOB_ID]
	Watchdog      = proctree.WatchdogCommand // a containment guard's watchdog (proctree.Guard)
	Keeper        = proctree.KeeperCommand   // a guard's keeper: the command's subreaper parent (proctree.Keeper)
	SandboxHelper = sandbox.HelperCommand
	ExecGuard     = execguard.Command
)

// Entry is one hidden entry point.
type Entry struct {
	Name     string
	Programs []string // the programs that serve it
	Doc      string
}

// Table returns every hidden entry point.
func Table() []Entry {
	return []Entry{
		{SessionServer, []string{"agentsh"}, "the server of one agentsh session"},
		{JobSupervisor, []string{"agentjob"}, "the supervisor of one job"},
		{Watchdog, []string{"agentsh"}, "kills a command's tree when agentsh or a session server dies"},
		{Keeper, []string{"agentsh"}, "the parent and subreaper of a command without a cgroup: kills its tree when agentsh dies"},
		{SandboxHelper, []string{"agentsh", "agentjob"}, "confines itself, then executes the command"},
		{ExecGuard, []string{"agentsh", "agentjob"}, "runs the command under the runtime command policy"},
	}
}

// Main is the body of one entry point: its arguments after the name.
type Main func(args []string, stdin io.Reader, stderr io.Writer) int

// Dispatch runs the hidden entry point that args[0] names, if mains (one
// program's functions) has it, and reports whether it did.
func Dispatch(args []string, mains map[string]Main, stdin io.Reader, stderr io.Writer) (int, bool) {
	if len(args) == 0 || !strings.HasPrefix(args[0], "__") {
		return 0, false
	}
	m, ok := mains[args[0]]
	if !ok {
		return 0, false
	}
	return m(args[1:], stdin, stderr), true
}

// CheckServed reports an error unless mains serves exactly the entry
// points the table gives program: the test each program runs.
func CheckServed(program string, mains map[string]Main) error {
	want := map[string]bool{}
	for _, e := range Table() {
		for _, p := range e.Programs {
			if p == program {
				want[e.Name] = true
			}
		}
	}
	var problems []string
	for name := range want {
		if mains[name] == nil {
			problems = append(problems, program+" does not serve "+name)
		}
	}
	for name := range mains {
		if !want[name] {
			problems = append(problems, program+" serves "+name+", which the table does not give it")
		}
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		return fmt.Errorf("reexec: %s", strings.Join(problems, "; "))
	}
	return nil
}
