package agentfs

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/files"
)

// StatOptions are the flags of agentfs stat.
type StatOptions struct {
	*CommonOptions
	Path string
}

// NewCmdStat builds agentfs stat. runF replaces statRun in tests.
func NewCmdStat(env *clikit.Env, common *CommonOptions, runF func(*StatOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &StatOptions{CommonOptions: common}
	cmd := &cobra.Command{
		Use:   "stat PATH",
		Short: "Describe a path: kind, size, mode, modification time, sha256 and lines of a file",
		Long:  "Describe a path without following a final symlink (kind symlink, link_target).",
		Args:  cobra.MaximumNArgs(1),
		Annotations: map[string]string{
			clikit.AnnotTool:           "agentfs_stat",
			clikit.AnnotHints:          clikit.Hints{ReadOnly: true, Idempotent: true}.String(),
			clikit.AnnotArgs:           "path",
			clikit.AnnotArgs + ".path": "the path to describe",
		},
	}
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		args, err := env.Positional(cmd, args, 1)
		if err != nil {
			return nil, err
		}
		o.Path = args[0]
		if runF != nil {
			return runF(o)
		}
		return statRun(env, o)
	})
	return cmd
}

type statResult struct {
	Success bool `json:"success"`
	*files.StatResult
	Description string `json:"description,omitempty"`
}

func statRun(env *clikit.Env, o *StatOptions) (*clikit.Outcome, error) {
	fsys, err := o.engine(env, false)
	if err != nil {
		return nil, err
	}
	r, err := fsys.Stat(o.Path)
	if err != nil {
		return nil, err
	}
	return &clikit.Outcome{Value: statResult{Success: true, StatResult: r, Description: env.Description}}, nil
}
