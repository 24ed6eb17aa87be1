package agentjob

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/jobs"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
)

// Error codes of wait.
const (
	CodeWaitTimeout   = result.CodeWaitTimeout   // --timeout passed first
	CodeWaitCancelled = result.CodeWaitCancelled // SIGINT or SIGTERM came first
	CodeJobFailed     = result.CodeJobFailed     // the job ended, but not well
)

// WaitOptions are the flags and arguments of wait.
type WaitOptions struct {
	Env      *clikit.Env
	StateDir string
	Jobs     []string
	For      string
	Any      bool
	Timeout  time.Duration
}

// NewCmdWait builds the wait command.
func NewCmdWait(env *clikit.Env, stateDir *string, runF func(*WaitOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &WaitOptions{Env: env, For: jobs.ForExit}
	cmd := &cobra.Command{
		Use:   "wait JOB...",
		Short: "Block until jobs end (or are ready); exit 0 if it went well, 1 if not, 124 on timeout",
		Long: "Block, without polling, until the jobs end, or with --any the first of them, or with --for ready " +
			"until they are ready. Exit 0 when what was awaited happened and went well (exited 0, or ready), 1 " +
			"when a job ended otherwise (failed, stopped, timeout, lost), 124 when --timeout passed first; the " +
			"result is the current status either way, so 'agentjob wait \"$h\" && deploy' does the right thing. " +
			"For slurm jobs it also asks the scheduler once a second, since Slurm can end a job (cancel it while " +
			"pending, lose its node) without anything being written.",
		Annotations: jobAnnotations("agentjob_wait", clikit.Hints{ReadOnly: true, Idempotent: true}, "jobs...", "the jobs' handles or names"),
		Args:        cobra.ArbitraryArgs,
	}
	cmd.Annotations[clikit.AnnotToolDoc] = "Block until the jobs end, or with any the first of them, or with for set to ready until they are ready, or until timeout passes. The result is the jobs' current status either way: success is true when what was awaited happened and went well (the job exited 0, or is ready), false when a job ended otherwise (failed, stopped, timeout, lost) or timeout passed first (timed_out true)."
	f := cmd.Flags()
	f.Var(clikit.EnumValue{S: &o.For, Allowed: []string{jobs.ForExit, jobs.ForReady}}, "for", "wait for the jobs to exit or to be ready")
	f.BoolVar(&o.Any, "any", false, "return when the first of the jobs is done")
	f.Var(clikit.DurationValue{D: &o.Timeout}, "timeout", "give up after `D` and exit 124 (0 = wait forever)")
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		refs, err := env.Positional(cmd, args, 1)
		if err != nil {
			return nil, err
		}
		o.Jobs, o.StateDir = refs, *stateDir
		if runF != nil {
			return runF(o)
		}
		return waitRun(o)
	})
	return cmd
}

// went reports whether s is what the caller waited for and went well.
func went(s jobs.Status, what string) bool {
	if what == jobs.ForReady {
		return s.Ready && !s.Ended()
	}
	return s.Status == jobs.StatusExited
}

// done reports whether waiting for s is over.
func done(s jobs.Status, what string) bool {
	return s.Ended() || (what == jobs.ForReady && s.Ready)
}

func waitRun(o *WaitOptions) (*clikit.Outcome, error) {
	st, err := openStore(o.Env, o.StateDir)
	if err != nil {
		return nil, err
	}
	ctx := o.Env.Ctx
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	list, err := st.Wait(ctx, o.Jobs, o.For, o.Any)
	timedOut := errors.Is(err, context.DeadlineExceeded) && o.Env.Ctx.Err() == nil
	// A signal to the waiter ends the wait, not the jobs: it answers like
	// a timeout, with the statuses as they are.
	sig, cancelled := o.Env.Signal().(syscall.Signal)
	cancelled = cancelled && err != nil && o.Env.Ctx.Err() != nil
	if err != nil && !timedOut && !cancelled {
		return nil, err
	}
	// Judge the jobs that are done; with --any only those count, so a
	// failure of one does not hide the success that ended the wait.
	ok, failed := 0, ""
	first := ""
	for _, s := range list {
		if !done(s, o.For) {
			continue
		}
		if first == "" {
			first = s.Handle
		}
		if went(s, o.For) {
			ok++
		} else if failed == "" {
			failed = fmt.Sprintf("job %s ended %s", s.Handle, s.Status)
			if s.ExitCode != nil {
				failed += fmt.Sprintf(" with exit code %d", *s.ExitCode)
			}
		}
	}
	exit := ExitOK
	var rerr *result.Error
	switch {
	case timedOut:
		exit = ExitWaitTimeout
		rerr = result.Errorf(CodeWaitTimeout, "the wait timed out after %v", o.Timeout)
	case cancelled:
		exit = 128 + int(sig)
		rerr = result.Errorf(CodeWaitCancelled, "the wait was stopped by %s; the jobs go on", proctree.SignalName(sig))
	case o.Any && ok > 0:
	case failed != "":
		exit = ExitFailed
		rerr = result.Errorf(CodeJobFailed, "%s", failed)
	}
	var obj *result.Object
	if len(list) == 1 {
		obj = statusObject(result.New().Set("success", exit == ExitOK), list[0])
	} else {
		obj = result.New().Set("success", exit == ExitOK).Set("jobs", statusList(list))
		if o.Any && first != "" {
			obj.Set("first", first)
		}
	}
	if timedOut {
		obj.Set("timed_out", true)
	}
	if rerr != nil {
		obj.Set("error", result.ErrorObject(rerr))
	}
	return &clikit.Outcome{Value: obj, Exit: exit}, nil
}
