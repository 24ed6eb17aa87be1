package agentsh

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentplane/agentplane/pkg/audit"
	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/guard"
	"github.com/agentplane/agentplane/pkg/netproxy"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox"
	"github.com/agentplane/agentplane/pkg/state"
)

// SandboxOptions are the sandbox and limit flags shared by agentsh, session
// start and agentjob start.
type SandboxOptions struct {
	Mode       string
	Workspace  string
	AllowWrite []string
	DenyRead   []string
	Net        string
	AllowHost  []string
	Memory     int64
	CPUTime    time.Duration
	Pids       int
	FileSize   int64
	Nofile     int
	User       string
	// UserCaches (operator setting, never a request key) lets toolchains
	// write the user's own caches instead of the environment's private one.
	UserCaches bool
	// StateDir is the --state-dir value (or ""), set by the command before
	// Policy: the environment's files are protected from the command.
	StateDir string
}

// AddSandboxFlags adds the sandbox flags to fs; every one may have an
// operator default in the environment or the config file.
func AddSandboxFlags(fs *pflag.FlagSet, o *SandboxOptions) {
	o.Mode, o.Net = sandbox.ModeNone, sandbox.NetHost
	fs.Var(clikit.EnumValue{S: &o.Mode, Allowed: []string{"none", "read-only", "workspace-write"}}, "sandbox", "filesystem sandbox: none, read-only or workspace-write")
	fs.StringVar(&o.Workspace, "workspace", "", "with workspace-write, the writable `DIR` (default: the cwd)")
	fs.StringArrayVar(&o.AllowWrite, "allow-write", nil, "also allow writes under `DIR` (repeatable)")
	fs.StringArrayVar(&o.DenyRead, "deny-read", nil, "hide `PATH` from the command (repeatable)")
	fs.Var(clikit.EnumValue{S: &o.Net, Allowed: []string{"host", "none", "proxy"}}, "net", "network: host, none (loopback only), or proxy (only the hosts the operator allows, through agentplane's proxy)")
	fs.StringArrayVar(&o.AllowHost, "allow-host", nil, "with --net proxy, allow connections to `PATTERN`: a host, *.domain, or an IP address, with an optional :port (repeatable; implies --net proxy)")
	// The allowlist is the operator's: never a request key or a tool
	// argument (mcpserver.OperatorFlags lists it too).
	clikit.MarkFlags(fs, clikit.NoRequest, "allow-host")
	fs.Var(clikit.SizeValue{N: &o.Memory}, "memory", "memory limit in `BYTES` (cgroup where available, else address space)")
	fs.Var(clikit.DurationValue{D: &o.CPUTime}, "cpu-time", "CPU time limit `D`")
	fs.IntVar(&o.Pids, "pids", 0, "limit on processes and threads `N`")
	fs.Var(clikit.SizeValue{N: &o.FileSize}, "file-size", "largest file the command may write, in `BYTES`")
	fs.IntVar(&o.Nofile, "nofile", 0, "limit on open files `N`")
	fs.StringVar(&o.User, "user", "", "run as `NAME` (root only)")
	fs.BoolVar(&o.UserCaches, "user-caches", false, "in the filesystem sandbox, let toolchains write the user's own caches (default: a private cache per environment)")
	clikit.MarkFlags(fs, clikit.NoRequest, "user-caches")
	config(fs, "sandbox", "workspace", "allow-write", "deny-read", "net", "allow-host", "memory", "cpu-time", "pids", "file-size", "nofile", "user", "user-caches")
	clikit.MarkFlags(fs, clikit.Operator, "sandbox", "workspace", "allow-write", "deny-read", "net", "allow-host", "memory", "cpu-time", "pids", "file-size", "nofile", "user", "user-caches")
}

// Policy turns the options into a sandbox policy. Relative paths are
// relative to where agentsh was invoked, like --cwd; the command's cwd is
// the default workspace.
func (o *SandboxOptions) Policy(env *clikit.Env, cmdCwd string) sandbox.Policy {
	here, err := os.Getwd()
	if err != nil {
		here = cmdCwd
	}
	p := sandbox.Policy{Mode: o.Mode, Workspace: o.Workspace, AllowWrite: absAll(here, o.AllowWrite),
		DenyRead: absAll(here, o.DenyRead), Net: o.Net, AllowHosts: o.AllowHost, Memory: o.Memory, CPUTime: o.CPUTime,
		Pids: o.Pids, FileSize: o.FileSize, Nofile: o.Nofile, User: o.User, UserCaches: o.UserCaches}
	// The control files matter only to a sandbox; naming them lists every
	// session's directory, which a call without one must not pay for.
	if !p.Empty() {
		o.control(env, &p)
	}
	if p.Mode == sandbox.ModeWorkspaceWrite && p.Workspace == "" {
		p.Workspace = cmdCwd
	}
	if p.Workspace != "" && !filepath.IsAbs(p.Workspace) {
		p.Workspace = filepath.Join(here, p.Workspace)
	}
	return p
}

// control names agentplane's own files for the sandbox to protect: the
// environment's state directory (job specs, the audit log) and the config
// file stay read-only to the command, the secret key and the session
// sockets are hidden, and toolchain caches go to the environment's private
// cache directory. A default config file that does not exist yet is
// protected through its directory, so that a command cannot create one.
func (o *SandboxOptions) control(env *clikit.Env, p *sandbox.Policy) {
	dir := o.StateDir
	if dir == "" {
		dir = state.DefaultDir(env.Getenv, env.Getenv("HOME"))
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
		p.Protect = append(p.Protect, dir)
		// The session directories themselves stay visible (a sandboxed
		// session's shell reads its call files there); their sockets and
		// tokens are hidden, and the session servers authenticate callers
		// besides.
		p.Hide = append(p.Hide, filepath.Join(dir, state.KeyFile))
		p.Hide = append(p.Hide, sessionSecrets(dir)...)
		p.CacheDir = filepath.Join(dir, "cache")
	}
	if cfg, explicit := env.ConfigPath(); cfg != "" {
		if !explicit {
			cfg = filepath.Dir(cfg)
		}
		if abs, err := filepath.Abs(cfg); err == nil {
			p.Protect = append(p.Protect, abs)
		}
	}
}

// sessionSecrets lists the sockets and tokens of the environment's
// sessions as they are now.
func sessionSecrets(stateDir string) []string {
	var out []string
	for _, pat := range []string{"sock", "token"} {
		m, _ := filepath.Glob(filepath.Join(stateDir, "sessions", "*", pat))
		out = append(out, m...)
	}
	return out
}

func absAll(cwd string, paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		if strings.HasPrefix(p, "~/") {
			if home, err := os.UserHomeDir(); err == nil {
				p = filepath.Join(home, p[2:])
			}
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		out = append(out, p)
	}
	return out
}

// CheckFloor refuses a call that loosens the operator's configured sandbox
// when the configuration sets sandbox_lock = true (or AGENTPLANE_SANDBOX_LOCK=1).
// Without the lock, configured values are only defaults, which a flag or
// request may change either way.
func CheckFloor(cmd *cobra.Command, env *clikit.Env, o *SandboxOptions) error {
	lock, _ := env.Configured(cmd, "sandbox-lock")
	if len(lock) == 0 || (lock[0] != "true" && lock[0] != "1") {
		return nil
	}
	rank := map[string]int{"none": 0, "workspace-write": 1, "read-only": 2}
	if v, ok := env.Configured(cmd, "sandbox"); ok && len(v) > 0 && rank[o.Mode] < rank[v[0]] {
		return locked("sandbox", v[0], o.Mode)
	}
	if v, ok := env.Configured(cmd, "net"); ok && len(v) > 0 && v[0] == "none" && o.Net != "none" {
		return locked("net", "none", o.Net)
	}
	if v, ok := env.Configured(cmd, "net"); ok && len(v) > 0 && v[0] == "proxy" && o.Net == "host" && len(o.AllowHost) == 0 {
		return locked("net", "proxy", "host")
	}
	limits := []struct {
		name string
		got  int64
	}{{"memory", o.Memory}, {"cpu-time", int64(o.CPUTime)}, {"pids", int64(o.Pids)}, {"file-size", o.FileSize}, {"nofile", int64(o.Nofile)}}
	for _, l := range limits {
		v, ok := env.Configured(cmd, l.name)
		if !ok || len(v) == 0 {
			continue
		}
		floor, err := limitValue(l.name, v[0])
		if err != nil || floor == 0 {
			continue
		}
		if l.got == 0 || l.got > floor {
			return locked(l.name, v[0], "a looser value")
		}
	}
	if v, ok := env.Configured(cmd, "allow-write"); ok {
		allowed := map[string]bool{}
		for _, a := range v {
			allowed[a] = true
		}
		for _, a := range o.AllowWrite {
			if !allowed[a] {
				return locked("allow-write", strings.Join(v, ","), a)
			}
		}
	}
	if v, ok := env.Configured(cmd, "allow-host"); ok {
		allowed := map[string]bool{}
		for _, a := range v {
			allowed[a] = true
		}
		for _, a := range o.AllowHost {
			if !allowed[a] {
				return locked("allow-host", strings.Join(v, ","), a)
			}
		}
	}
	if v, ok := env.Configured(cmd, "deny-read"); ok {
		have := map[string]bool{}
		for _, d := range o.DenyRead {
			have[d] = true
		}
		for _, d := range v {
			if !have[d] {
				return locked("deny-read", d, "without it")
			}
		}
	}
	return nil
}

func limitValue(name, s string) (int64, error) {
	switch name {
	case "memory", "file-size":
		return clikit.ParseSize(s)
	case "cpu-time":
		d, err := clikit.ParseDuration(s)
		return int64(d), err
	}
	var v clikit.SizeValue
	var n int64
	v.N = &n
	err := v.Set(s)
	return n, err
}

func locked(flag, floor, got string) error {
	return result.Errorf(result.CodeSandboxLocked, "the configured sandbox is locked: --%s may not be loosened from %s to %s", flag, floor, got).
		With("hint", "the operator's config sets sandbox_lock; only stricter values are accepted")
}

// AddSandboxLockFlag registers the hidden sandbox-lock setting so that it
// can be read from the environment and config file.
func AddSandboxLockFlag(fs *pflag.FlagSet) {
	var lock bool
	fs.BoolVar(&lock, "sandbox-lock", false, "refuse calls that loosen the configured sandbox")
	_ = fs.MarkHidden("sandbox-lock")
	config(fs, "sandbox-lock")
	clikit.MarkFlags(fs, clikit.NoRequest, "sandbox-lock")
	clikit.MarkFlags(fs, clikit.Operator, "sandbox-lock")
}

// sandboxNotes is the man page's account of the layers (docs/sandbox.md
// has the table of attacks).
const sandboxNotes = `The result's layers list names each mechanism, whether this machine enforces it, and what it stops. Every sandboxed run (any of --sandbox, --net none, --deny-read, a limit, --user) gets a PID namespace whose PID 1 is the sandbox helper (with a fresh /proc: no signals, ptrace, prlimit or /proc/PID/root of processes outside; the tree dies with the helper, which dies with its runner), a mount namespace (in the filesystem modes the whole tree read-only with the writable roots bound on top, so that chmod, chown, utimes and setxattr outside them fail also as root; a /dev of character devices only; the state directory, the config file, .git/hooks and .git/config read-only; the secret key, session sockets, --deny-read paths and, under --net none, the host's pathname Unix sockets covered; the cgroup filesystem read-only), IPC and cgroup namespaces, a network namespace under --net none, a reduced capability bounding set (no CHOWN, FOWNER or FSETID in the filesystem modes), no_new_privs, Landlock in the filesystem modes, a seccomp filter (io_uring, AF_VSOCK, prlimit on other processes, the key ring, bpf, perf_event_open, userfaultfd, open_by_handle_at, openat2, set-id mode bits), and close-on-exec for every inherited descriptor but 0, 1 and 2. Toolchain caches go to a private directory of the environment unless user_caches is set. A machine without a layer a run needs refuses it with sandbox_unavailable.`

func newCmdSandbox(env *clikit.Env) *cobra.Command {
	cmd := &cobra.Command{Use: "sandbox", Short: "Inspect what this machine's kernel can enforce"}
	check := &cobra.Command{
		Use:   "check",
		Short: "Report, as JSON, which sandbox mechanisms this machine can enforce",
		Long: "Report which sandbox mechanisms this machine can enforce: on Linux, Landlock and its ABI, user, " +
			"network and mount namespaces, cgroup memory and pids controllers, seccomp, and whether agentsh runs as root; " +
			"on macOS (\"platform\": \"darwin\"), whether Seatbelt (sandbox-exec) is there, how leftover processes are " +
			"found without a subreaper, and which flags are refused there (--memory, --pids, --user).",
		Annotations: map[string]string{
			clikit.AnnotTool:     "agentsh_sandbox_check",
			clikit.AnnotManNotes: sandboxNotes,
			clikit.AnnotHints:    clikit.Hints{ReadOnly: true, Idempotent: true}.String(),
			clikit.AnnotToolDoc: "Report which sandbox mechanisms this machine can enforce: on Linux, Landlock and its ABI, " +
				"user, network and mount namespaces, cgroup memory and pids controllers, seccomp, and whether agentsh runs " +
				"as root; on macOS, whether Seatbelt is there and which limits (memory, pids, user) it cannot enforce.",
		},
	}
	check.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		if _, err := env.Positional(cmd, args, 0); err != nil {
			return nil, err
		}
		obj := result.New().Set("success", true)
		report := sandbox.Check()
		keys := make([]string, 0, len(report))
		for k := range report {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			obj.Set(k, report[k])
		}
		return &clikit.Outcome{Value: obj}, nil
	})
	cmd.AddCommand(check)
	return cmd
}

// networkAuditor logs each connection the network allowlist refuses during
// the run described by rec.
func networkAuditor(env *clikit.Env, stateDir string, rec *audit.Record) func(netproxy.Denial) {
	d, err := env.OpenStateDir(stateDir)
	if err != nil {
		return nil
	}
	base := *rec
	if base.Description == "" {
		base.Description = env.Description
	}
	return netproxy.Auditor(guard.AuditLog(d), base, func(err error) { env.Logf("cannot write the audit log: %v", err) })
}
