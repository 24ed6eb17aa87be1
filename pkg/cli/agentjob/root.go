// Package agentjob is the command tree of the agentjob program: detached
// jobs under a small supervisor, managed through opaque, environment-bound
// handles kept in a state directory.
package agentjob

import (
	"github.com/agentplane/agentplane/pkg/netproxy"

	"context"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/sandboxflags"
	"github.com/agentplane/agentplane/pkg/execguard"
	"github.com/agentplane/agentplane/pkg/jobs"
	"github.com/agentplane/agentplane/pkg/reexec"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox"
	"github.com/agentplane/agentplane/pkg/state"
)

// Exit statuses of agentjob. Never renumber.
const (
	ExitOK          = 0   // the operation succeeded
	ExitFailed      = 1   // the operation failed; the JSON says why
	ExitUsage       = 2   // usage error or invalid request
	ExitWaitTimeout = 124 // a wait whose --timeout passed first
)

// Program returns the agentjob program description for clikit.Main.
func Program() *clikit.Program {
	return &clikit.Program{
		Name:  "agentjob",
		Short: "Start detached jobs and manage them through opaque handles",
		Long: "agentjob starts detached jobs (dev servers, watchers, long builds) under a small supervisor " +
			"and reports their status, logs, readiness and lifecycle events as JSON.",
		ExitCode: exitCode,
		Build:    build,
		ExitStatus: [][2]string{
			{"0", "the operation succeeded; for wait, what it waited for happened and went well (exited 0, or ready)"},
			{"1", "the operation failed and the JSON says why (invalid_handle, job_expired, command_not_found, cwd_not_found, job_running, stop_failed, no_space for a full state disk, state_read_only for a read-only state directory, state_corrupt for a damaged state file, …); for wait, a job ended otherwise (failed, stopped, timeout, lost)"},
			{"2", "usage error or invalid request"},
			{"124", "a wait whose --timeout passed first; the result is the current status"},
		},
	}
}

func exitCode(code string) int {
	switch code {
	case result.CodeUsage, result.CodeInvalidRequest, result.CodeInvalidConfig:
		return ExitUsage
	}
	return ExitFailed
}

// Main runs agentjob with the given arguments and streams.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// The supervisor is dispatched before the cobra tree is built: it
	// costs a job no CLI start-up, and it has no JSON to print. A
	// sandboxed job starts inside this program as the sandbox helper, a
	// policed one under the runtime policy guard.
	if code, ok := reexec.Dispatch(args, hidden(), stdin, stderr); ok {
		return code
	}
	return clikit.Main(Program(), args, stdin, stdout, stderr)
}

// hidden is agentjob's part of the table of hidden entry points.
func hidden() map[string]reexec.Main {
	return map[string]reexec.Main{
		reexec.JobSupervisor: func(args []string, _ io.Reader, stderr io.Writer) int { return superviseMain(args, stderr) },
		reexec.SandboxHelper: func(args []string, _ io.Reader, _ io.Writer) int { return sandbox.HelperMain(args) },
		reexec.ExecGuard:     func(args []string, _ io.Reader, _ io.Writer) int { return execguard.Main(args) },
	}
}

// superviseMain is the hidden supervisor: argv is STATE_DIR ID, as
// openStore's supervisor command and the job id that Start appends. The
// supervisor handles SIGTERM itself (a stop request), so its context is
// never cancelled from here.
//
// A third argument is the Slurm job id: the slurm backend's batch script
// runs the supervisor on the allocated node with it.
func superviseMain(argv []string, stderr io.Writer) int {
	if len(argv) != 2 && len(argv) != 3 {
		io.WriteString(stderr, "agentjob: error: the supervisor wants STATE_DIR ID [SLURM_JOB_ID]\n")
		return ExitUsage
	}
	d, err := state.Open(argv[0])
	if err != nil {
		io.WriteString(stderr, "agentjob: error: "+err.Error()+"\n")
		return ExitFailed
	}
	// The launcher's digest of the spec is for this supervisor alone, not
	// the job's environment.
	digest := os.Getenv(jobs.SpecDigestEnv)
	os.Unsetenv(jobs.SpecDigestEnv)
	// Each automatic restart is held to the sandbox lock as configured
	// then, like an `agentjob restart` (restart.go): the supervisor reads
	// the operator's configuration from the environment the job was
	// started in. It runs in no call's directory, so a workspace the lock
	// takes from where a call is made is not held here.
	env := &clikit.Env{Program: Program(), LookupEnv: os.LookupEnv, Environ: os.Environ}
	opt := jobs.SupervisorOptions{Admit: func(spec jobs.Spec) error { return sandboxflags.CheckPolicyDetached(env, spec.Sandbox) }}
	run := func() error { return jobs.RunSupervisor(context.Background(), d, argv[1], digest, opt) }
	if len(argv) == 3 {
		if argv[2] == "" {
			io.WriteString(stderr, "agentjob: error: the scheduled supervisor got no Slurm job id\n")
			return ExitUsage
		}
		run = func() error { return jobs.RunScheduledSupervisor(context.Background(), d, argv[1], argv[2], opt) }
	}
	if err := run(); err != nil {
		io.WriteString(stderr, "agentjob: error: "+err.Error()+"\n")
		return ExitFailed
	}
	return ExitOK
}

// openStore opens the environment's job store. Supervisors are this very
// executable with argv[0] "agentjob" and the hidden subcommand as argv[1]:
// that is how agentsh recognises a supervisor it must not kill, and how a
// multi-program test binary knows which program to be.
func openStore(env *clikit.Env, stateDir string) (*jobs.Store, error) {
	d, err := env.OpenStateDir(stateDir)
	if err != nil {
		return nil, err
	}
	st := jobs.NewStore(d, []string{"agentjob", reexec.JobSupervisor, d.Path()})
	exe, err := os.Executable()
	if err != nil {
		return nil, result.Errorf(result.CodeStartFailed, "cannot find the agentjob executable: %v", err)
	}
	st.SetExecutable(exe)
	return st, nil
}

func build(root *cobra.Command, env *clikit.Env) {
	stateDir := new(string)
	clikit.AddStateDirFlag(root, stateDir)
	root.AddCommand(
		NewCmdStart(env, stateDir, nil),
		NewCmdStatus(env, stateDir, nil),
		NewCmdLogs(env, stateDir, nil),
		NewCmdWait(env, stateDir, nil),
		NewCmdStop(env, stateDir, nil),
		NewCmdRestart(env, stateDir, nil),
		NewCmdList(env, stateDir, nil),
		NewCmdRm(env, stateDir, nil),
		NewCmdGC(env, stateDir, nil),
		NewCmdEvents(env, stateDir, nil),
		newCmdMCP(root, env, stateDir),
	)
	annotateDocs(root)
}

// statusObject renders a job's status in the field order of CONTRACT §3,
// after "success" when it is given.
func statusObject(o *result.Object, s jobs.Status) *result.Object {
	o.Set("handle", s.Handle).Set("name", nullable(s.Name)).Set("status", s.Status).
		Set("exit_code", s.ExitCode).Set("signal", s.Signal).Set("pid", s.PID).
		Set("command", s.Command).Set("cwd", s.Cwd).Set("started_at", nullable(s.StartedAt)).
		Set("ended_at", s.EndedAt).Set("ready", s.Ready).Set("restarts", s.Restarts).
		Set("stdout_bytes", s.StdoutBytes).Set("stderr_bytes", s.StderrBytes).
		Set("description", nullable(s.Description))
	if s.Reason != "" {
		o.Set("reason", s.Reason)
	}
	if s.Denied != nil {
		o.Set("denied", s.Denied)
	}
	if s.LostReason != "" {
		o.Set("lost_reason", s.LostReason)
	}
	if s.OrphanPID != 0 {
		o.Set("orphan_pid", s.OrphanPID)
	}
	o.Set("backend", nullable(s.Backend))
	if s.SlurmJobID != "" {
		o.Set("slurm_job_id", s.SlurmJobID)
	}
	if s.SchedulerState != "" {
		o.Set("scheduler_state", s.SchedulerState)
	}
	if s.SchedulerError != "" {
		o.Set("scheduler_error", s.SchedulerError)
	}
	if s.StdoutLostBytes != 0 {
		o.Set("stdout_lost_bytes", s.StdoutLostBytes)
	}
	if s.StderrLostBytes != 0 {
		o.Set("stderr_lost_bytes", s.StderrLostBytes)
	}
	if s.Error != nil {
		o.Set("error", errorViewOf(s.Error))
	}
	if s.Network != nil {
		o.Set("network", s.Network)
	}
	return o
}

// errorView is the error of one job in a list (its state is damaged).
type errorView struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func errorViewOf(e *result.Error) *errorView {
	if e == nil {
		return nil
	}
	return &errorView{Code: e.Code, Message: e.Message}
}

// statusResult is the result of a call that reports one job.
func statusResult(s jobs.Status) *result.Object {
	return statusObject(result.New().Set("success", true), s)
}

// statusList renders several jobs for a "jobs" array. It encodes typed
// structs rather than one ordered object per job: a list of thousands of
// jobs is otherwise dominated by building and encoding those objects.
func statusList(list []jobs.Status) []statusView {
	out := make([]statusView, 0, len(list))
	for _, s := range list {
		out = append(out, viewOf(s))
	}
	return out
}

// statusView is statusObject as a struct: the same fields in the same
// order (a test keeps the two in step).
type statusView struct {
	Handle      string  `json:"handle"`
	Name        *string `json:"name"`
	Status      string  `json:"status"`
	ExitCode    *int    `json:"exit_code"`
	Signal      *string `json:"signal"`
	PID         int     `json:"pid"`
	Command     any     `json:"command"`
	Cwd         string  `json:"cwd"`
	StartedAt   *string `json:"started_at"`
	EndedAt     *string `json:"ended_at"`
	Ready       bool    `json:"ready"`
	Restarts    int     `json:"restarts"`
	StdoutBytes int64   `json:"stdout_bytes"`
	StderrBytes int64   `json:"stderr_bytes"`
	Description *string `json:"description"`
	Reason      string  `json:"reason,omitempty"`
	// Denied is the exec the runtime policy refused.
	Denied     *execguard.Exec `json:"denied,omitempty"`
	LostReason string          `json:"lost_reason,omitempty"`
	OrphanPID  int             `json:"orphan_pid,omitempty"`
	Backend    *string         `json:"backend"`
	SlurmJobID string          `json:"slurm_job_id,omitempty"`
	// SchedulerState and SchedulerError are a slurm job's scheduler view.
	SchedulerState string `json:"scheduler_state,omitempty"`
	SchedulerError string `json:"scheduler_error,omitempty"`
	// StdoutLostBytes and StderrLostBytes are output a full disk lost.
	StdoutLostBytes int64 `json:"stdout_lost_bytes,omitempty"`
	StderrLostBytes int64 `json:"stderr_lost_bytes,omitempty"`
	// Error is set on a job whose state is damaged (state_corrupt).
	Error *errorView `json:"error,omitempty"`
	// Network is a --net proxy job's allowlist and refusals.
	Network *netproxy.Report `json:"network,omitempty"`
}

func viewOf(s jobs.Status) statusView {
	ptr := func(v string) *string {
		if v == "" {
			return nil
		}
		return &v
	}
	return statusView{
		Handle: s.Handle, Name: ptr(s.Name), Status: s.Status, ExitCode: s.ExitCode, Signal: s.Signal,
		PID: s.PID, Command: s.Command, Cwd: s.Cwd, StartedAt: ptr(s.StartedAt), EndedAt: s.EndedAt,
		Ready: s.Ready, Restarts: s.Restarts, StdoutBytes: s.StdoutBytes, StderrBytes: s.StderrBytes,
		Description: ptr(s.Description), Reason: s.Reason, Denied: s.Denied, LostReason: s.LostReason, OrphanPID: s.OrphanPID,
		Backend: ptr(s.Backend), SlurmJobID: s.SlurmJobID, SchedulerState: s.SchedulerState, SchedulerError: s.SchedulerError,
		StdoutLostBytes: s.StdoutLostBytes, StderrLostBytes: s.StderrLostBytes, Error: errorViewOf(s.Error),
		Network: s.Network,
	}
}

// nullable shows an unset string as null rather than "".
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// oneRef returns the single job reference (a handle or a name) of a
// command annotated with one positional argument.
func oneRef(env *clikit.Env, cmd *cobra.Command, args []string) (string, error) {
	a, err := env.Positional(cmd, args, 1)
	if err != nil {
		return "", err
	}
	return a[0], nil
}

// jobAnnotations names a command's tool, what it does (hints) and its
// positional job argument.
func jobAnnotations(tool string, hints clikit.Hints, args, help string) map[string]string {
	m := map[string]string{clikit.AnnotTool: tool, clikit.AnnotHints: hints.String()}
	if args != "" {
		m[clikit.AnnotArgs] = args
		name := args
		if n := len(name); n > 3 && name[n-3:] == "..." {
			name = name[:n-3]
		}
		m[clikit.AnnotArgs+"."+name] = help
	}
	return m
}
