// Package agentsh is the command tree of the agentsh program: run one
// command (or one command in a persistent session) and report it as JSON.
package agentsh

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/guard"
	"github.com/agentplane/agentplane/pkg/execguard"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/run"
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
	case run.CodeCommandNotFound:
		return ExitNotFound
	case run.CodeCommandNotExecutable:
		return ExitCannotExecute
	}
	return ExitFailed
}

// watchdogCommand is the hidden first argument that runs the watchdog of a
// proctree.Guard: it kills a command's tree when agentsh (or a session
// server) dies without cleaning up.
const watchdogCommand = "__watchdog"

// startGuard starts agentsh's watchdog in the background.
func startGuard() func() (*proctree.Guard, error) {
	exe, err := os.Executable()
	if err != nil {
		return func() (*proctree.Guard, error) { return nil, err }
	}
	return proctree.StartGuardAsync([]string{exe, watchdogCommand})
}

// Main runs agentsh with the given arguments and streams.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// Hidden entry points run before the CLI is built: they are other
	// processes' helpers, not agent calls.
	if len(args) > 0 {
		switch args[0] {
		case serveCommand:
			return serveMain(args[1:])
		case watchdogCommand:
			return proctree.RunWatchdog(args[1:], stdin)
		case sandbox.HelperCommand:
			return sandbox.HelperMain(args[1:])
		case execguard.Command:
			return execguard.Main(args[1:])
		}
	}
	return clikit.Main(Program(), args, stdin, stdout, stderr)
}

func build(root *cobra.Command, env *clikit.Env) {
	opts := &RunOptions{}
	var stateDir string
	addRunFlags(root, opts)
	clikit.AddStateDirFlag(root, &stateDir)
	root.AddCommand(newCmdSession(env, &stateDir), newCmdSandbox(env), guard.NewCmdCheck(env), guard.NewCmdAudit(env, &stateDir))
	root.AddCommand(newCmdMCP(root, env, &stateDir))
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
		if opts.Session != "" {
			return runInSession(cmd, env, opts, stateDir, args)
		}
		return runRun(cmd, env, opts, stateDir, args)
	})
	annotateDocs(root)
}
