// Package agentfs is the command tree of the agentfs program: read, write,
// edit, patch and undo files atomically, reporting the content before and
// after.
package agentfs

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/result"
)

// Exit statuses of agentfs. Never renumber.
const (
	ExitOK     = 0 // the operation succeeded
	ExitFailed = 1 // the operation failed; the JSON says why
	ExitUsage  = 2 // usage error or invalid request
)

// Program returns the agentfs program description for clikit.Main.
func Program() *clikit.Program {
	return &clikit.Program{
		Name:  "agentfs",
		Short: "Read, write, edit, patch and undo files, reporting the content before and after",
		Long: "agentfs reads, writes, edits, patches and undoes files atomically and prints one JSON " +
			"result with the content before and after and a unified diff.",
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

// Main runs agentfs with the given arguments and streams.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return clikit.Main(Program(), args, stdin, stdout, stderr)
}

func build(root *cobra.Command, env *clikit.Env) {}
