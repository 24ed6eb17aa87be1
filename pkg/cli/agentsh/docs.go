package agentsh

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
)

// commandDocs are the man-page sections of the subcommands: examples and
// the result's fields, keyed by the command path below the root.
var commandDocs = map[string]clikit.Doc{
	"session start": {
		Example: `  h=$(agentsh session start -q session --cwd ~/project)
  agentsh session start --name build --idle-timeout 4h --sandbox workspace-write`,
		Result: `success: true
session: the handle (ses_…), to pass as --session
name, status, pid, cwd, shell: the session's name, running, its shell's pid, cwd and program
started_at, last_used_at, calls, idle_timeout_ms: bookkeeping
sandbox: what the session's sandbox enforces (mode none without one)
background: the processes calls left running (empty at start)`,
	},
	"session list": {
		Example: `  agentsh session list -q 'sessions.#(status=="running")#.session'`,
		Result:  `sessions: one object per session of the environment, newest first, with the fields of session status`,
	},
	"session status": {
		Example: `  agentsh session status "$h" -q status`,
		Result: `session, name, status: running or ended
ended_reason: exit, idle_timeout, stopped, restart_failed (a shell that had to be replaced could not be started again), server_died or host_restarted, once ended
pid, cwd, shell, started_at, last_used_at, ended_at, calls, resets: the shell and its use
sandbox: what the session's sandbox enforces
background: processes calls left running (cmd &): pid, command, status running or exited,
  exit_code and signal where the server reaped them`,
	},
	"session logs": {
		Example: `  agentsh --session "$h" -c 'npm run dev > /dev/null 2>&1 & python3 -m http.server 8000 &'
  agentsh session logs "$h" --since-last -q data
  agentsh session logs "$h" --tail 20`,
		Result: `session, status: the session and whether it runs
data: what background processes wrote after their call returned (cleaned unless --raw)
offset, next_offset: absolute byte offsets of data in the session's log
dropped_bytes: how much of what was asked for the bounded log dropped before it was read (with --since-last: written since the last read and lost; otherwise: the oldest bytes of the log)
background: the processes calls left running, as in session status`,
	},
	"session stop": {
		Example: `  agentsh session stop "$h"`,
		Result:  `the session's status after stopping (status ended, ended_reason stopped); stopping an ended session is not an error`,
	},
	"check": {
		Example: `  agentsh check --policy rules.star -c 'git status && git reset --hard'
  agentsh check --policy rules.star -- rm -rf build || echo "needs a human"`,
		Result: `decision: allow, prompt or forbidden (the strictest over all commands)
commands: every simple command found, with argv, decision, rule, justification and source
unresolved: what could not be known without running it, with the reason
command: the string or argv checked`,
	},
	"sandbox check": {
		Example: `  agentsh sandbox check -q enforceable`,
		Result: `landlock_abi, user_namespaces, net_namespaces, mount_namespaces, seccomp, root: what the kernel offers
cgroup_v1_memory, cgroup_v1_pids, cgroup_v2, cgroup_v2_controllers: the cgroup controllers usable here
enforceable: for each sandbox flag, whether (and how) it can be enforced`,
	},
}

// annotateDocs attaches the man-page sections to the commands.
func annotateDocs(root *cobra.Command) { clikit.AnnotateDocs(root, commandDocs) }
