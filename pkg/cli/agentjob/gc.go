package agentjob

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/result"
)

// GCOptions are the flags of gc.
type GCOptions struct {
	Env       *clikit.Env
	StateDir  string
	OlderThan time.Duration
}

// NewCmdGC builds the gc command.
func NewCmdGC(env *clikit.Env, stateDir *string, runF func(*GCOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &GCOptions{Env: env}
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove jobs that ended more than --older-than ago",
		Long: "Remove every job that ended more than --older-than ago (default 0: every ended job). Running " +
			"jobs, and lost jobs whose process is still alive, are kept.",
		Annotations: jobAnnotations("agentjob_gc", clikit.Hints{Destructive: true, Idempotent: true}, "", ""),
		Args:        cobra.ArbitraryArgs,
	}
	cmd.Flags().Var(clikit.DurationValue{D: &o.OlderThan}, "older-than", "remove only jobs that ended more than `D` ago")
	clikit.MarkFlags(cmd.Flags(), clikit.Configurable, "older-than")
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		if _, err := env.Positional(cmd, args, 0); err != nil {
			return nil, err
		}
		o.StateDir = *stateDir
		if runF != nil {
			return runF(o)
		}
		return gcRun(o)
	})
	return cmd
}

func gcRun(o *GCOptions) (*clikit.Outcome, error) {
	st, err := openStore(o.Env, o.StateDir)
	if err != nil {
		return nil, err
	}
	removed, err := st.GC(o.OlderThan, time.Now())
	if err != nil {
		return nil, err
	}
	return &clikit.Outcome{Value: result.New().Set("success", true).Set("removed", statusList(removed)).Set("count", len(removed))}, nil
}
