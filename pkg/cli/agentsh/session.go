package agentsh

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/internal/ctlfile"
	"github.com/agentplane/agentplane/pkg/audit"
	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/guard"
	"github.com/agentplane/agentplane/pkg/cli/sandboxflags"
	"github.com/agentplane/agentplane/pkg/launch"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/reexec"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/run"
	"github.com/agentplane/agentplane/pkg/sandbox"
	"github.com/agentplane/agentplane/pkg/session"
	"github.com/agentplane/agentplane/pkg/state"
)

// DefaultIdleTimeout stops a session nobody used for this long.
const DefaultIdleTimeout = time.Hour

// SessionStartOptions are the flags of session start.
type SessionStartOptions struct {
	Cwd         string
	Env         []string
	ClearEnv    bool
	Shell       string
	IdleTimeout time.Duration
	// RecoverWait is the hidden session-recover-wait setting
	// (session.Spec.RecoverWait): only the environment or the config file
	// set it, for tests whose shells cannot come back from an interrupt.
	RecoverWait time.Duration
	Name        string
	Sandbox     sandboxflags.Options
	Guard       guard.Options
}

func manager(env *clikit.Env, stateDir string) (*session.Manager, error) {
	d, err := env.OpenStateDir(stateDir)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, result.Errorf(result.CodeSessionStartFailed, "cannot find the agentsh executable: %v", err)
	}
	return &session.Manager{Dir: d, Exe: exe}, nil
}

func newCmdSession(env *clikit.Env, stateDir *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Start, list, inspect and stop persistent shell sessions",
	}
	cmd.AddCommand(newCmdSessionStart(env, stateDir), newCmdSessionList(env, stateDir),
		newCmdSessionStatus(env, stateDir), newCmdSessionStop(env, stateDir), newCmdSessionLogs(env, stateDir))
	return cmd
}

func newCmdSessionStart(env *clikit.Env, stateDir *string) *cobra.Command {
	o := &SessionStartOptions{IdleTimeout: DefaultIdleTimeout}
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Start a persistent shell whose cwd, environment and functions survive between calls",
		Long: "Start a persistent shell session owned by the environment. cd, export, shell variables, " +
			"functions, aliases and an activated virtualenv persist from one 'agentsh --session' call to the next.",
		Annotations: map[string]string{clikit.AnnotTool: "agentsh_session_start",
			clikit.AnnotToolDoc: "Start a persistent shell session and return its handle (session). Pass the handle as session to agentsh_run: cd, export, shell variables, functions, aliases and an activated virtualenv persist from one call to the next. The session stops itself after idle_timeout without a call; agentsh_session_stop stops it at once.", clikit.AnnotHints: clikit.Hints{}.String()},
	}
	f := cmd.Flags()
	f.StringVar(&o.Cwd, "cwd", "", "start the shell in `DIR`")
	f.StringArrayVar(&o.Env, "env", nil, "set `K=V` in the shell's environment (repeatable)")
	_ = f.SetAnnotation("env", clikit.AnnotObject, []string{"true"})
	f.BoolVar(&o.ClearEnv, "clear-env", false, "start from an empty environment plus PATH, HOME, LANG, TERM, USER")
	f.StringVar(&o.Shell, "shell", "", "shell `PROGRAM` (default bash, else sh)")
	f.Var(clikit.DurationValue{D: &o.IdleTimeout}, "idle-timeout", "stop the session after `D` without a call (0 = never)")
	f.StringVar(&o.Name, "name", "", "a `NAME` usable instead of the handle")
	sandboxflags.AddFlags(f, &o.Sandbox)
	sandboxflags.AddLockFlag(f)
	guard.AddPolicyFlags(f, &o.Guard)
	f.Var(clikit.DurationValue{D: &o.RecoverWait}, "session-recover-wait", "replace an interrupted shell that has not answered within `D` (default 2s)")
	_ = f.MarkHidden("session-recover-wait")
	clikit.MarkFlags(f, clikit.NoRequest, "session-recover-wait")
	config(f, "shell", "idle-timeout", "clear-env", "session-recover-wait")
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		if _, err := env.Positional(cmd, args, 0); err != nil {
			return nil, err
		}
		// Under a policy the session's shell and environment are the
		// operator's: calls are decided as that shell runs them.
		if err := o.Guard.CheckSurface(env, cmd, "shell", "env"); err != nil {
			return nil, err
		}
		m, err := manager(env, *stateDir)
		if err != nil {
			return nil, err
		}
		o.Sandbox.StateDir, o.Sandbox.Control = m.Dir.Path(), guard.ControlFiles(env, &o.Guard)
		// The floor first: it gives the session the floor's workspace
		// before the spec makes the policy (else --cwd would be it).
		if err := sandboxflags.CheckFloor(env, &o.Sandbox); err != nil {
			return nil, err
		}
		spec, err := sessionSpec(env, o)
		if err != nil {
			return nil, err
		}
		// With a policy in force, the shell is traced for its life so
		// that every call's policy also holds while the call runs.
		if pol, err := o.Guard.RuntimePolicy(); err != nil {
			return nil, err
		} else if pol != nil {
			spec.PolicyGuard = true
		}
		info, err := m.Start(spec, []string{"agentsh", reexec.SessionServer, m.Dir.Path()})
		if err != nil {
			return nil, err
		}
		return &clikit.Outcome{Value: infoObject(info)}, nil
	})
	return cmd
}

func sessionSpec(env *clikit.Env, o *SessionStartOptions) (session.Spec, error) {
	cwd, _ := run.Cwd(o.Cwd)
	e, err := run.BuildEnv(env.Environ(), o.ClearEnv, o.Env)
	if err != nil {
		return session.Spec{}, err
	}
	shell := o.Shell
	if shell == "" {
		shell = "bash"
	}
	path, err := exec.LookPath(shell)
	if err != nil {
		if o.Shell != "" {
			return session.Spec{}, result.Errorf(result.CodeCommandNotFound, "shell not found: %s", shell)
		}
		path = "/bin/sh"
	}
	var args []string
	if filepath.Base(path) == "bash" {
		// No startup files: a session must behave the same for every user.
		args = []string{"--noprofile", "--norc"}
	}
	spec := session.Spec{Shell: path, ShellArgs: args, Cwd: cwd, Env: e, IdleTimeout: o.IdleTimeout, RecoverWait: o.RecoverWait, Name: o.Name, Description: env.Description}
	if p := o.Sandbox.Policy(env, cwd); !p.Empty() {
		spec.Sandbox = &p
	}
	return spec, nil
}

func infoObject(info *session.Info) *result.Object {
	obj := result.New().Set("success", true)
	b, _ := json.Marshal(info)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for _, k := range []string{"session", "name", "status", "pid", "cwd", "shell", "started_at", "last_used_at", "ended_at", "ended_reason", "calls", "resets", "idle_timeout_ms", "description", "sandbox", "background"} {
		if v, ok := m[k]; ok {
			obj.Set(k, v)
		}
	}
	return obj
}

func newCmdSessionList(env *clikit.Env, stateDir *string) *cobra.Command {
	cmd := &cobra.Command{Use: "list", Short: "List the environment's sessions, newest first",
		Annotations: map[string]string{clikit.AnnotTool: "agentsh_session_list", clikit.AnnotHints: clikit.Hints{ReadOnly: true, Idempotent: true}.String()}}
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		if _, err := env.Positional(cmd, args, 0); err != nil {
			return nil, err
		}
		m, err := manager(env, *stateDir)
		if err != nil {
			return nil, err
		}
		list, err := m.List()
		if err != nil {
			return nil, err
		}
		items := make([]*result.Object, 0, len(list))
		for _, i := range list {
			o := infoObject(i)
			o.Delete("success")
			items = append(items, o)
		}
		return &clikit.Outcome{Value: result.New().Set("success", true).Set("sessions", items)}, nil
	})
	return cmd
}

func newCmdSessionStatus(env *clikit.Env, stateDir *string) *cobra.Command {
	cmd := &cobra.Command{Use: "status SESSION", Short: "Report one session",
		Annotations: map[string]string{clikit.AnnotTool: "agentsh_session_status", clikit.AnnotHints: clikit.Hints{ReadOnly: true, Idempotent: true}.String(), clikit.AnnotArgs: "session"}}
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		a, err := env.Positional(cmd, args, 1)
		if err != nil {
			return nil, err
		}
		m, err := manager(env, *stateDir)
		if err != nil {
			return nil, err
		}
		info, err := m.Status(a[0])
		if err != nil {
			return nil, err
		}
		return &clikit.Outcome{Value: infoObject(info)}, nil
	})
	return cmd
}

func newCmdSessionStop(env *clikit.Env, stateDir *string) *cobra.Command {
	cmd := &cobra.Command{Use: "stop SESSION", Short: "Stop a session: kill its shell and everything it started",
		Annotations: map[string]string{clikit.AnnotTool: "agentsh_session_stop", clikit.AnnotHints: clikit.Hints{Destructive: true, Idempotent: true}.String(), clikit.AnnotArgs: "session"}}
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		a, err := env.Positional(cmd, args, 1)
		if err != nil {
			return nil, err
		}
		m, err := manager(env, *stateDir)
		if err != nil {
			return nil, err
		}
		info, err := m.Stop(env.Ctx, a[0])
		if err != nil {
			return nil, err
		}
		return &clikit.Outcome{Value: infoObject(info)}, nil
	})
	return cmd
}

// SessionLogsOptions are the flags of session logs.
type SessionLogsOptions struct {
	SinceLast bool
	Tail      int
	Raw       bool
}

func newCmdSessionLogs(env *clikit.Env, stateDir *string) *cobra.Command {
	o := &SessionLogsOptions{}
	cmd := &cobra.Command{Use: "logs SESSION", Short: "Read what the session's background processes wrote after their call returned",
		Long: "Read the session's background log: the output that processes left running by a call (cmd &) wrote " +
			"after that call returned. The log is bounded (the oldest part is dropped); offsets are absolute.",
		Annotations: map[string]string{clikit.AnnotTool: "agentsh_session_logs", clikit.AnnotHints: clikit.Hints{ReadOnly: true}.String(), clikit.AnnotArgs: "session"}}
	f := cmd.Flags()
	f.BoolVar(&o.SinceLast, "since-last", false, "only what the previous 'session logs --since-last' did not return")
	f.IntVar(&o.Tail, "tail", 0, "only the last `N` lines")
	f.BoolVar(&o.Raw, "raw", false, "keep ANSI escapes and carriage returns")
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		a, err := env.Positional(cmd, args, 1)
		if err != nil {
			return nil, err
		}
		if o.Tail < 0 {
			return nil, result.Errorf(result.CodeUsage, "--tail wants a number of lines, not %d", o.Tail)
		}
		if o.SinceLast && o.Tail > 0 {
			return nil, result.Errorf(result.CodeUsage, "--since-last and --tail do not go together")
		}
		m, err := manager(env, *stateDir)
		if err != nil {
			return nil, err
		}
		out, info, err := m.Logs(a[0], session.LogsRequest{SinceLast: o.SinceLast, Tail: o.Tail, Raw: o.Raw})
		if err != nil {
			return nil, err
		}
		obj := result.New().Set("success", true).Set("session", info.Session).Set("status", info.Status).
			Set("data", out.Data).Set("offset", out.Offset).Set("next_offset", out.NextOffset)
		if out.DroppedBytes > 0 {
			obj.Set("dropped_bytes", out.DroppedBytes)
		}
		obj.Set("background", info.Background)
		return &clikit.Outcome{Value: obj}, nil
	})
	return cmd
}

// runInSession sends a one-shot request to a session.
func runInSession(cmd *cobra.Command, env *clikit.Env, o *RunOptions, stateDir string, args []string) (*clikit.Outcome, error) {
	argv, err := env.Positional(cmd, args, 0)
	if err != nil {
		return nil, err
	}
	if len(argv) > 0 {
		return nil, result.Errorf(result.CodeUsage, "--session runs a shell string: use -c 'STRING', not an argv")
	}
	if o.Command == "" {
		return nil, result.Errorf(result.CodeUsage, "no command: use --session HANDLE -c 'STRING'")
	}
	if _, err := validateCall(cmd, o); err != nil {
		return nil, err
	}
	for _, name := range []string{"cwd", "env", "clear-env", "save-output", "tee", "shell", "signal"} {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			return nil, result.Errorf(result.CodeUsage, "--%s does not apply to a session call: the session keeps its own shell state (use cd or export in it)", name)
		}
	}
	req := session.CallRequest{
		Command: o.Command, Timeout: o.Timeout, KillAfter: o.KillAfter, Drain: o.Drain,
		MaxOutput: int(o.MaxOutput), Keep: o.Keep, Merge: o.Merge, Raw: o.Raw, Binary: o.Binary,
		BusyTimeout: o.BusyTimeout, Stream: o.Stream, Description: env.Description,
	}
	if o.Binary == "text" {
		req.Binary = ""
	}
	if clikit.FlagChanged(cmd, "stdin") {
		s := o.Stdin
		req.Stdin = &s
	} else if o.StdinFile != "" {
		b, err := os.ReadFile(o.StdinFile)
		if err != nil {
			return nil, result.Errorf(result.CodeStdinFile, "cannot read stdin file %s: %v", o.StdinFile, err)
		}
		s := string(b)
		req.Stdin = &s
	}
	m, err := manager(env, stateDir)
	if err != nil {
		return nil, err
	}
	m.ReplyMargin = o.ReplyMargin
	// The connection is made while the checks below run; the request goes
	// only once they passed.
	conn := m.Dial(o.Session)
	defer conn.Close()
	if req.Sandbox, err = checkSessionSandbox(cmd, env, o, m); err != nil {
		return nil, err
	}
	sig := env.Signal
	req.CancelSignal = func() syscall.Signal {
		if s, ok := sig().(syscall.Signal); ok {
			return s
		}
		return 0
	}
	began := time.Now()
	rec := audit.Record{Program: "agentsh", Operation: "session_call", Command: o.Command, Session: o.Session}
	audit.Prepare()
	// The caller's policy decides before the command reaches the session.
	decision, err := o.Guard.DecideInput(o.Command, nil, req.Stdin)
	guard.Fill(&rec, decision, o.Guard.Approved, err)
	if err != nil {
		guard.Audit(env, stateDir, rec)
		return nil, err
	}
	// ... and while it runs, when the session's shell is traced.
	if req.Policy, err = o.Guard.RuntimePolicy(); err != nil {
		return nil, err
	}
	req.PolicyApproved = o.Guard.Approved
	var onEvent func(stream, data string)
	if o.Stream {
		env.Pretty = false
		onEvent = func(stream, data string) {
			_ = env.Emit(result.New().Set("type", stream).Set("data", data))
		}
		// As in a one-shot stream, the first event says the command runs
		// (the pid is the session's shell's).
		req.OnStart = func(pid int) { _ = env.Emit(result.New().Set("type", "start").Set("pid", pid)) }
	}
	raw, err := conn.Call(env.Ctx, req, onEvent)
	if err != nil {
		guard.Fill(&rec, nil, false, err)
		rec.DurationMS = time.Since(began).Milliseconds()
		guard.Audit(env, stateDir, rec)
		return nil, err
	}
	probe := readCallResult(raw)
	code := probe.ExitCode
	rec.PolicyRuntime = probe.PolicyRuntime
	rec.Status, rec.ExitCode, rec.Cwd, rec.PID, rec.Sandbox = probe.Status, &code, probe.Cwd, probe.PID, probe.Sandbox
	if probe.Session != "" {
		rec.Session = probe.Session
	}
	rec.DurationMS = time.Since(began).Milliseconds()
	guard.Audit(env, stateDir, rec)
	exit := probe.ExitCode
	if probe.Status == "timeout" {
		exit = ExitTimeout
	}
	if probe.ErrorCode == result.CodePolicyDenied || probe.ErrorCode == result.CodeApprovalRequired {
		// The policy refused an exec while the call ran.
		rec.ErrorCode = probe.ErrorCode
		exit = ExitFailed
	}
	return &clikit.Outcome{Value: raw, Exit: exit}, nil
}

// callResult is what a session call's client reads of the result for its
// audit record and exit status.
type callResult struct {
	Status, Cwd, Session, ErrorCode string
	ExitCode, PID                   int
	// Sandbox and PolicyRuntime are what encoding/json decodes into any.
	Sandbox, PolicyRuntime any
}

// readCallResult reads raw's fields with gjson, as json.Unmarshal into
// their types would: the sandbox and the runtime policy, there only for a
// sandboxed session or a traced shell, go through encoding/json, whose
// first use in a process is 0.3 to 0.5 ms (see session.CallSandbox).
// TestReadCallResult holds it to json.Unmarshal.
func readCallResult(raw []byte) callResult {
	var r callResult
	v := gjson.ParseBytes(raw)
	str := func(f gjson.Result) string {
		if f.Type == gjson.String {
			return f.Str
		}
		return ""
	}
	num := func(f gjson.Result) int {
		if f.Type != gjson.Number {
			return 0
		}
		n, err := strconv.Atoi(f.Raw)
		if err != nil {
			return 0
		}
		return n
	}
	r.Status, r.Cwd, r.Session = str(v.Get("status")), str(v.Get("cwd")), str(v.Get("session"))
	r.ExitCode, r.PID = num(v.Get("exit_code")), num(v.Get("pid"))
	r.ErrorCode = str(v.Get("error.code"))
	decode := func(f gjson.Result) any {
		if !f.Exists() || f.Type == gjson.Null {
			return nil
		}
		var a any
		_ = json.Unmarshal([]byte(f.Raw), &a)
		return a
	}
	r.Sandbox = decode(v.Get("sandbox"))
	r.PolicyRuntime = decode(v.Get("policy.runtime"))
	return r
}

// sandboxFlags are the flags that make up a sandbox policy.
var sandboxFlags = []string{"sandbox", "workspace", "allow-write", "deny-read", "net", "memory", "cpu-time", "pids", "file-size", "nofile", "user"}

// checkSessionSandbox holds a session call to the session's own sandbox:
// sandbox flags given on the call must describe exactly that sandbox (a
// call can neither loosen nor tighten it), and under sandbox_lock a session
// weaker than the operator's floor refuses the call. It returns the digest
// of the sandbox it checked, which the server compares with its own.
func checkSessionSandbox(cmd *cobra.Command, env *clikit.Env, o *RunOptions, m *session.Manager) (string, error) {
	pol, cwd, err := m.CallSandbox(o.Session)
	if err != nil {
		return "", err
	}
	own := sandbox.Policy{Mode: sandbox.ModeNone, Net: sandbox.NetHost}
	if pol != nil {
		own = *pol
	}
	if o.Guard.Active() {
		if _, err := o.Guard.Load(); err != nil {
			return "", err
		}
	}
	var kept session.Kept
	if pol != nil {
		if kept, err = m.SandboxKept(o.Session); err != nil {
			return "", err
		}
	}
	if err := checkSessionFiles(pol, kept, o.Guard.Read(), env); err != nil {
		return "", err
	}
	own = normalPolicy(own)
	if !own.Empty() {
		// A request must not read a file past the session's sandbox.
		if err := refuseFileKeys(cmd, env); err != nil {
			return "", err
		}
	}
	given := false
	for _, name := range sandboxFlags {
		if clikit.FlagChanged(cmd, name) && !fromConfig(cmd, env, name) {
			given = true
		}
	}
	if given {
		if got := normalPolicy(o.Sandbox.Policy(env, cwd)); !reflect.DeepEqual(got, own) {
			return "", result.Errorf(result.CodeUsage, "sandbox flags on a session call must match the session's own sandbox (a call cannot loosen or tighten it)").
				With("session_sandbox", own.Mode).With("hint", "start a session with the sandbox you want")
		}
	}
	return session.SandboxDigest(pol), sandboxflags.CheckPolicy(env, &own)
}

// checkSessionFiles refuses a call that reads a file the session's shell
// could have rewritten: a policy rule file or a config file (whose
// settings include the policy) that the session's sandbox did not protect
// from its start. The shell's sandbox is fixed when it starts and every
// earlier call ran in it, so only what it protected then, by that path
// (the links on the way pinned, the file or its directory bound
// read-only), is known to be the operator's: a file anywhere else may
// have been written by an earlier call, or reached through a link one
// planted (into the workspace, its temp dir, the cache).
func checkSessionFiles(pol *sandbox.Policy, k session.Kept, rules []ctlfile.File, env *clikit.Env) error {
	if pol == nil || pol.Mode != sandbox.ModeWorkspaceWrite && pol.Mode != sandbox.ModeReadOnly {
		return nil // the shell writes wherever the user can: nothing is kept from it
	}
	// What the shell's sandbox binds read-only, where it was when the
	// session started: not the protected names resolved again now (a
	// link the operator pointed elsewhere since leads to a file that
	// sandbox never kept).
	kept := map[string]bool{}
	for _, p := range k.Protected {
		kept[p] = true
	}
	// A file read is safe if it is itself a protected file, or directly
	// in a protected directory (bound read-only), and has no other name
	// the shell could have written it through. Which file was read is the
	// kernel's word for the open file, not the name spelled again.
	unsafe := func(f ctlfile.File) string {
		switch {
		case f.Real == "":
			return "the file read cannot be told"
		case f.Links != 1:
			return "the file read (" + f.Real + ") has another name"
		case !kept[f.Real] && !kept[filepath.Dir(f.Real)]:
			if abs, _ := filepath.Abs(f.Path); f.Real != abs {
				return "the file read is " + f.Real
			}
			return "protected"
		case kept[f.Real] && underAny(filepath.Dir(f.Real), k.Writable) && (f.ID == "" || k.IDs[f.Real] != f.ID):
			// A new file renamed into place since the session started
			// (an editor's save, a temp file and mv), in a directory
			// the shell can write: it could have written that file
			// under its temporary name first.
			return "it was replaced since the session started, from a directory the session's shell can write; start a new session to use the new file"
		}
		return ""
	}
	for _, f := range rules {
		if why := unsafe(f); why != "" {
			msg := "the policy file %s was not named when the session started, so its sandbox does not keep the session's shell from rewriting it"
			if why != "protected" {
				msg = "the policy file %s is not one the session's sandbox keeps from the session's shell (" + why + ")"
			}
			return result.Errorf(result.CodeUsage, msg, f.Path).
				With("hint", "name the policy files when starting the session (agentsh session start --policy FILE)")
		}
	}
	// Every config file is read now (those shadowed too), so that each one
	// there is checked as the file read.
	if _, err := env.Sources(); err != nil {
		return err
	}
	for _, c := range env.ConfigFiles() {
		why := ""
		if f, ok := env.ConfigRead(c.Path); ok {
			why = unsafe(f)
		} else {
			// Not there: the shell must not have been able to remove or
			// create it.
			p := ctlfile.Abs(c.Path)
			if !c.Explicit {
				p = filepath.Dir(p) // a default file is protected through its directory
			}
			real := p
			if r, err := filepath.EvalSymlinks(p); err == nil {
				real = r
			}
			// (A directory missing outside the writable roots is in no
			// report: the shell cannot create it.)
			if !kept[real] && !(real == p && slices.Contains(pol.Protect, p)) {
				why = "protected"
			}
		}
		if why != "" {
			detail := ""
			if why != "protected" {
				detail = " (" + why + ")"
			}
			return result.Errorf(result.CodeUsage, "the config file %s is not one the session's sandbox protects from its start, so the session's shell could have rewritten it%s", c.Path, detail).
				With("hint", "give the session's calls the config (--config, AGENTPLANE_CONFIG, XDG_CONFIG_HOME, HOME) the session was started with")
		}
	}
	return nil
}

// underAny reports whether path is one of roots or below one.
func underAny(path string, roots []string) bool {
	for _, r := range roots {
		if path == r || strings.HasPrefix(path, strings.TrimSuffix(r, "/")+"/") {
			return true
		}
	}
	return false
}

// fromConfig reports whether the flag's value is the operator's configured
// default rather than something the caller gave.
func fromConfig(cmd *cobra.Command, env *clikit.Env, name string) bool {
	vals, ok := env.Configured(cmd, name)
	if !ok {
		return false
	}
	f := cmd.Flags().Lookup(name)
	if f.Value.Type() == "stringArray" {
		return true
	}
	return len(vals) == 1 && vals[0] == f.Value.String()
}

// normalPolicy spells the defaults one way, so that two policies that
// mean the same compare equal.
func normalPolicy(p sandbox.Policy) sandbox.Policy {
	if p.Mode == "" {
		p.Mode = sandbox.ModeNone
	}
	if p.Net == "" {
		p.Net = sandbox.NetHost
	}
	if p.Mode != sandbox.ModeWorkspaceWrite {
		p.Workspace = ""
	}
	if len(p.AllowWrite) == 0 {
		p.AllowWrite = nil
	}
	if len(p.DenyRead) == 0 {
		p.DenyRead = nil
	}
	// What the program adds (call files, control files, caches) is not
	// the caller's to match.
	p.WriteFiles, p.Protect, p.Hide, p.CacheDir = nil, nil, nil, ""
	// Nor is the lock's floor the policy was checked against.
	p.Floors = nil
	return p
}

// serveMain is the hidden session server: argv is STATE_DIR ID. It runs
// before the cobra tree is built, so a server costs no CLI start-up.
// keptServer marks the session server that a keeper started
// (proctree.RunKeeperAbove), so that it serves instead of keeping.
const keptServer = "AGENTPLANE_KEPT_SERVER"

func serveMain(argv []string) int {
	if len(argv) != 2 {
		return ExitFailed
	}
	// Without a cgroup to hold the shell's tree, the server runs below a
	// keeper of its own (this same entry point, marked by keptServer): its
	// SIGKILL leaves the tree to the keeper, which kills it.
	if os.Getenv(keptServer) == "" && proctree.NeedsKeeper() {
		if exe, err := os.Executable(); err == nil {
			env := append(os.Environ(), keptServer+"=1")
			return proctree.RunKeeperAbove(exe, append([]string{"agentsh", reexec.SessionServer}, argv...), env,
				reexec.DetachedServers(os.Environ()))
		}
	}
	os.Unsetenv(keptServer)
	d, err := state.Open(argv[0])
	if err != nil {
		return ExitFailed
	}
	exe, err := os.Executable()
	if err != nil {
		return ExitFailed
	}
	if err := session.Serve(d, argv[1], launch.Handshake(), []string{exe, reexec.Watchdog}); err != nil {
		return ExitFailed
	}
	return 0
}
