package agentjob

import (
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/audit"
	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/guard"
	"github.com/agentplane/agentplane/pkg/cli/sandboxflags"
	"github.com/agentplane/agentplane/pkg/execguard"
	"github.com/agentplane/agentplane/pkg/jobs"
	"github.com/agentplane/agentplane/pkg/policy"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/run"
	"github.com/agentplane/agentplane/pkg/sandbox"
)

// StartOptions are the flags and arguments of start.
type StartOptions struct {
	Env      *clikit.Env
	StateDir string

	Command      string
	Argv         []string
	Name         string
	Cwd          string
	Vars         []string
	Timeout      time.Duration
	ReadyLog     string
	ReadyHTTP    string
	ReadyTCP     string
	ReadyCmd     string
	ReadyTimeout time.Duration
	WaitReady    bool
	Restart      string
	MaxRestarts  int
	LogLimit     int64
	Sandbox      sandboxflags.Options
	Guard        guard.Options
	Backend      BackendOptions
	commandSet   bool // -c was given, possibly empty
	cmd          *cobra.Command
}

// NewCmdStart builds the start command. runF replaces the run function in
// tests that check flag parsing only.
func NewCmdStart(env *clikit.Env, stateDir *string, runF func(*StartOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &StartOptions{Env: env, Restart: jobs.RestartNo, LogLimit: jobs.DefaultLogLimit, ReadyTimeout: jobs.DefaultReadyTimeout}
	cmd := &cobra.Command{
		Use:   "start [flags] (-c 'SHELL STRING' | -- PROGRAM [ARG...])",
		Short: "Start a detached job and return its handle once it runs",
		Long: "Start a job under a supervisor of its own, detached from the caller's session and terminal: " +
			"it survives the CLI exiting and the caller's process tree being killed. The call returns once " +
			"the job runs (with --wait-ready, once it is ready or has failed); a job that cannot start is an error.",
		Annotations: jobAnnotations("agentjob_start", clikit.Hints{Destructive: true, OpenWorld: true}, "argv...", "the program and its arguments, run directly without a shell"),
		Args:        cobra.ArbitraryArgs,
	}
	f := cmd.Flags()
	// Flags after the program name belong to the program.
	f.SetInterspersed(false)
	f.StringVarP(&o.Command, "command", "c", "", "run this `STRING` through the shell (bash -c, else sh -c)")
	f.StringVar(&o.Name, "name", "", "a `NAME` usable instead of the handle")
	f.StringVar(&o.Cwd, "cwd", "", "run in `DIR`")
	f.StringArrayVar(&o.Vars, "env", nil, "set `K=V` in the job's environment (repeatable)")
	_ = f.SetAnnotation("env", clikit.AnnotObject, []string{"true"})
	f.Var(clikit.DurationValue{D: &o.Timeout}, "timeout", "stop the job after `D`, restarts included (0 = never)")
	f.StringVar(&o.ReadyLog, "ready-log", "", "the job is ready when a line of its output matches `REGEX`")
	f.StringVar(&o.ReadyHTTP, "ready-http", "", "the job is ready when `URL` answers with a status below 500")
	f.StringVar(&o.ReadyTCP, "ready-tcp", "", "the job is ready when `HOST:PORT` accepts a connection")
	f.StringVar(&o.ReadyCmd, "ready-cmd", "", "the job is ready when the shell command `CMD` exits 0")
	f.Var(clikit.DurationValue{D: &o.ReadyTimeout}, "ready-timeout", "fail the job if it is not ready within `D`")
	f.BoolVar(&o.WaitReady, "wait-ready", false, "return once the job is ready (or has failed) rather than once it runs")
	f.Var(clikit.EnumValue{S: &o.Restart, Allowed: []string{jobs.RestartNo, jobs.RestartOnFailure, jobs.RestartAlways}}, "restart", "restart policy: no, on-failure or always")
	f.IntVar(&o.MaxRestarts, "max-restarts", 0, "give up after `N` automatic restarts (0 = no limit; the backoff bounds the rate)")
	f.Var(clikit.SizeValue{N: &o.LogLimit}, "log-limit", "keep at most `BYTES` of each log stream, the newest part")
	for _, n := range []string{"ready-timeout", "log-limit", "max-restarts"} {
		clikit.MarkFlags(f, clikit.Configurable, n)
	}
	sandboxflags.AddFlags(f, &o.Sandbox)
	sandboxflags.AddLockFlag(f)
	guard.AddFlags(f, &o.Guard)
	o.Backend.AddFlags(f)
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		argv, err := env.Positional(cmd, args, 0)
		if err != nil {
			return nil, err
		}
		o.Argv, o.StateDir, o.commandSet, o.cmd = argv, *stateDir, clikit.FlagChanged(cmd, "command"), cmd
		if runF != nil {
			return runF(o)
		}
		return startRun(o)
	})
	return cmd
}

// spec validates the options into a job spec.
func (o *StartOptions) spec() (jobs.Spec, error) {
	var s jobs.Spec
	switch {
	case o.Command != "" && len(o.Argv) > 0:
		return s, result.Errorf(result.CodeUsage, "give either -c STRING or -- PROGRAM ARGS, not both")
	case o.commandSet && o.Command == "":
		return s, result.Errorf(result.CodeUsage, "-c needs a non-empty command string")
	case o.Command != "":
		if strings.ContainsRune(o.Command, 0) {
			return s, result.Errorf(result.CodeInvalidRequest, "the command contains a NUL byte")
		}
		// The same shell agentsh picks for -c, so a command behaves alike
		// in both programs.
		s.Shell, s.ShellProgram = o.Command, run.DefaultShell()
	case len(o.Argv) > 0:
		s.Argv = o.Argv
	default:
		return s, result.Errorf(result.CodeUsage, "no command: use -c 'STRING' or -- PROGRAM [ARG...]")
	}
	s.Cwd, _ = run.Cwd(o.Cwd)
	// A job gets the caller's environment with the non-interactive
	// defaults: nothing a job runs may wait for a human either.
	var err error
	if s.Env, err = run.BuildEnv(o.Env.Environ(), false, o.Vars); err != nil {
		return s, err
	}
	probe := jobs.Probe{Log: o.ReadyLog, HTTP: o.ReadyHTTP, TCP: o.ReadyTCP, Cmd: o.ReadyCmd, Timeout: o.ReadyTimeout}
	if !probe.Set() {
		probe.Timeout = 0
		if o.WaitReady {
			return s, result.Errorf(result.CodeUsage, "--wait-ready needs a readiness probe: --ready-log, --ready-http, --ready-tcp or --ready-cmd")
		}
	}
	s.Name, s.Description, s.Timeout, s.Ready = o.Name, o.Env.Description, o.Timeout, probe
	s.Restart, s.MaxRestarts, s.LogLimit = o.Restart, o.MaxRestarts, o.LogLimit
	if err := o.Backend.Apply(&s); err != nil {
		return s, err
	}
	return s, s.Validate()
}

func startRun(o *StartOptions) (out *clikit.Outcome, err error) {
	spec, err := o.spec()
	if err != nil {
		return nil, err
	}
	if o.cmd != nil {
		err = o.Guard.CheckSurface(o.Env, o.cmd, "", "env")
	} else {
		err = o.Guard.CheckEnv(o.Vars, nil)
	}
	if err != nil {
		return nil, err
	}
	// Every start, and every refusal, leaves one line in the audit log.
	var command any = spec.Argv
	if spec.Shell != "" {
		command = spec.Shell
	}
	began := time.Now()
	rec := audit.Record{Program: "agentjob", Operation: "start", Command: command, Cwd: spec.Cwd}
	defer func() {
		rec.DurationMS = time.Since(began).Milliseconds()
		if err != nil {
			guard.Fill(&rec, nil, false, err)
		} else if out != nil {
			if obj, ok := out.Value.(*result.Object); ok {
				if v, ok := obj.Get("handle"); ok {
					rec.Handle, _ = v.(string)
				}
				if v, ok := obj.Get("status"); ok {
					rec.Status, _ = v.(string)
				}
				if v, ok := obj.Get("pid"); ok {
					rec.PID, _ = v.(int)
				}
				if v, ok := obj.Get("sandbox"); ok {
					rec.Sandbox = v
				}
			}
		}
		guard.Audit(o.Env, o.StateDir, rec)
	}()
	// The command policy decides before anything starts, as in agentsh.
	decision, err := o.Guard.Decide(spec.Shell, spec.Argv)
	if err == nil && decision != nil && spec.Ready.Cmd != "" {
		// The readiness command runs too: it is decided like the job's.
		var ready *policy.Decision
		ready, err = o.Guard.Decide(spec.Ready.Cmd, nil)
		decision = policy.Merge(decision, ready)
	}
	guard.Fill(&rec, decision, o.Guard.Approved, err)
	if err != nil {
		return nil, err
	}
	if spec.Policy, err = o.Guard.RuntimePolicy(); err != nil {
		return nil, err
	}
	spec.PolicyApproved = o.Guard.Approved
	var report map[string]any
	// The floor holds also for a call that asks for no sandbox at all.
	if err := sandboxflags.CheckFloor(o.Env, &o.Sandbox); err != nil {
		return nil, err
	}
	o.Sandbox.StateDir, o.Sandbox.Control = o.StateDir, guard.ControlFiles(o.Env, &o.Guard)
	if p := o.Sandbox.Policy(o.Env, spec.Cwd); !p.Empty() {
		// Refuse here what the machine cannot enforce, and learn what
		// will be enforced; the supervisor prepares its own for the job.
		exe, err := os.Executable()
		if err != nil {
			return nil, result.Errorf(result.CodeSandboxUnavailable, "cannot find the agentjob executable for the sandbox helper: %v", err)
		}
		prep, err := sandbox.Prepare(p, exe)
		if err != nil {
			return nil, err
		}
		report = prep.Report
		prep.Cleanup()
		spec.Sandbox = &p
	}
	st, err := openStore(o.Env, o.StateDir)
	if err != nil {
		return nil, err
	}
	s, err := st.Start(o.Env.Ctx, spec)
	if err != nil {
		return nil, err
	}
	if !o.WaitReady {
		obj := statusResult(s)
		addGuardFields(obj, decision, spec.Policy != nil, report)
		return &clikit.Outcome{Value: obj}, nil
	}
	// The supervisor fails the job when --ready-timeout passes, so this
	// wait ends without a deadline of its own.
	got, err := st.Wait(o.Env.Ctx, []string{s.Handle}, jobs.ForReady, false)
	if err != nil {
		return nil, err
	}
	s = got[0]
	if s.Ready && !s.Ended() {
		obj := statusResult(s)
		addGuardFields(obj, decision, spec.Policy != nil, report)
		return &clikit.Outcome{Value: obj}, nil
	}
	obj := statusObject(result.New().Set("success", false), s)
	obj.Set("error", result.ErrorObject(result.Errorf(result.CodeNotReady, "job %s ended %s before it was ready", s.Handle, s.Status)))
	return &clikit.Outcome{Value: obj, Exit: ExitFailed}, nil
}

// addGuardFields reports the policy decision and the sandbox, when any.
func addGuardFields(o *result.Object, d *policy.Decision, enforced bool, report map[string]any) {
	if d != nil {
		obj := guard.Object(d, nil)
		if enforced {
			obj.Set("enforce", execguard.EnforceRuntime)
		}
		o.Set("policy", obj)
	}
	if report != nil {
		o.Set("sandbox", report)
	}
}
