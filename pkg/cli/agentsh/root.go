// Package agentsh is the command tree of the agentsh program: run one
// command (or one command in a persistent session) and report it as JSON.
package agentsh

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/run"
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
	}
}

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

// Main runs agentsh with the given arguments and streams.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == serveCommand {
		return serveMain(args[1:])
	}
	return clikit.Main(Program(), args, stdin, stdout, stderr)
}

func build(root *cobra.Command, env *clikit.Env) {
	opts := &RunOptions{}
	var stateDir string
	addRunFlags(root, opts)
	clikit.AddStateDirFlag(root, &stateDir)
	root.AddCommand(newCmdSession(env, &stateDir))
	root.Annotations = map[string]string{
		clikit.AnnotTool:           "agentsh_run",
		clikit.AnnotArgs:           "argv...",
		clikit.AnnotArgs + ".argv": "the program and its arguments, run directly without a shell",
	}
	root.Args = cobra.ArbitraryArgs
	// Flags after the program name belong to the program: agentsh ls -la.
	root.Flags().SetInterspersed(false)
	root.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		if opts.Session != "" {
			return runInSession(cmd, env, opts, stateDir, args)
		}
		return runRun(cmd, env, opts, args)
	})
}
