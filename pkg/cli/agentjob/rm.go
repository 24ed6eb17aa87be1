package agentjob

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
)

// RmOptions are the flags and argument of rm.
type RmOptions struct {
	Env      *clikit.Env
	StateDir string
	Job      string
	Force    bool
}

// NewCmdRm builds the rm command.
func NewCmdRm(env *clikit.Env, stateDir *string, runF func(*RmOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &RmOptions{Env: env}
	cmd := &cobra.Command{
		Use:   "rm JOB",
		Short: "Remove an ended job and its logs; its handle then answers job_expired",
		Long: "Remove a job's files. A job that still runs is refused with job_running unless --force, which " +
			"stops it first. Job ids are never reused, so the handle answers job_expired afterwards.",
		Annotations: jobAnnotations("agentjob_rm", clikit.Hints{Destructive: true, Idempotent: true}, "job", "the job's handle or name"),
		Args:        cobra.ArbitraryArgs,
	}
	cmd.Flags().BoolVar(&o.Force, "force", false, "stop the job first if it still runs")
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		ref, err := oneRef(env, cmd, args)
		if err != nil {
			return nil, err
		}
		o.Job, o.StateDir = ref, *stateDir
		if runF != nil {
			return runF(o)
		}
		return rmRun(o)
	})
	return cmd
}

func rmRun(o *RmOptions) (*clikit.Outcome, error) {
	st, err := openStore(o.Env, o.StateDir)
	if err != nil {
		return nil, err
	}
	s, err := st.Remove(o.Env.Ctx, o.Job, o.Force)
	if err != nil {
		return nil, err
	}
	return &clikit.Outcome{Value: statusResult(s).Set("removed", true)}, nil
}
