package guard

import (
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/audit"
	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/policy"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/state"
)

// AuditLog returns the environment's audit log.
func AuditLog(d *state.Dir) *audit.Log {
	return &audit.Log{Path: d.Join(audit.FileName)}
}

// Audit appends one record to the environment's audit log. A failure to
// record is reported on stderr with --verbose but never fails the call: the
// command has already run.
func Audit(env *clikit.Env, stateDir string, rec audit.Record) {
	d, err := env.OpenStateDir(stateDir)
	if err == nil {
		if rec.Description == "" {
			rec.Description = env.Description
		}
		err = AuditLog(d).Append(rec)
	}
	if err != nil {
		env.Logf("cannot write the audit log: %v", err)
	}
}

// Fill sets the record's decision fields from a policy decision and the
// refusal error, if any.
func Fill(rec *audit.Record, d *policy.Decision, approved bool, err error) {
	if d != nil {
		rec.Decision = d.Decision
		rec.Approved = approved && d.Decision == policy.Prompt
	}
	if err != nil {
		re := result.AsError(err)
		rec.ErrorCode = re.Code
		if rec.Status == "" {
			rec.Status = "refused"
		}
	}
}

// NewCmdAudit builds `PROGRAM audit [--since T] [--limit N] [--follow]`.
func NewCmdAudit(env *clikit.Env, stateDir *string) *cobra.Command {
	var since string
	var limit int
	var follow bool
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read the environment's audit log: one record per command run, never its output",
		Long: "Read the environment's audit log (audit.jsonl in the state directory): what agentsh, its " +
			"sessions and agentjob ran, with the caller's description, the cwd, the policy decision, the " +
			"sandbox, the status and exit code, and the duration. With --follow, print records as NDJSON as they are appended.",
		Annotations: map[string]string{clikit.AnnotTool: env.Program.Name + "_audit",
			clikit.AnnotToolDoc: "Read the environment's audit log: what agentsh, its sessions and agentjob ran, with the caller's description, the cwd, the policy decision, the sandbox, the status and exit code, and the duration; since and limit narrow it.", clikit.AnnotHints: clikit.Hints{ReadOnly: true, Idempotent: true}.String(),
			clikit.AnnotManResult: "records: the records at or after --since, oldest first (with --follow: one NDJSON line each)\n" +
				"time, program, operation, command, description, cwd, decision, approved, sandbox, status, exit_code, duration_ms, handle, session, error_code, pid, user: the fields of a record"},
		Example: "  agentsh audit --since 1h\n  agentsh audit --follow -q command",
	}
	cmd.Flags().StringVar(&since, "since", "", "only records at or after `T` (RFC 3339, or a duration such as 1h meaning that long ago)")
	cmd.Flags().IntVar(&limit, "limit", 0, "only the newest `N` records (0 = all)")
	cmd.Flags().BoolVar(&follow, "follow", false, "keep printing records as NDJSON as they are appended")
	clikit.MarkFlags(cmd.Flags(), clikit.ServerOwned, "follow")
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		if _, err := env.Positional(cmd, args, 0); err != nil {
			return nil, err
		}
		var t time.Time
		if since != "" {
			var err error
			if t, err = time.Parse(time.RFC3339, since); err != nil {
				dur, derr := clikit.ParseDuration(since)
				if derr != nil {
					return nil, result.Errorf(result.CodeUsage, "--since wants an RFC 3339 time or a duration, not %q", since)
				}
				t = time.Now().Add(-dur)
			}
		}
		d, err := env.OpenStateDir(*stateDir)
		if err != nil {
			return nil, err
		}
		log := AuditLog(d)
		if follow {
			env.Pretty = false
			err := log.Follow(env.Ctx, t, func(r audit.Record) error { return env.Emit(r) })
			if err != nil && env.Ctx.Err() == nil {
				return nil, result.Errorf(result.CodeAudit, "cannot follow %s: %v", filepath.Base(log.Path), err)
			}
			return &clikit.Outcome{Value: result.New().Set("success", true).Set("followed", true)}, nil
		}
		recs, err := log.Read(t, limit)
		if err != nil {
			return nil, result.Errorf(result.CodeAudit, "cannot read the audit log: %v", err)
		}
		if recs == nil {
			recs = []audit.Record{}
		}
		return &clikit.Outcome{Value: result.New().Set("success", true).Set("records", recs)}, nil
	})
	return cmd
}
