package agentsh

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/audit"
	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/guard"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/session"
	"github.com/agentplane/agentplane/pkg/state"
)

// serveCommand is the hidden first argument that runs a session server.
const serveCommand = "__session-serve"

// DefaultIdleTimeout stops a session nobody used for this long.
const DefaultIdleTimeout = time.Hour

// SessionStartOptions are the flags of session start.
type SessionStartOptions struct {
	Cwd         string
	Env         []string
	ClearEnv    bool
	Shell       string
	IdleTimeout time.Duration
	Name        string
	Sandbox     SandboxOptions
	Guard       guard.Options
}

func manager(env *clikit.Env, stateDir string) (*session.Manager, error) {
	d, err := env.OpenStateDir(stateDir)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, result.Errorf(session.CodeStartFailed, "cannot find the agentsh executable: %v", err)
	}
	return &session.Manager{Dir: d, Exe: exe}, nil
}

func newCmdSession(env *clikit.Env, stateDir *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Start, list, inspect and stop persistent shell sessions",
	}
	cmd.AddCommand(newCmdSessionStart(env, stateDir), newCmdSessionList(env, stateDir),
		newCmdSessionStatus(env, stateDir), newCmdSessionStop(env, stateDir))
	return cmd
}

func newCmdSessionStart(env *clikit.Env, stateDir *string) *cobra.Command {
	o := &SessionStartOptions{IdleTimeout: DefaultIdleTimeout}
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Start a persistent shell whose cwd, environment and functions survive between calls",
		Long: "Start a persistent shell session owned by the environment. cd, export, shell variables, " +
			"functions, aliases and an activated virtualenv persist from one 'agentsh --session' call to the next.",
		Annotations: map[string]string{clikit.AnnotTool: "agentsh_session_start"},
	}
	f := cmd.Flags()
	f.StringVar(&o.Cwd, "cwd", "", "start the shell in `DIR`")
	f.StringArrayVar(&o.Env, "env", nil, "set `K=V` in the shell's environment (repeatable)")
	_ = f.SetAnnotation("env", clikit.AnnotObject, []string{"true"})
	f.BoolVar(&o.ClearEnv, "clear-env", false, "start from an empty environment plus PATH, HOME, LANG, TERM, USER")
	f.StringVar(&o.Shell, "shell", "", "shell `PROGRAM` (default bash, else sh)")
	f.Var(clikit.DurationValue{D: &o.IdleTimeout}, "idle-timeout", "stop the session after `D` without a call (0 = never)")
	f.StringVar(&o.Name, "name", "", "a `NAME` usable instead of the handle")
	AddSandboxFlags(f, &o.Sandbox)
	AddSandboxLockFlag(f)
	guard.AddPolicyFlags(f, &o.Guard)
	config(f, "shell", "idle-timeout", "clear-env")
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
		spec, err := sessionSpec(env, o)
		if err != nil {
			return nil, err
		}
		if err := CheckFloor(cmd, env, &o.Sandbox); err != nil {
			return nil, err
		}
		info, err := m.Start(spec, []string{"agentsh", serveCommand, m.Dir.Path()})
		if err != nil {
			return nil, err
		}
		return &clikit.Outcome{Value: infoObject(info)}, nil
	})
	return cmd
}

func sessionSpec(env *clikit.Env, o *SessionStartOptions) (session.Spec, error) {
	cwd, err := os.Getwd()
	if err != nil {
		cwd = "/"
	}
	if o.Cwd != "" {
		if filepath.IsAbs(o.Cwd) {
			cwd = filepath.Clean(o.Cwd)
		} else {
			cwd = filepath.Join(cwd, o.Cwd)
		}
	}
	e, err := BuildEnv(env.Environ(), o.ClearEnv, o.Env)
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
			return session.Spec{}, result.Errorf("command_not_found", "shell not found: %s", shell)
		}
		path = "/bin/sh"
	}
	var args []string
	if filepath.Base(path) == "bash" {
		// No startup files: a session must behave the same for every user.
		args = []string{"--noprofile", "--norc"}
	}
	spec := session.Spec{Shell: path, ShellArgs: args, Cwd: cwd, Env: e, IdleTimeout: o.IdleTimeout, Name: o.Name, Description: env.Description}
	if p := o.Sandbox.Policy(cwd); !p.Empty() {
		spec.Sandbox = &p
	}
	return spec, nil
}

func infoObject(info *session.Info) *result.Object {
	obj := result.New().Set("success", true)
	b, _ := json.Marshal(info)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for _, k := range []string{"session", "name", "status", "pid", "cwd", "shell", "started_at", "last_used_at", "ended_at", "ended_reason", "calls", "resets", "idle_timeout_ms", "description"} {
		if v, ok := m[k]; ok {
			obj.Set(k, v)
		}
	}
	return obj
}

func newCmdSessionList(env *clikit.Env, stateDir *string) *cobra.Command {
	cmd := &cobra.Command{Use: "list", Short: "List the environment's sessions, newest first",
		Annotations: map[string]string{clikit.AnnotTool: "agentsh_session_list"}}
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
		Annotations: map[string]string{clikit.AnnotTool: "agentsh_session_status", clikit.AnnotArgs: "session"}}
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
		Annotations: map[string]string{clikit.AnnotTool: "agentsh_session_stop", clikit.AnnotArgs: "session"}}
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
			return nil, result.Errorf("stdin_file_error", "cannot read stdin file %s: %v", o.StdinFile, err)
		}
		s := string(b)
		req.Stdin = &s
	}
	began := time.Now()
	rec := audit.Record{Program: "agentsh", Operation: "session_call", Command: o.Command, Session: o.Session}
	// The caller's policy decides before the command reaches the session.
	decision, err := o.Guard.DecideInput(o.Command, nil, req.Stdin)
	guard.Fill(&rec, decision, o.Guard.Approved, err)
	if err != nil {
		guard.Audit(env, stateDir, rec)
		return nil, err
	}
	m, err := manager(env, stateDir)
	if err != nil {
		return nil, err
	}
	var onEvent func(stream, data string)
	if o.Stream {
		env.Pretty = false
		onEvent = func(stream, data string) {
			_ = env.Emit(result.New().Set("type", stream).Set("data", data))
		}
	}
	raw, err := m.Call(env.Ctx, o.Session, req, onEvent)
	if err != nil {
		guard.Fill(&rec, nil, false, err)
		rec.DurationMS = time.Since(began).Milliseconds()
		guard.Audit(env, stateDir, rec)
		return nil, err
	}
	var probe struct {
		Status   string `json:"status"`
		ExitCode int    `json:"exit_code"`
		Cwd      string `json:"cwd"`
		PID      int    `json:"pid"`
		Session  string `json:"session"`
		Sandbox  any    `json:"sandbox"`
	}
	_ = json.Unmarshal(raw, &probe)
	code := probe.ExitCode
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
	return &clikit.Outcome{Value: raw, Exit: exit}, nil
}

// serveMain is the hidden session server: argv is STATE_DIR ID. It runs
// before the cobra tree is built, so a server costs no CLI start-up.
func serveMain(argv []string) int {
	if len(argv) != 2 {
		return ExitFailed
	}
	d, err := state.Open(argv[0])
	if err != nil {
		return ExitFailed
	}
	if err := session.Serve(d, argv[1], os.NewFile(3, "handshake")); err != nil {
		return ExitFailed
	}
	return 0
}
