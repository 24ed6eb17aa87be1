// Package agentsh is the command tree of the agentsh program: run one
// command (or one command in a persistent session) and report it as JSON.
package agentsh

import (
	"github.com/agentplane/agentplane/pkg/sandbox/spawn"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentplane/agentplane/pkg/cli/agentsh/early"
	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/guard"
	"github.com/agentplane/agentplane/pkg/execguard"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/reexec"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox"
)

// Exit statuses of agentsh itself, like coreutils timeout(1). Never renumber.
const (
	ExitTimeout       = 124 // the command timed out
	ExitFailed        = 125 // agentsh itself failed: bad flag, invalid request, missing cwd
	ExitCannotExecute = 126 // the command was found but could not be run
	ExitNotFound      = 127 // the command was not found
	ExitSignalBase    = 128 // + N: the command was killed by signal N
)

// Program returns the agentsh program description for clikit.Main.
func Program() *clikit.Program {
	return &clikit.Program{
		Name:  "agentsh",
		Short: "Run one command for an agent and report it as JSON",
		Long: "agentsh runs one command with a timeout, bounded output capture and non-interactive " +
			"defaults, kills every process it started before it returns, and prints one JSON result.",
		ExitCode: exitCode,
		Build:    build,
		ExitStatus: [][2]string{
			{"N", "the command's own exit status (0 is success)"},
			{"124", "the command timed out (status timeout)"},
			{"125", "agentsh itself failed: bad flag, invalid request, missing cwd, sandbox unavailable, session errors"},
			{"126", "the command was found but could not be run"},
			{"127", "the command was not found"},
			{"128+N", "the command was killed by signal N; a cancelled call exits 128 + the signal agentsh received"},
			{"0 with --exit-zero", "whenever a result was printed"},
		},
	}
}

// runResultDoc documents the result of a run for the man page.
const runResultDoc = `
success: true when the command completed with exit code 0
status: completed, timeout, cancelled (agentsh got SIGINT/SIGTERM) or error (it could not be started)
exit_code: the command's exit code; 124 on timeout; 128+N when killed by signal N
signal: the name of the signal that ended the command, or null
timed_out: whether the timeout fired
stdout, stderr: the captured text (or output with --merge-output), cleaned for a model unless --raw
stdout_bytes, stderr_bytes: everything the stream produced, truncated or not
stdout_truncated, stderr_truncated, truncated: whether --max-output cut a stream
stdout_lossy: present and true when invalid UTF-8 was replaced with U+FFFD
stdout_encoding: base64 with --binary base64
stdout_file, stderr_file: with --save-output, the files holding the whole streams
elapsed_ms, started_at: duration in milliseconds and RFC 3339 UTC start time
cwd, command, pid: where it ran (after the command, for a session), the string or argv, the main process
session, session_reset, session_ended: with --session
sandbox: what the sandbox enforced, when one was asked for
policy: with a policy, the decision before the call (decision, commands, unresolved), enforce (runtime or static) and runtime: {execs, approved, killed: {argv, exe, chain, decision, rule, source}} (see agentsh check(1))
error: {code, message, …} when status is error`

const runExamples = `
  agentsh -c 'make test'
  agentsh --timeout 10m --cwd src -- go test ./...
  agentsh -q stdout -- git rev-parse HEAD
  echo '{"command": "ls -la", "cwd": "/tmp"}' | agentsh --request -
  h=$(agentsh session start -q session); agentsh --session "$h" -c 'cd src && export X=1'`

// exitCode maps an error code to agentsh's exit status: the command's own
// failures to start are 126/127, everything else agentsh reports is 125.
func exitCode(code string) int {
	switch code {
	case result.CodeCommandNotFound:
		return ExitNotFound
	case result.CodeCommandNotExecutable:
		return ExitCannotExecute
	}
	return ExitFailed
}

// hidden is agentsh's part of the table of hidden entry points.
func hidden() map[string]reexec.Main {
	return map[string]reexec.Main{
		reexec.SessionServer: func(args []string, _ io.Reader, _ io.Writer) int { return serveMain(args) },
		reexec.Watchdog:      func(args []string, stdin io.Reader, _ io.Writer) int { return proctree.RunWatchdog(args, stdin) },
		reexec.Keeper: func(args []string, _ io.Reader, _ io.Writer) int {
			return proctree.RunKeeper(args, reexec.DetachedServers(os.Environ()))
		},
		reexec.SandboxHelper: func(args []string, _ io.Reader, _ io.Writer) int { return sandbox.HelperMain(args) },
		reexec.ExecGuard:     func(args []string, _ io.Reader, _ io.Writer) int { return execguard.Main(args) },
	}
}

// Main runs agentsh with the given arguments and streams.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// Hidden entry points run before the CLI is built: they are other
	// processes' helpers, not agent calls.
	if code, ok := reexec.Dispatch(args, hidden(), stdin, stderr); ok {
		return code
	}
	// The watchdog of a one-shot run started while the packages were
	// initialised (package early); the run releases it, or this does if
	// the call turns out not to be a run after all.
	p := Program()
	p.Signals = early.Signals
	guarded := early.Guard()
	if guarded != nil {
		defer guarded.Close()
	}
	// The sandbox's helper, when the call asked for one, started beside
	// the watchdog: the run takes it, or this ends it.
	helper := early.Helper()
	defer helper.Discard()
	p.Build = func(root *cobra.Command, env *clikit.Env) { buildWith(root, env, guarded, helper, args) }
	return clikit.Main(p, args, stdin, stdout, stderr)
}

func build(root *cobra.Command, env *clikit.Env) { buildWith(root, env, nil, nil, nil) }

// buildWith is build with a watchdog already starting (nil: none yet).
// With the call's args, a call that runs a command gets a tree without
// the subcommands: declaring their flags is a measurable share of a
// one-shot call's start, and cobra would not look at them.
func buildWith(root *cobra.Command, env *clikit.Env, watchdog *proctree.Pending, helper *spawn.Helper, args []string) {
	opts := &RunOptions{guard: watchdog, helper: helper}
	var stateDir string
	addRunFlags(root, opts)
	clikit.AddStateDirFlag(root, &stateDir)
	if args == nil || needsSubcommands(root, args) {
		root.AddCommand(newCmdSession(env, &stateDir), newCmdSandbox(env), guard.NewCmdCheck(env), guard.NewCmdAudit(env, &stateDir))
		root.AddCommand(newCmdMCP(root, env, &stateDir))
	}
	root.Example = runExamples
	root.Annotations = map[string]string{
		clikit.AnnotManResult:      runResultDoc,
		clikit.AnnotTool:           "agentsh_run",
		clikit.AnnotToolDoc:        "Run one command and report it as JSON: exit_code, stdout and stderr (cleaned of ANSI escapes; the start and end kept when longer than max_output), timed_out, elapsed_ms. command is a shell command line, or an array: a program and its arguments, run without a shell. stdin is empty unless stdin is given; the command has no terminal and gets EOF if it waits for input. After timeout (default 2m) the whole process tree is stopped and the output so far kept. Every process the command started is gone when the call returns; use agentjob_start for servers and watchers. With session, the command runs in that persistent shell, whose cwd, exports and functions carry over between calls. A command that exits non-zero or times out is a normal result: success is false, and exit_code and status say why.",
		clikit.AnnotHints:          clikit.Hints{Destructive: true, OpenWorld: true}.String(),
		clikit.AnnotArgs:           "argv...",
		clikit.AnnotArgs + ".argv": "the program and its arguments, run directly without a shell",
	}
	root.Args = cobra.ArbitraryArgs
	// Flags after the program name belong to the program: agentsh ls -la.
	root.Flags().SetInterspersed(false)
	root.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		env.StreamResult = opts.Stream
		if clikit.FlagChanged(cmd, "session") && opts.Session == "" {
			return nil, result.Errorf(result.CodeUsage, "--session (\"session\") names no session: give a handle or a name, or leave it out for a one-shot call")
		}
		if opts.Session != "" {
			return runInSession(cmd, env, opts, stateDir, args)
		}
		return runRun(cmd, env, opts, stateDir, args)
	})
	annotateDocs(root)
}

// treeNames are the names that make cobra look below the root: agentsh's
// subcommands and the ones cobra and clikit add (TestTreeNames keeps the
// list equal to the tree).
var treeNames = map[string]bool{
	"session": true, "sandbox": true, "check": true, "audit": true, "mcp": true,
	"schema": true, "help": true, "completion": true,
	cobra.ShellCompRequestCmd: true, cobra.ShellCompNoDescRequestCmd: true,
}

// needsSubcommands reports whether args, read the way cobra reads them,
// reach past the root (the first argument that is neither a flag nor a
// flag's value names a subcommand) or ask for help or the version, which
// list the subcommands. root carries the root's flags, persistent ones
// included.
func needsSubcommands(root *cobra.Command, args []string) bool {
	lookup := func(name string) *pflag.Flag {
		if f := root.Flags().Lookup(name); f != nil {
			return f
		}
		return root.PersistentFlags().Lookup(name)
	}
	short := func(c string) *pflag.Flag {
		if f := root.Flags().ShorthandLookup(c); f != nil {
			return f
		}
		return root.PersistentFlags().ShorthandLookup(c)
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return false
		case a == "--help" || a == "--version":
			return true
		case strings.HasPrefix(a, "--"):
			name, _, hasValue := strings.Cut(a[2:], "=")
			if f := lookup(name); f != nil && !hasValue && f.NoOptDefVal == "" {
				i++ // the flag's value
			}
		case len(a) > 1 && a[0] == '-':
			// Shorthands, possibly combined (-vq PATH) or with the value
			// glued on (-qPATH): the first one that takes a value ends the
			// group, and takes the next argument when nothing follows it.
			for j := 1; j < len(a); j++ {
				c := a[j : j+1]
				if c == "h" {
					return true
				}
				f := short(c)
				if f == nil || f.NoOptDefVal != "" {
					continue
				}
				if j == len(a)-1 {
					i++
				}
				break
			}
		default:
			return treeNames[a]
		}
	}
	return false // only flags: -c STRING, or a usage error that names no subcommand
}
