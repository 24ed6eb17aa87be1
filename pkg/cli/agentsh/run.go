package agentsh

import (
	"github.com/agentplane/agentplane/pkg/sandbox/spawn"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/audit"
	"github.com/agentplane/agentplane/pkg/capture"
	"github.com/agentplane/agentplane/pkg/cli/agentsh/early"
	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/guard"
	"github.com/agentplane/agentplane/pkg/cli/sandboxflags"
	"github.com/agentplane/agentplane/pkg/execguard"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/reexec"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/run"
	"github.com/agentplane/agentplane/pkg/sandbox"
)

// Defaults of CONTRACT §2.
const (
	DefaultTimeout   = 2 * time.Minute
	DefaultKillAfter = 5 * time.Second
	DefaultDrain     = 500 * time.Millisecond
	DefaultMaxOutput = 30000
)

// RunOptions are the flags of a one-shot run.
type RunOptions struct {
	// guard, when set, is the watchdog Main started early.
	guard *proctree.Pending
	// helper, when set, is the sandbox's helper Main started early.
	helper *spawn.Helper

	Command     string
	Cwd         string
	Env         []string
	ClearEnv    bool
	Stdin       string
	StdinFile   string
	Timeout     time.Duration
	KillAfter   time.Duration
	Signal      string
	Drain       time.Duration
	MaxOutput   int64
	Keep        string
	Merge       bool
	SaveOutput  string
	Raw         bool
	Tee         bool
	Stream      bool
	Binary      string
	ExitZero    bool
	Shell       string
	Session     string
	BusyTimeout time.Duration
	// ReplyMargin is the hidden session-reply-margin setting (see
	// session.Manager.ReplyMargin): only the environment or the config
	// file set it, for tests that wait for a hung server's deadline.
	ReplyMargin time.Duration
	Sandbox     sandboxflags.Options
	Guard       guard.Options
}

func config(fs clikit.Marker, names ...string) { clikit.MarkFlags(fs, clikit.Configurable, names...) }

func addRunFlags(cmd *cobra.Command, o *RunOptions) {
	o.Timeout, o.KillAfter, o.Drain, o.MaxOutput = DefaultTimeout, DefaultKillAfter, DefaultDrain, DefaultMaxOutput
	o.Keep, o.Signal = "both", "SIGTERM"
	f := cmd.Flags()
	f.StringVarP(&o.Command, "command", "c", "", "run this `STRING` through the shell (bash -c, else sh -c)")
	f.StringVar(&o.Cwd, "cwd", "", "run in `DIR`")
	f.StringArrayVar(&o.Env, "env", nil, "set `K=V` in the command's environment (repeatable)")
	_ = f.SetAnnotation("env", clikit.AnnotObject, []string{"true"})
	f.BoolVar(&o.ClearEnv, "clear-env", false, "start from an empty environment plus PATH, HOME, LANG, TERM, USER")
	f.StringVar(&o.Stdin, "stdin", "", "give the command this `STRING` on stdin (default: /dev/null)")
	f.StringVar(&o.StdinFile, "stdin-file", "", "give the command this `FILE` on stdin")
	f.Var(clikit.DurationValue{D: &o.Timeout}, "timeout", "stop the command after `D` (0 = no timeout)")
	f.Var(clikit.DurationValue{D: &o.KillAfter}, "kill-after", "grace `D` between the first signal and SIGKILL")
	f.StringVar(&o.Signal, "signal", o.Signal, "first `SIGNAL` sent on timeout")
	f.Var(clikit.DurationValue{D: &o.Drain}, "drain", "wait up to `D` for output after the main process exits")
	f.Var(clikit.SizeValue{N: &o.MaxOutput}, "max-output", "keep at most `BYTES` of each stream")
	f.Var(clikit.EnumValue{S: &o.Keep, Allowed: []string{"start", "end", "both"}}, "keep", "which part of an over-long stream to keep: start, end or both")
	f.BoolVar(&o.Merge, "merge-output", false, "capture stdout and stderr interleaved in one output field")
	f.StringVar(&o.SaveOutput, "save-output", "", "also write the whole streams to files in `DIR`")
	f.BoolVar(&o.Raw, "raw", false, "keep ANSI escapes and carriage returns")
	f.BoolVar(&o.Tee, "tee", false, "copy the command's output live to stderr")
	f.BoolVar(&o.Stream, "stream", false, "print NDJSON events as output arrives, then the result")
	f.Var(clikit.EnumValue{S: &o.Binary, Allowed: []string{"", "text", "base64"}}, "binary", "report output as text (default) or base64 of the raw bytes")
	f.BoolVar(&o.ExitZero, "exit-zero", false, "exit 0 whenever a result was printed")
	f.StringVar(&o.Shell, "shell", "", "shell `PROGRAM` for -c (default bash, else sh)")
	f.StringVar(&o.Session, "session", "", "run -c inside the persistent session `HANDLE` (or name)")
	f.Var(clikit.DurationValue{D: &o.BusyTimeout}, "busy-timeout", "with --session, wait up to `D` for a busy session")
	f.Var(clikit.DurationValue{D: &o.ReplyMargin}, "session-reply-margin", "with --session, allow a hung server `D` beyond the call's bounds (default 10s)")
	_ = f.MarkHidden("session-reply-margin")
	clikit.MarkFlags(f, clikit.NoRequest, "session-reply-margin")
	sandboxflags.AddFlags(f, &o.Sandbox)
	sandboxflags.AddLockFlag(f)
	guard.AddFlags(f, &o.Guard)
	clikit.MarkFlags(f, clikit.LocalFile, "stdin-file", "save-output")
	clikit.MarkFlags(f, clikit.ServerOwned, "tee", "stream", "exit-zero")
	config(f, "timeout", "kill-after", "signal", "drain", "max-output", "keep", "merge-output", "raw", "shell", "clear-env", "binary", "session-reply-margin")
}

// spec is a validated one-shot request.
type spec struct {
	req     run.Request
	command any // the string or the argv, as reported
	cwd     string
	render  capture.RenderOptions
}

// validateCall checks what a one-shot call and a session call share, once,
// so that the two paths give the same answer to the same flags: the
// command string, stdin, the output bound and --keep.
func validateCall(cmd *cobra.Command, o *RunOptions) (capture.Keep, error) {
	var keep capture.Keep
	if strings.ContainsRune(o.Command, 0) {
		return keep, result.Errorf(result.CodeInvalidRequest, "the command contains a NUL byte")
	}
	if clikit.FlagChanged(cmd, "stdin") && o.StdinFile != "" {
		return keep, result.Errorf(result.CodeUsage, "give either --stdin or --stdin-file, not both")
	}
	if o.MaxOutput > 1<<30 {
		return keep, result.Errorf(result.CodeUsage, "--max-output is limited to 1G: capture is held in memory")
	}
	keep, err := capture.ParseKeep(o.Keep)
	if err != nil {
		return keep, result.Errorf(result.CodeUsage, "--keep: %v", err)
	}
	return keep, nil
}

func buildSpec(cmd *cobra.Command, env *clikit.Env, o *RunOptions, args []string) (*spec, error) {
	argv, err := env.Positional(cmd, args, 0)
	if err != nil {
		return nil, err
	}
	s := &spec{}
	switch {
	case o.Command != "" && len(argv) > 0:
		return nil, result.Errorf(result.CodeUsage, "give either -c STRING (\"command\") or -- PROGRAM ARGS (\"argv\"), not both")
	case clikit.FlagChanged(cmd, "command") && o.Command == "":
		return nil, result.Errorf(result.CodeUsage, "-c (\"command\") needs a non-empty command string")
	case o.Command != "":
		s.req.Argv = run.ShellArgv(o.Shell, o.Command)
		s.command = o.Command
	case len(argv) > 0:
		s.req.Argv = argv
		s.command = argv
	default:
		return nil, result.Errorf(result.CodeUsage, "no command: use -c 'STRING' or -- PROGRAM [ARG...] (request keys \"command\" or \"argv\")")
	}
	keep, err := validateCall(cmd, o)
	if err != nil {
		return nil, err
	}
	cwd, _ := run.Cwd(o.Cwd)
	s.cwd = cwd
	s.req.Dir = cwd
	if s.req.Env, err = run.BuildEnv(env.Environ(), o.ClearEnv, o.Env); err != nil {
		return nil, err
	}
	if clikit.FlagChanged(cmd, "stdin") {
		s.req.Stdin = []byte(o.Stdin)
	}
	s.req.StdinFile = o.StdinFile
	sig, err := proctree.ParseSignal(o.Signal)
	if err != nil {
		return nil, result.Errorf(result.CodeUsage, "--signal: %s", result.AsError(err).Message)
	}
	s.req.Signal = sig
	s.req.Timeout, s.req.KillAfter, s.req.Drain = o.Timeout, o.KillAfter, o.Drain
	s.req.MaxOutput = int(o.MaxOutput)
	s.req.Keep = keep
	s.req.Merge = o.Merge
	s.req.SaveDir = o.SaveOutput
	s.render = capture.RenderOptions{Raw: o.Raw}
	if o.Binary == "base64" {
		s.render.Binary = "base64"
	}
	if o.Tee {
		s.req.Tee = &lockedWriter{w: env.Err}
	}
	return s, nil
}

func runRun(cmd *cobra.Command, env *clikit.Env, o *RunOptions, stateDir string, args []string) (out *clikit.Outcome, err error) {
	env.ExitZero = o.ExitZero
	s, err := buildSpec(cmd, env, o, args)
	if err != nil {
		return nil, err
	}
	if err := o.Guard.CheckSurface(env, cmd, "shell", "env"); err != nil {
		return nil, err
	}
	// The watchdog that kills the command's tree should agentsh itself be
	// SIGKILLed starts now, while the rest is prepared, and is released
	// once the tree is dead.
	guarded := o.guard
	if guarded == nil {
		guarded = early.StartGuard()
	}
	var cleanups []func()
	defer func() {
		for _, c := range cleanups {
			c()
		}
	}()
	defer guarded.Close()
	// Every run, and every refusal, leaves one line in the audit log.
	began := time.Now()
	rec := audit.Record{Program: "agentsh", Operation: "run", Command: s.command, Cwd: s.cwd}
	audit.Prepare()
	defer func() {
		rec.DurationMS = time.Since(began).Milliseconds()
		if err != nil {
			guard.Fill(&rec, nil, false, err)
		}
		if out != nil {
			if obj, ok := out.Value.(*result.Object); ok {
				fillFromResult(&rec, obj)
			}
		}
		guard.Audit(env, stateDir, rec)
	}()
	s.req.ReapAll = true
	s.req.Exempt = reexec.DetachedServers(s.req.Env)
	var st *streamer
	if o.Stream {
		env.Pretty = false
		st = newStreamer(env, s.render)
		s.req.OnStart = func(pid int) { _ = env.Emit(result.New().Set("type", "start").Set("pid", pid)) }
		s.req.OnOutput = st.chunk
	}
	// The command policy decides before anything starts.
	var script string
	var argv []string
	if str, ok := s.command.(string); ok {
		script = str
	} else {
		argv = s.command.([]string)
	}
	decision, err := o.Guard.DecideInput(script, argv, guard.StdinText(s.req.Stdin, s.req.StdinFile))
	guard.Fill(&rec, decision, o.Guard.Approved, err)
	if err != nil {
		return nil, err
	}
	startErr := func(err error) (*clikit.Outcome, error) {
		re := result.AsError(err)
		code := exitCode(re.Code)
		obj := result.New().Set("success", false).Set("status", run.StatusError).
			Set("exit_code", code).Set("error", result.ErrorObject(re)).
			Set("cwd", s.cwd).Set("command", s.command)
		if env.Description != "" {
			obj.Set("description", env.Description)
		}
		return &clikit.Outcome{Value: obj, Exit: code}, nil
	}
	// A missing cwd is reported the same way with or without a sandbox.
	if err := run.CheckDir(s.cwd); err != nil {
		return startErr(err)
	}
	// The floor is checked also when the call asks for no sandbox at all:
	// that is the loosest request.
	if err := sandboxflags.CheckFloor(env, &o.Sandbox); err != nil {
		return nil, err
	}
	o.Sandbox.StateDir, o.Sandbox.Control = stateDir, guard.ControlFiles(env, &o.Guard)
	policy := o.Sandbox.Policy(env, s.cwd)
	if policy.Empty() {
		o.helper.Discard() // the flags' guess was wrong
	}
	var prep *sandbox.Prepared
	// A command string too long for one argument reaches the shell
	// through a file, in the sandbox's temp dir when there is one.
	viaFile := func(dir string) error {
		str, ok := s.command.(string)
		if !ok || len(str) < run.MaxArgLen-1 {
			return nil
		}
		argv, remove, err := run.ScriptArgv(s.req.Argv[0], str, dir)
		if err != nil {
			return err
		}
		cleanups = append(cleanups, remove)
		s.req.Argv = argv
		return nil
	}
	if !policy.Empty() {
		if err := refuseFileKeys(cmd, env); err != nil {
			return nil, err
		}
		exe, err := os.Executable()
		if err != nil {
			return nil, result.Errorf(result.CodeSandboxUnavailable, "cannot find the agentsh executable for the sandbox helper: %v", err)
		}
		if prep, err = sandbox.Prepare(policy, exe); err != nil {
			return startErr(err)
		}
		defer prep.Cleanup()
		if err := viaFile(prep.TempDir); err != nil {
			return startErr(err)
		}
		target := s.req.Argv
		w := prep.Wrap(exe, "agentsh", s.req.Argv, s.req.Env)
		s.req.Path, s.req.Argv, s.req.Env, s.req.SysProcAttr = w.Path, w.Argv, w.Env, w.SysProcAttr
		prep.OnDeny = networkAuditor(env, stateDir, &rec)
		// The helper started at initialisation when it is this run's:
		// not under a command policy, whose runtime guard starts the
		// helper as its tracee.
		if !o.Guard.Active() && prep.Adopt(o.helper) {
			s.req.Start = func(env []string, dir string, stdio [3]*os.File) (*os.Process, error) {
				return prep.StartEarly(target, env, dir, stdio)
			}
		} else {
			// Not this run's: it goes now, not in the guard's cgroup
			// beside the run's own helper until the end.
			o.helper.Discard()
			files, started, err := prep.Launch()
			if err != nil {
				return startErr(err)
			}
			defer started()
			s.req.ExtraFiles = files
		}
		// The result is given on the helper's report of the command's
		// end, not at its exit, which waits for the namespaces' teardown.
		s.req.Ended = prep.Ended
	} else if err := viaFile(""); err != nil {
		return startErr(err)
	}
	// The policy also holds while the command runs: every exec in its
	// tree is decided by the guard, which wraps whatever runs (the
	// sandbox helper included).
	var rt *execguard.Report
	g, err := o.Guard.Runtime(selfExe())
	if err != nil {
		return nil, err
	}
	if g != nil && s.req.Start != nil {
		// Never: no helper started ahead is adopted under a command policy.
		return nil, result.Errorf(result.CodeInternal, "the sandbox's helper was started before the runtime guard")
	}
	if g != nil {
		defer g.Cleanup()
		s.req.Path, s.req.Argv, s.req.ExtraFiles = guard.Wrap(g, s.req.Path, s.req.Argv, s.req.ExtraFiles, prep != nil)
		// The main process is the guard, which reports nothing: the run
		// ends at its exit.
		s.req.Ended = nil
		onStart := s.req.OnStart
		s.req.OnStart = func(pid int) {
			g.Launched()
			if onStart != nil {
				onStart(pid)
			}
		}
	}
	// The runner waits for the watchdog only once its own preparation is
	// done, right before the command starts.
	s.req.AwaitGuard = guarded.Wait
	res, err := run.Run(env.Ctx, s.req)
	if st != nil {
		st.flush()
	}
	if g != nil {
		rt = g.Report()
		rec.PolicyRuntime = rt
		if prep != nil {
			// The guard traced every process: their deaths by a
			// limit's signal tell the limits children hit.
			prep.NoteTraced(rt.Deaths)
		}
		if err == nil && rt.Error != nil {
			err = rt.Err()
		}
	}
	if err == nil && prep != nil {
		err = prep.Failure()
		if err == nil && res.Status == run.StatusCompleted && s.req.Ended != nil && prep.DiedBeforeStart() {
			// Its exit status is not the command's: a crash of the
			// helper's runtime (no thread or memory to start with).
			err = result.Errorf(result.CodeSandboxFailed, "the sandbox helper died (exit status %d%s) before it started the command: that status is the helper's, and the command did not run", res.ExitCode, signalText(res.Signal))
		}
		res.ExitCode, res.Signal = prep.ExitStatus(res.ExitCode, res.Signal)
	}
	if err != nil {
		return startErr(err)
	}
	if res.Status == run.StatusCancelled {
		if sig, ok := env.Signal().(syscall.Signal); ok {
			res.ExitCode = ExitSignalBase + int(sig)
		}
	}
	env.Logf("%v: %s in %dms, exit %d", s.command, res.Status, res.Elapsed.Milliseconds(), res.ExitCode)
	if len(res.Leftover) > 0 {
		env.Logf("processes that survived SIGKILL: %v", res.Leftover)
	}
	obj := run.Render(res, s.render)
	obj.Set("cwd", s.cwd).Set("command", s.command).Set("pid", res.PID)
	if decision != nil {
		obj.Set("policy", guard.Object(decision, rt))
	}
	if prep != nil {
		// With the git metadata the command planted (sandbox.git.planted).
		rep := prep.EndReport()
		obj.Set("sandbox", rep)
		if n := prep.Network(); n != nil {
			obj.Set("network", n)
		}
		if hit := prep.LimitsHit(); len(hit) > 0 {
			// Reported even when the command exited 0: a fork or an
			// allocation inside it failed.
			rep["limits_hit"] = hit
		}
	}
	if rerr := rt.Err(); rerr != nil {
		// An exec the policy refused was killed before it ran, and the
		// rest of the tree with it: the call failed.
		re := result.AsError(rerr)
		obj.Set("success", false).Set("status", run.StatusError).Set("exit_code", ExitFailed).
			Set("error", result.ErrorObject(re))
		if env.Description != "" {
			obj.Set("description", env.Description)
		}
		return &clikit.Outcome{Value: obj, Exit: ExitFailed}, nil
	}
	if prep != nil && res.Status == run.StatusCompleted && res.ExitCode != 0 {
		if code := prep.Classify(res.ExitCode, res.Signal); code != "" {
			obj.Set("success", false)
			obj.Set("error", result.ErrorObject(result.Errorf(code, "the command hit the sandbox's %s", strings.ReplaceAll(strings.TrimSuffix(code, "_limit"), "_", " ")+" limit")))
		}
	}
	if env.Description != "" {
		obj.Set("description", env.Description)
	}
	return &clikit.Outcome{Value: obj, Exit: ExitStatus(res)}, nil
}

// refuseFileKeys refuses the request keys that name a file agentsh itself
// opens, outside the sandbox (the flags marked clikit.LocalFile): under a
// sandbox or --deny-read a request could read a hidden file through
// stdin_file or write anywhere through save_output. The same flags on the
// command line are the person's own, unless sandbox_lock holds what the
// command may read or write: the floor then holds for whoever chose the
// flags.
func refuseFileKeys(cmd *cobra.Command, env *clikit.Env) error {
	for _, f := range clikit.MarkedOn(cmd.Flags(), clikit.LocalFile) {
		if env.FromRequest(f) {
			key := clikit.ConfigKey(f)
			return result.Errorf(result.CodeInvalidRequest, "request key %q names a file agentsh would open outside the sandbox; give the content inline", key).
				With("key", key).With("hint", "use \"stdin\" for input; the result carries the output")
		}
		if !clikit.FlagChanged(cmd, f) {
			continue
		}
		if held, err := sandboxflags.HoldsFiles(env); err != nil {
			return err
		} else if held {
			return result.Errorf(result.CodeSandboxLocked, "--%s names a file agentsh would open outside the locked sandbox", f).
				With("hint", "the operator's config sets sandbox_lock; give the content inline (--stdin), the result carries the output")
		}
	}
	return nil
}

// selfExe is this program's executable, for the hidden helpers it starts
// (the sandbox helper, the policy guard).
func selfExe() string {
	exe, err := os.Executable()
	if err != nil {
		return "/proc/self/exe"
	}
	return exe
}

// ExitStatus is agentsh's exit status for a finished run.
func ExitStatus(res *run.Result) int {
	if res.Status == run.StatusTimeout {
		return ExitTimeout
	}
	if res.ExitCode < 0 {
		return ExitFailed
	}
	return res.ExitCode
}

// lockedWriter serialises writes from the two stream readers.
type lockedWriter struct {
	mu sync.Mutex
	w  interface{ Write([]byte) (int, error) }
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// streamer turns output chunks into NDJSON events, with one cleaner per
// stream that keeps state between chunks: a character, an escape sequence
// or a "\r" redraw split across two reads comes out as if read at once.
type streamer struct {
	env     *clikit.Env
	opt     capture.RenderOptions
	mu      sync.Mutex
	cleaner map[string]*capture.Stream
}

func newStreamer(env *clikit.Env, opt capture.RenderOptions) *streamer {
	return &streamer{env: env, opt: capture.RenderOptions{Raw: opt.Raw}, cleaner: map[string]*capture.Stream{}}
}

func (s *streamer) chunk(stream string, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cleaner[stream]
	if c == nil {
		c = capture.NewStream(s.opt)
		s.cleaner[stream] = c
	}
	s.emit(stream, c.Next(p))
}

func (s *streamer) emit(stream string, b []byte) {
	if len(b) == 0 {
		return
	}
	_ = s.env.Emit(result.New().Set("type", stream).Set("data", string(b)))
}

// flush emits what the cleaners held back, in a fixed order.
func (s *streamer) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range []string{"stdout", "stderr", "output"} {
		if c := s.cleaner[name]; c != nil {
			s.emit(name, c.Flush())
		}
	}
}

// signalText is ", signal NAME" for a signal death, else "".
func signalText(sig string) string {
	if sig == "" {
		return ""
	}
	return ", signal " + sig
}

// fillFromResult copies the outcome of a run into its audit record.
func fillFromResult(rec *audit.Record, obj *result.Object) {
	if v, ok := obj.Get("status"); ok {
		rec.Status, _ = v.(string)
	}
	if v, ok := obj.Get("exit_code"); ok {
		if n, ok := v.(int); ok {
			rec.ExitCode = &n
		}
	}
	if v, ok := obj.Get("pid"); ok {
		rec.PID, _ = v.(int)
	}
	if v, ok := obj.Get("sandbox"); ok {
		rec.Sandbox = v
	}
	if v, ok := obj.Get("error"); ok {
		if eo, ok := v.(*result.Object); ok {
			if c, ok := eo.Get("code"); ok {
				rec.ErrorCode, _ = c.(string)
			}
		}
	}
}
