package agentsh

import (
	"sort"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/audit"
	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/guard"
	"github.com/agentplane/agentplane/pkg/netproxy"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox"
)

// sandboxNotes is the man page's account of the layers (docs/sandbox.md
// has the table of attacks).
const sandboxNotes = `The result's layers list names each mechanism, whether this machine enforces it, and what it stops. Every sandboxed run (any of --sandbox, --net none, --deny-read, a limit, --user) gets a PID namespace whose PID 1 is the sandbox helper (with a fresh /proc: no signals, ptrace, prlimit or /proc/PID/root of processes outside; the tree dies with the helper, which dies with its runner), a mount namespace (in the filesystem modes the whole tree read-only with the writable roots bound on top, so that chmod, chown, utimes and setxattr outside them fail also as root; a /dev of character devices only; the state directory, the config file, .git/hooks and .git/config read-only; the secret key, session sockets, --deny-read paths and, under --net none, the host's pathname Unix sockets covered; the cgroup filesystem read-only), IPC and cgroup namespaces, a network namespace under --net none, a reduced capability bounding set (no CHOWN, FOWNER or FSETID in the filesystem modes), no_new_privs, Landlock in the filesystem modes, a seccomp filter (io_uring, AF_VSOCK, prlimit on other processes, the key ring, bpf, perf_event_open, userfaultfd, open_by_handle_at, openat2, set-id mode bits), and close-on-exec for every inherited descriptor but 0, 1 and 2. Toolchain caches go to a private directory of the environment unless user_caches is set. A machine without a layer a run needs refuses it with sandbox_unavailable.`

func newCmdSandbox(env *clikit.Env) *cobra.Command {
	cmd := &cobra.Command{Use: "sandbox", Short: "Inspect what this machine's kernel can enforce"}
	check := &cobra.Command{
		Use:   "check",
		Short: "Report, as JSON, which sandbox mechanisms this machine can enforce",
		Long: "Report which sandbox mechanisms this machine can enforce: on Linux, Landlock and its ABI, user, " +
			"network and mount namespaces, cgroup memory and pids controllers, seccomp, and whether agentsh runs as root; " +
			"on macOS (\"platform\": \"darwin\"), whether Seatbelt (sandbox-exec) is there, how leftover processes are " +
			"found without a subreaper, and which flags are refused there (--memory, --pids, --user).",
		Annotations: map[string]string{
			clikit.AnnotTool:     "agentsh_sandbox_check",
			clikit.AnnotManNotes: sandboxNotes,
			clikit.AnnotHints:    clikit.Hints{ReadOnly: true, Idempotent: true}.String(),
			clikit.AnnotToolDoc: "Report which sandbox mechanisms this machine can enforce: on Linux, Landlock and its ABI, " +
				"user, network and mount namespaces, cgroup memory and pids controllers, seccomp, and whether agentsh runs " +
				"as root; on macOS, whether Seatbelt is there and which limits (memory, pids, user) it cannot enforce.",
		},
	}
	check.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		if _, err := env.Positional(cmd, args, 0); err != nil {
			return nil, err
		}
		obj := result.New().Set("success", true)
		report := sandbox.Check()
		keys := make([]string, 0, len(report))
		for k := range report {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			obj.Set(k, report[k])
		}
		return &clikit.Outcome{Value: obj}, nil
	})
	cmd.AddCommand(check)
	return cmd
}

// networkAuditor logs each connection the network allowlist refuses during
// the run described by rec.
func networkAuditor(env *clikit.Env, stateDir string, rec *audit.Record) func(netproxy.Denial) {
	d, err := env.OpenStateDir(stateDir)
	if err != nil {
		return nil
	}
	base := *rec
	if base.Description == "" {
		base.Description = env.Description
	}
	return netproxy.Auditor(guard.AuditLog(d), base, func(err error) { env.Logf("cannot write the audit log: %v", err) })
}
