package agentjob

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/jobs"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
)

// StopOptions are the flags and argument of stop.
type StopOptions struct {
	Env      *clikit.Env
	StateDir string
	Job      string
	Signal   string
	Grace    time.Duration
}

// NewCmdStop builds the stop command.
func NewCmdStop(env *clikit.Env, stateDir *string, runF func(*StopOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &StopOptions{Env: env, Signal: "TERM", Grace: jobs.DefaultKillGrace}
	cmd := &cobra.Command{
		Use:   "stop JOB",
		Short: "Stop a job's whole process tree; stopping an ended job is not an error",
		Long: "Send --signal to the job's process group and every descendant (including those that left the " +
			"group), and SIGKILL what remains after --grace. Returns once the job has ended. A lost job whose " +
			"process survived (orphan_pid) is killed too, and so is a supervisor that does not finish the stop " +
			"(killed or frozen meanwhile): the answer is never success while a process of the job runs " +
			"(stop_failed), nor running for a job it killed. It works on a full or read-only state directory " +
			"(the supervisor is then asked with SIGTERM and its default grace; --signal and a shorter --grace " +
			"are applied to the job directly) and on a job whose status.json is damaged.",
		Annotations: jobAnnotations("agentjob_stop", clikit.Hints{Destructive: true, Idempotent: true}, "job", "the job's handle or name"),
		Args:        cobra.ArbitraryArgs,
	}
	f := cmd.Flags()
	f.StringVar(&o.Signal, "signal", o.Signal, "first `SIGNAL` sent (name or number)")
	f.Var(clikit.DurationValue{D: &o.Grace}, "grace", "SIGKILL what remains after `D` (0 = at once)")
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		ref, err := oneRef(env, cmd, args)
		if err != nil {
			return nil, err
		}
		o.Job, o.StateDir = ref, *stateDir
		if runF != nil {
			return runF(o)
		}
		return stopRun(o)
	})
	return cmd
}

func stopRun(o *StopOptions) (*clikit.Outcome, error) {
	sig, err := proctree.ParseSignal(o.Signal)
	if err != nil {
		return nil, result.Errorf(result.CodeUsage, "--signal: %v", result.AsError(err).Message)
	}
	st, err := openStore(o.Env, o.StateDir)
	if err != nil {
		return nil, err
	}
	s, err := st.Stop(o.Env.Ctx, o.Job, sig, o.Grace)
	if err != nil {
		return nil, err
	}
	return &clikit.Outcome{Value: statusResult(s)}, nil
}
