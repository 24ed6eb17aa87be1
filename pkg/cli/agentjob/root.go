// Package agentjob is the command tree of the agentjob program: detached
// jobs under a small supervisor, managed through opaque, environment-bound
// handles kept in a state directory.
package agentjob

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/result"
)

// Exit statuses of agentjob. Never renumber.
const (
	ExitOK          = 0   // the operation succeeded
	ExitFailed      = 1   // the operation failed; the JSON says why
	ExitUsage       = 2   // usage error or invalid request
	ExitWaitTimeout = 124 // a wait whose --timeout passed first
)

// Program returns the agentjob program description for clikit.Main.
func Program() *clikit.Program {
	return &clikit.Program{
		Name:  "agentjob",
		Short: "Start detached jobs and manage them through opaque handles",
		Long: "agentjob starts detached jobs (dev servers, watchers, long builds) under a small supervisor " +
			"and reports their status, logs, readiness and lifecycle events as JSON.",
		ExitCode: exitCode,
		Build:    build,
	}
}

func exitCode(code string) int {
	switch code {
	case result.CodeUsage, result.CodeInvalidRequest, result.CodeInvalidConfig:
		return ExitUsage
	}
	return ExitFailed
}

// Main runs agentjob with the given arguments and streams.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return clikit.Main(Program(), args, stdin, stdout, stderr)
}

func build(root *cobra.Command, env *clikit.Env) {}
