package agentjob

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/jobs"
	"github.com/agentplane/agentplane/pkg/result"
)

// allStatuses are the values --status accepts.
func allStatuses() []string {
	return []string{jobs.StatusStarting, jobs.StatusRunning, jobs.StatusReady, jobs.StatusExited,
		jobs.StatusFailed, jobs.StatusStopped, jobs.StatusTimeout, jobs.StatusLost, jobs.StatusPending}
}

// ListOptions are the flags of list.
type ListOptions struct {
	Env      *clikit.Env
	StateDir string
	Status   []string
}

// NewCmdList builds the list command.
func NewCmdList(env *clikit.Env, stateDir *string, runF func(*ListOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &ListOptions{Env: env}
	cmd := &cobra.Command{
		Use:         "list",
		Short:       "List the environment's jobs, newest first",
		Annotations: jobAnnotations("agentjob_list", clikit.Hints{ReadOnly: true, Idempotent: true}, "", ""),
		Args:        cobra.ArbitraryArgs,
	}
	cmd.Flags().StringSliceVar(&o.Status, "status", nil, "only jobs with this status `S` (repeatable or comma separated): "+strings.Join(allStatuses(), ", "))
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		if _, err := env.Positional(cmd, args, 0); err != nil {
			return nil, err
		}
		o.StateDir = *stateDir
		if runF != nil {
			return runF(o)
		}
		return listRun(o)
	})
	return cmd
}

func listRun(o *ListOptions) (*clikit.Outcome, error) {
	for _, s := range o.Status {
		if !slices.Contains(allStatuses(), s) {
			return nil, result.Errorf(result.CodeUsage, "--status: unknown status %q", s).With("allowed", allStatuses())
		}
	}
	st, err := openStore(o.Env, o.StateDir)
	if err != nil {
		return nil, err
	}
	list, err := st.List(o.Status...)
	if err != nil {
		return nil, err
	}
	return &clikit.Outcome{Value: result.New().Set("success", true).Set("jobs", statusList(list))}, nil
}
