// Package agentfs is the command tree of the agentfs program: read, write,
// edit, patch and undo files atomically, reporting the content before and
// after.
//
// The commands are thin: each parses its flags, builds the request for the
// pkg/files engine (pkg/patch for patch), calls it and renders the result.
package agentfs

import (
	"io"
	"strings"

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
			"result with the content before and after and a unified diff.\n\n" +
			"Relative paths are resolved against the current directory; with --root they must " +
			"still resolve, symlinks followed, inside the root. Under --root or --deny a file with " +
			"more than one hard link is read or changed only when each of its other names is " +
			"found inside the root and outside the deny rules (path_denied otherwise, with " +
			"hard_links; without --root every hard-linked file is refused under --deny). " +
			"The root, the deny list and the " +
			"size limits are the operator's boundary (flags, AGENTFS_ROOT / AGENTPLANE_ROOT, " +
			"AGENTPLANE_DENY, the config file): a --request may tighten them but never loosen " +
			"them. A request's root must lie inside the configured one, its deny globs are added " +
			"to the configured ones, and its size limits are capped by the configured ones.",
		ExitCode: exitCode,
		Build:    build,
		ExitStatus: [][2]string{
			{"0", "the operation succeeded"},
			{"1", "the operation failed; the JSON says why (file_not_found, old_string_not_found, file_changed, patch_failed, …)"},
			{"2", "usage error or invalid request"},
		},
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

func build(root *cobra.Command, env *clikit.Env) {
	common := addCommonFlags(root, env)
	root.AddCommand(
		NewCmdRead(env, common, nil),
		NewCmdWrite(env, common, nil),
		NewCmdEdit(env, common, nil),
		NewCmdInsert(env, common, nil),
		NewCmdPatch(env, common, nil),
		NewCmdUndo(env, common, nil),
		NewCmdStat(env, common, nil),
		NewCmdList(env, common, nil),
		newCmdMCP(root, env, common),
	)
	// A bare "agentfs" is a call without an operation: a usage error in
	// JSON like any other, not help text on stdout.
	root.RunE = func(cmd *cobra.Command, args []string) error {
		var names []string
		for _, c := range cmd.Commands() {
			if c.IsAvailableCommand() {
				names = append(names, c.Name())
			}
		}
		return result.Errorf(result.CodeUsage, "agentfs needs a subcommand: %s", strings.Join(names, ", ")).With("commands", names)
	}
	annotateDocs(root)
}
