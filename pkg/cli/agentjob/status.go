package agentjob

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/jobs"
	"github.com/agentplane/agentplane/pkg/result"
)

// StatusOptions are the arguments of status.
type StatusOptions struct {
	Env      *clikit.Env
	StateDir string
	Jobs     []string
}

// NewCmdStatus builds the status command.
func NewCmdStatus(env *clikit.Env, stateDir *string, runF func(*StatusOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &StatusOptions{Env: env}
	cmd := &cobra.Command{
		Use:   "status JOB...",
		Short: "Report jobs: status, exit code, pid, readiness, restarts, log sizes",
		Long: "Report one job (the status object) or several ({\"jobs\": [...]}). The status never claims more " +
			"than it can prove: a job whose supervisor is gone without recording an end is lost, never running. " +
			"A slurm job also reports the scheduler's view (slurm_job_id, scheduler_state): pending while it is " +
			"queued (reason says why), and the scheduler's end (cancelled, timeout, node failure) when its " +
			"supervisor recorded none.",
		Annotations: jobAnnotations("agentjob_status", clikit.Hints{ReadOnly: true, Idempotent: true}, "jobs...", "the jobs' handles or names"),
		Args:        cobra.ArbitraryArgs,
	}
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		refs, err := env.Positional(cmd, args, 1)
		if err != nil {
			return nil, err
		}
		o.Jobs, o.StateDir = refs, *stateDir
		if runF != nil {
			return runF(o)
		}
		return statusRun(o)
	})
	return cmd
}

func statusRun(o *StatusOptions) (*clikit.Outcome, error) {
	st, err := openStore(o.Env, o.StateDir)
	if err != nil {
		return nil, err
	}
	list := make([]jobs.Status, 0, len(o.Jobs))
	for _, ref := range o.Jobs {
		s, err := st.Status(ref)
		if err != nil {
			// Which of several references failed is what the caller needs.
			return nil, result.AsError(err).With("job", ref)
		}
		list = append(list, s)
	}
	if len(list) == 1 {
		return &clikit.Outcome{Value: statusResult(list[0])}, nil
	}
	return &clikit.Outcome{Value: result.New().Set("success", true).Set("jobs", statusList(list))}, nil
}
