package agentfs

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
)

// UndoOptions are the flags of agentfs undo.
type UndoOptions struct {
	*CommonOptions
	Path string
}

// NewCmdUndo builds agentfs undo. runF replaces undoRun in tests.
func NewCmdUndo(env *clikit.Env, common *CommonOptions, runF func(*UndoOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &UndoOptions{CommonOptions: common}
	cmd := &cobra.Command{
		Use:   "undo PATH",
		Short: "Restore a file to before the last change agentfs made to it",
		Long: "Restore the version of a file from before the last change made through agentfs, from the " +
			"history in <state dir>/history (bounded per file). Each undo steps one version further back; " +
			"undoing a creation deletes the file. Refused with undo_conflict if the file changed since " +
			"agentfs wrote it.",
		Args: cobra.MaximumNArgs(1),
		Annotations: map[string]string{
			clikit.AnnotTool:           "agentfs_undo",
			clikit.AnnotHints:          clikit.Hints{Destructive: true}.String(),
			clikit.AnnotArgs:           "path",
			clikit.AnnotArgs + ".path": "the file to restore",
		},
	}
	o.addDryRunFlag(cmd)
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		args, err := env.Positional(cmd, args, 1)
		if err != nil {
			return nil, err
		}
		o.Path = args[0]
		if runF != nil {
			return runF(o)
		}
		return undoRun(env, o)
	})
	return cmd
}

func undoRun(env *clikit.Env, o *UndoOptions) (*clikit.Outcome, error) {
	fsys, err := o.engine(env, true)
	if err != nil {
		return nil, err
	}
	m, err := fsys.Undo(o.Path)
	if err != nil {
		return nil, err
	}
	return o.mutationOutcome(env, m), nil
}
