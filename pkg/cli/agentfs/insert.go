package agentfs

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/files"
	"github.com/agentplane/agentplane/pkg/result"
)

// InsertOptions are the flags of agentfs insert.
type InsertOptions struct {
	*CommonOptions
	Path         string
	Line         int
	Text         string
	ExpectSHA256 string

	hasText bool
}

// NewCmdInsert builds agentfs insert. runF replaces insertRun in tests.
func NewCmdInsert(env *clikit.Env, common *CommonOptions, runF func(*InsertOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &InsertOptions{CommonOptions: common}
	cmd := &cobra.Command{
		Use:   "insert PATH --line N (--text STRING | < STDIN)",
		Short: "Insert lines after line N of a text file",
		Long: "Insert text as whole lines after line N (0 = before the first line), in the file's line " +
			"ending. A file without a final newline keeps lacking one.",
		Args: cobra.MaximumNArgs(1),
		Annotations: map[string]string{
			clikit.AnnotTool:           "agentfs_insert",
			clikit.AnnotHints:          clikit.Hints{}.String(),
			clikit.AnnotArgs:           "path",
			clikit.AnnotArgs + ".path": "the file to insert into",
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Line, "line", 0, "insert after line `N` (0 = before the first line)")
	_ = f.SetAnnotation("line", clikit.AnnotRequired, []string{"true"})
	f.StringVar(&o.Text, "text", "", "the `STRING` to insert (default: stdin)")
	f.StringVar(&o.ExpectSHA256, "expect-sha256", "", "refuse (file_changed) unless the file's sha256 is `HEX`")
	o.addDryRunFlag(cmd)
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		args, err := env.Positional(cmd, args, 1)
		if err != nil {
			return nil, err
		}
		o.Path = args[0]
		if !clikit.FlagChanged(cmd, "line") {
			return nil, result.Errorf(result.CodeUsage, "insert needs --line N")
		}
		if o.Line < 0 {
			return nil, result.Errorf(result.CodeUsage, "--line must not be negative")
		}
		o.hasText = clikit.FlagChanged(cmd, "text")
		if runF != nil {
			return runF(o)
		}
		return insertRun(env, o)
	})
	return cmd
}

func insertRun(env *clikit.Env, o *InsertOptions) (*clikit.Outcome, error) {
	text := o.Text
	if !o.hasText {
		b, err := textInput(env, "", "text (give --text or stdin)")
		if err != nil {
			return nil, err
		}
		text = string(b)
	}
	fsys, err := o.engine(env, true)
	if err != nil {
		return nil, err
	}
	m, err := fsys.Insert(o.Path, o.Line, text, files.InsertOptions{ExpectSHA256: o.ExpectSHA256})
	if err != nil {
		return nil, err
	}
	return o.mutationOutcome(env, m), nil
}
