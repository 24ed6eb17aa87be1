package agentjob

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/state"
)

// EventsOptions are the flags of events.
type EventsOptions struct {
	Env      *clikit.Env
	StateDir string
	Since    int64
	Follow   bool
	Job      string
}

// NewCmdEvents builds the events command.
func NewCmdEvents(env *clikit.Env, stateDir *string, runF func(*EventsOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &EventsOptions{Env: env}
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the environment's durable lifecycle log as NDJSON",
		Long: "Print the lifecycle events (started, ready, exited, failed, stopped, timeout, restarted, lost) " +
			"after sequence number --since, one JSON object per line, then a final result with last_seq. " +
			"--follow keeps streaming until interrupted, so a loop can block on \"something happened\".",
		Annotations: jobAnnotations("agentjob_events", clikit.Hints{ReadOnly: true, Idempotent: true}, "", ""),
		Args:        cobra.ArbitraryArgs,
	}
	cmd.Annotations[clikit.AnnotToolDoc] = "List the environment's job lifecycle events (started, ready, exited, failed, stopped, timeout, restarted, lost) after sequence number since, optionally of one job, with last_seq to pass as since next time."
	f := cmd.Flags()
	f.Int64Var(&o.Since, "since", 0, "only events after sequence number `SEQ`")
	f.BoolVar(&o.Follow, "follow", false, "keep streaming new events until interrupted")
	clikit.MarkFlags(f, clikit.ServerOwned, "follow")
	f.StringVar(&o.Job, "job", "", "only the events of `JOB` (a handle or name)")
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		if _, err := env.Positional(cmd, args, 0); err != nil {
			return nil, err
		}
		o.StateDir = *stateDir
		if runF != nil {
			return runF(o)
		}
		return eventsRun(o)
	})
	return cmd
}

func eventsRun(o *EventsOptions) (*clikit.Outcome, error) {
	if o.Since < 0 {
		return nil, result.Errorf(result.CodeUsage, "--since must not be negative")
	}
	st, err := openStore(o.Env, o.StateDir)
	if err != nil {
		return nil, err
	}
	o.Env.Pretty = false
	last, n := o.Since, 0
	emit := func(evs []state.Event) {
		for _, e := range evs {
			_ = o.Env.Emit(e)
			last, n = e.Seq, n+1
		}
	}
	evs, err := st.Events(last, o.Job)
	if err != nil {
		return nil, err
	}
	emit(evs)
	for o.Follow {
		evs, err := st.WaitEvents(o.Env.Ctx, last, o.Job)
		if errors.Is(err, context.Canceled) {
			break
		}
		if err != nil {
			return nil, err
		}
		emit(evs)
	}
	return &clikit.Outcome{Value: result.New().Set("success", true).Set("count", n).Set("last_seq", last)}, nil
}
