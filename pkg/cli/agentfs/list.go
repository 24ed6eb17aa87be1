package agentfs

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/files"
	"github.com/agentplane/agentplane/pkg/result"
)

// ListOptions are the flags of agentfs list.
type ListOptions struct {
	*CommonOptions
	Dir   string
	Depth int
	Glob  string
}

// NewCmdList builds agentfs list. runF replaces listRun in tests.
func NewCmdList(env *clikit.Env, common *CommonOptions, runF func(*ListOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &ListOptions{CommonOptions: common, Depth: 1}
	cmd := &cobra.Command{
		Use:   "list DIR",
		Short: "List a directory with sizes, kinds and modes",
		Long: "List a directory to --depth levels in lexical order, depth first, with each entry's path " +
			"relative to DIR. Symlinks are listed, not followed; denied paths are left out. At most " +
			"10000 entries (truncated: true).",
		Args: cobra.MaximumNArgs(1),
		Annotations: map[string]string{
			clikit.AnnotTool:          "agentfs_list",
			clikit.AnnotHints:         clikit.Hints{ReadOnly: true, Idempotent: true}.String(),
			clikit.AnnotArgs:          "dir",
			clikit.AnnotArgs + ".dir": "the directory to list",
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Depth, "depth", 1, "descend `N` levels (1 = the directory's own entries)")
	f.StringVar(&o.Glob, "glob", "", "keep entries whose relative path matches `PATTERN` (** matches any depth)")
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		args, err := env.Positional(cmd, args, 1)
		if err != nil {
			return nil, err
		}
		o.Dir = args[0]
		if o.Depth < 0 {
			return nil, result.Errorf(result.CodeUsage, "--depth must not be negative")
		}
		if runF != nil {
			return runF(o)
		}
		return listRun(env, o)
	})
	return cmd
}

type listResult struct {
	Success bool `json:"success"`
	*files.ListResult
	Description string `json:"description,omitempty"`
}

func listRun(env *clikit.Env, o *ListOptions) (*clikit.Outcome, error) {
	fsys, err := o.engine(env, false)
	if err != nil {
		return nil, err
	}
	r, err := fsys.List(o.Dir, files.ListOptions{Depth: o.Depth, Glob: o.Glob})
	if err != nil {
		return nil, err
	}
	return &clikit.Outcome{Value: listResult{Success: true, ListResult: r, Description: env.Description}}, nil
}
