package agentjob

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/sandboxflags"
	"github.com/agentplane/agentplane/pkg/jobs"
)

// RestartOptions are the argument of restart.
type RestartOptions struct {
	Env      *clikit.Env
	StateDir string
	Job      string
}

// NewCmdRestart builds the restart command.
func NewCmdRestart(env *clikit.Env, stateDir *string, runF func(*RestartOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &RestartOptions{Env: env}
	cmd := &cobra.Command{
		Use:   "restart JOB",
		Short: "Stop a job if it runs and start a new run of it under the same handle",
		Long: "Stop the job if it still runs, then start it again with the same spec, under the same handle, " +
			"with a new supervisor. Its restarts count goes up, a restarted event is recorded and its logs " +
			"continue at the same offsets.",
		Annotations: jobAnnotations("agentjob_restart", clikit.Hints{Destructive: true, OpenWorld: true}, "job", "the job's handle or name"),
		Args:        cobra.ArbitraryArgs,
	}
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		ref, err := oneRef(env, cmd, args)
		if err != nil {
			return nil, err
		}
		o.Job, o.StateDir = ref, *stateDir
		if runF != nil {
			return runF(o)
		}
		return restartRun(o)
	})
	return cmd
}

func restartRun(o *RestartOptions) (*clikit.Outcome, error) {
	st, err := openStore(o.Env, o.StateDir)
	if err != nil {
		return nil, err
	}
	// A restart is a new start of the saved spec: under sandbox_lock it
	// is held to the floor configured now (the job may have been started
	// before the lock, or with another config), before anything stops.
	st.Admit = func(spec jobs.Spec) error { return sandboxflags.CheckPolicy(o.Env, spec.Sandbox) }
	s, err := st.Restart(o.Env.Ctx, o.Job)
	if err != nil {
		return nil, err
	}
	return &clikit.Outcome{Value: statusResult(s)}, nil
}
