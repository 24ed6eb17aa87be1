// Package sandboxflags is the sandbox as the CLIs take it: the sandbox and
// limit flags, the policy they make, and the values of the operator's
// floor under sandbox_lock (whose rules are the engine's, sandbox.Floor).
// agentsh (one-shot and sessions) and agentjob start share
// it, so a job is confined by the same flags, with the same meaning, as a
// run.
package sandboxflags

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentplane/agentplane/internal/ctlfile"
	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/guard"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/run"
	"github.com/agentplane/agentplane/pkg/sandbox"
	"github.com/agentplane/agentplane/pkg/state"
)

// Options are the sandbox and limit flags shared by agentsh, session
// start and agentjob start.
type Options struct {
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
	// Control are the files the call's other options read that decide
	// what a later call may do (the command policy's rule files), set by
	// the command before Policy: read-only to the command, like the
	// config file.
	Control []string

	// floors are the lock's floors CheckFloor held the call to, which
	// Policy hands on to the engine (sandbox.Policy.Floors).
	floors []sandbox.Floor
}

// AddFlags adds the sandbox flags to fs; every one may have an
// operator default in the environment or the config file.
func AddFlags(fs *pflag.FlagSet, o *Options) {
	o.Mode, o.Net = sandbox.ModeNone, sandbox.NetHost
	fs.Var(clikit.EnumValue{S: &o.Mode, Allowed: []string{"none", "read-only", "workspace-write"}}, "sandbox", "filesystem sandbox: none, read-only or workspace-write")
	fs.StringVar(&o.Workspace, "workspace", "", "with workspace-write, the writable `DIR` (default: the cwd)")
	fs.StringArrayVar(&o.AllowWrite, "allow-write", nil, "also allow writes under `DIR` (repeatable)")
	fs.StringArrayVar(&o.DenyRead, "deny-read", nil, "hide `PATH` from the command (repeatable)")
	fs.Var(clikit.EnumValue{S: &o.Net, Allowed: []string{"host", "none", "proxy"}}, "net", "network: host, none (loopback only), or proxy (only the hosts the operator allows, through agentplane's proxy)")
	fs.StringArrayVar(&o.AllowHost, "allow-host", nil, "with --net proxy, allow connections to `PATTERN`: a host, *.domain, or an IP address, with an optional :port (repeatable; implies --net proxy)")
	// The allowlist is the operator's: never a request key or a tool
	// argument.
	clikit.MarkFlags(fs, clikit.NoRequest, "allow-host")
	fs.Var(clikit.SizeValue{N: &o.Memory}, "memory", "memory limit in `BYTES` (cgroup where available, else address space)")
	fs.Var(clikit.DurationValue{D: &o.CPUTime}, "cpu-time", "CPU time limit `D`")
	fs.IntVar(&o.Pids, "pids", 0, "limit on processes and threads `N`")
	fs.Var(clikit.SizeValue{N: &o.FileSize}, "file-size", "largest file the command may write, in `BYTES`")
	fs.IntVar(&o.Nofile, "nofile", 0, "limit on open files `N`")
	fs.StringVar(&o.User, "user", "", "run as `NAME` (root only)")
	fs.BoolVar(&o.UserCaches, "user-caches", false, "in the filesystem sandbox, let toolchains write the user's own caches (default: a private cache per environment)")
	clikit.MarkFlags(fs, clikit.NoRequest, "user-caches")
	clikit.MarkFlags(fs, clikit.Configurable, "sandbox", "workspace", "allow-write", "deny-read", "net", "allow-host", "memory", "cpu-time", "pids", "file-size", "nofile", "user", "user-caches")
	clikit.MarkFlags(fs, clikit.Operator, "sandbox", "workspace", "allow-write", "deny-read", "net", "allow-host", "memory", "cpu-time", "pids", "file-size", "nofile", "user", "user-caches")
	// Under sandbox_lock these configured values are a floor (CheckFloor).
	clikit.MarkFlags(fs, clikit.Floor, "sandbox", "workspace", "net", "memory", "cpu-time", "pids", "file-size", "nofile", "allow-write", "allow-host", "deny-read",
		"user", "user-caches")
}

// Policy turns the options into a sandbox policy. Relative paths are
// relative to where agentsh was invoked, like --cwd; the command's cwd is
// the default workspace.
func (o *Options) Policy(env *clikit.Env, cmdCwd string) sandbox.Policy {
	here, ok := run.Cwd("")
	if !ok {
		here = cmdCwd
	}
	p := sandbox.Policy{Mode: o.Mode, Workspace: o.Workspace, AllowWrite: absAll(here, o.AllowWrite),
		DenyRead: absAll(here, o.DenyRead), Net: o.Net, AllowHosts: o.AllowHost, Memory: o.Memory, CPUTime: o.CPUTime,
		Pids: o.Pids, FileSize: o.FileSize, Nofile: o.Nofile, User: o.User, UserCaches: o.UserCaches, Floors: o.floors}
	// The control files matter only to a sandbox; naming them lists every
	// session's directory, which a call without one must not pay for.
	if !p.Empty() {
		o.control(env, &p)
		p.Protect = append(p.Protect, o.Control...)
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
func (o *Options) control(env *clikit.Env, p *sandbox.Policy) {
	for i, dir := range StateDirs(env, o.StateDir) {
		if i == 0 {
			makeSecrets(dir)
		}
		p.Protect = append(p.Protect, dir)
		// The session directories themselves stay visible (a sandboxed
		// session's shell reads its call files there); their sockets and
		// tokens are hidden, and the session servers authenticate callers
		// besides.
		p.Hide = append(p.Hide, StateSecrets(dir)...)
		if i == 0 {
			p.CacheDir = filepath.Join(dir, "cache")
		}
	}
	// Every config file the invocation could read, not only the one it
	// reads (the lock of one that --config shadows still holds), and the
	// user's defaults that a variable moved it away from.
	// A default file is protected through its directory (a command must
	// not create it either), and itself when it is there: it may be a
	// link to a file elsewhere (a dotfiles repository, the workspace),
	// whose target the sandbox keeps read-only then.
	for _, cfg := range env.ProtectedConfigs() {
		path := ctlfile.Abs(cfg.Path)
		if !cfg.Explicit {
			p.Protect = append(p.Protect, filepath.Dir(path))
			if cfg.System {
				p.Public = append(p.Public, filepath.Dir(path))
			}
			if _, err := os.Lstat(path); err != nil {
				continue
			}
		}
		p.Protect = append(p.Protect, path)
	}
}

// StateDirs are the state directories a call could mean, absolute, each
// once: the one it uses first (flag, the one the environment names),
// then those of the operator that a flag or a variable moves the call
// away from, whose job specs, session tokens, secret key and undo history
// are as much the environment's: the one each source of configuration
// names, and the user's default whatever AGENTPLANE_STATE_DIR,
// XDG_STATE_HOME and HOME say (from the user database as well). The
// sandbox protects them all and agentfs under a rule refuses their
// secrets; in the common case (nothing moved) they are one directory.
func StateDirs(env *clikit.Env, flag string) []string {
	var out []string
	add := func(dir string) {
		if dir == "" {
			return
		}
		if abs := ctlfile.Abs(dir); !slices.Contains(out, abs) {
			out = append(out, abs)
		}
	}
	none := func(string) string { return "" }
	only := func(keep string) func(string) string {
		return func(k string) string {
			if k == keep {
				return env.Getenv(k)
			}
			return ""
		}
	}
	home := env.Getenv("HOME")
	add(flag)
	add(state.DefaultDir(env.Getenv, home))
	add(state.DefaultDir(only("XDG_STATE_HOME"), home))
	add(state.DefaultDir(none, home))
	add(state.DefaultDir(none, ""))
	if flag != "" {
		var v string
		probe := &cobra.Command{}
		clikit.AddStateDirFlag(probe, &v)
		sources, _ := env.Sources() // an unreadable file fails the call elsewhere
		for _, src := range sources {
			if v, ok := src.Lookup(probe.PersistentFlags().Lookup("state-dir")); ok && len(v) > 0 {
				add(v[0])
			}
		}
	}
	return out
}

// sessionSecrets lists the sockets and tokens of the environment's
// sessions as they are now.
// StateSecrets are what of a state directory no command or agentfs
// under a rule may read: the secret key, the sessions' sockets and
// tokens, and agentfs's undo history, which holds the earlier content of
// every file agentfs changed (a --deny-read file's too).
func StateSecrets(dir string) []string {
	return append([]string{filepath.Join(dir, state.KeyFile), filepath.Join(dir, "history"), filepath.Join(dir, state.SessionTokens)}, sessionSecrets(dir)...)
}

// makeSecrets creates the call's own state directory's secret key and
// undo history directory when they are not there yet: the sandbox hides
// only what exists when it is made, and both are otherwise made during a
// run (the key at its first use, the history at agentfs's first change),
// which the command, or a session's shell, would then read. (The others
// StateDirs lists are the user's, left as they are.)
func makeSecrets(dir string) {
	if _, err := state.Open(dir); err != nil {
		return // the call fails on it where it opens its state
	}
	_ = os.Mkdir(filepath.Join(dir, "history"), 0o700)
	_ = os.Mkdir(filepath.Join(dir, state.SessionTokens), 0o700)
}

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
// request may change either way. The settings the lock holds are the flags
// marked clikit.Floor; this maps their configured values and the call's to
// sandbox.Settings, and the comparison is the engine's (sandbox.Floor).
// A call that names no workspace gets the floor's.
func CheckFloor(env *clikit.Env, o *Options) error {
	floors, err := Floors(env)
	if err != nil || len(floors) == 0 {
		return err
	}
	call := o.settings()
	if call.Workspace == "" {
		call.Workspace = floorWorkspace(floors)
	}
	for _, f := range floors {
		if err := f.Check(call); err != nil {
			return err
		}
	}
	if o.Workspace == "" {
		o.Workspace = call.Workspace
	}
	o.floors = floors
	return nil
}

// CheckPolicy refuses a sandbox made before this call (a session's, a
// job's saved spec) that is weaker than the operator's floor now: a
// session started, or a job saved, before the lock was configured does
// not run calls or restarts under less than the lock.
func CheckPolicy(env *clikit.Env, p *sandbox.Policy) error { return checkSaved(env, p, false) }

// CheckPolicyDetached is CheckPolicy for a program that runs where no
// call is made (a job's supervisor, deciding the restart policy's own
// restarts): a floor's workspace that the operator did not configure is
// where a call is made, which means nothing there, so it holds nothing;
// everything else holds as in CheckPolicy.
func CheckPolicyDetached(env *clikit.Env, p *sandbox.Policy) error { return checkSaved(env, p, true) }

// checkSaved holds a saved sandbox to every floor, its writable roots
// resolved as the lock resolves them now (sandbox.ResolveRoots): a link a
// command of the session or job planted in one root to move another
// elsewhere since it was saved is refused (sandbox_locked).
func checkSaved(env *clikit.Env, p *sandbox.Policy, detached bool) error {
	floors, err := Floors(env)
	if err != nil || len(floors) == 0 {
		return err
	}
	var call sandbox.Policy
	if p != nil {
		call = *p
	}
	if call.Mode == sandbox.ModeWorkspaceWrite && call.Workspace != "" {
		if _, err := sandbox.ResolveRoots(append([]string{call.Workspace}, call.AllowWrite...)); err != nil {
			return err
		}
	}
	for _, f := range floors {
		if detached && !slices.Contains(f.Held, sandbox.FloorWorkspace) {
			f.Workspace = ""
		}
		if err := f.Check(call.Settings()); err != nil {
			return err
		}
	}
	return nil
}

// Floors returns the operator's floors when any source of configuration
// sets sandbox_lock (clikit.Env.Sources: each environment prefix and each
// config file, also those a more precedent one shadows), else none: one
// floor per source that configures a floor setting, and a call must keep
// every one. So a variable set to 0 or false, a variable that sets a
// looser default, or --config naming a file without the lock, leaves the
// lock of the other sources in force. An unreadable config file, or a
// configured floor value that does not parse, is an invalid_config error:
// a floor is never silently dropped.
func Floors(env *clikit.Env) ([]sandbox.Floor, error) {
	// The settings as the flags declare them (AddFlags' marks), whatever
	// command asks: agentjob restart has no sandbox flags of its own.
	fs := pflag.NewFlagSet("floor", pflag.ContinueOnError)
	AddFlags(fs, new(Options))
	AddLockFlag(fs)
	sources, err := env.Sources()
	if err != nil {
		return nil, err
	}
	locked := false
	for _, src := range sources {
		if v, ok := src.Lookup(fs.Lookup("sandbox-lock")); ok && len(v) > 0 {
			// A value that is no boolean locks: the flag's own parse
			// refuses it where it is read.
			on, err := strconv.ParseBool(v[0])
			locked = locked || on || err != nil
		}
	}
	if !locked {
		return nil, nil
	}
	var floors []sandbox.Floor
	for _, src := range sources {
		var f sandbox.Floor
		for _, name := range clikit.MarkedOn(fs, clikit.Floor) {
			v, ok := src.Lookup(fs.Lookup(name))
			if !ok {
				continue
			}
			if held, err := floorValue(&f.Settings, name, v); err != nil {
				return nil, result.Errorf(result.CodeInvalidConfig, "%s: %s: %v", src.Name, clikit.ConfigKey(name), err)
			} else if held {
				f.Held = append(f.Held, name)
			}
		}
		if len(f.Held) == 0 {
			continue
		}
		// A locked workspace-write sandbox writes where the operator
		// said: the configured workspace, else where agentsh was started
		// (the host's working directory, as an MCP server's is), never
		// wherever a call's --cwd points.
		if f.Mode == sandbox.ModeWorkspaceWrite && slices.Contains(f.Held, sandbox.FloorSandbox) && f.Workspace == "" {
			if here, ok := run.Cwd(""); ok {
				f.Workspace = here
			}
		}
		floors = append(floors, f)
	}
	// A root reached through a link inside another root is wherever a
	// command of an earlier call pointed that link: refused, not followed.
	var roots []string
	for _, f := range floors {
		if r, ok := f.WriteRoots(); ok {
			roots = append(roots, r...)
		}
	}
	if _, err := sandbox.ResolveRoots(roots); err != nil {
		return nil, err
	}
	return floors, nil
}

// HoldsFiles reports whether the operator's floor confines what a command
// reads or writes (a locked filesystem sandbox or hidden paths), so that
// files the program would open itself on a call's behalf, outside the
// sandbox, are refused whoever named them.
func HoldsFiles(env *clikit.Env) (bool, error) {
	floors, err := Floors(env)
	for _, f := range floors {
		if f.HoldsFiles() {
			return true, err
		}
	}
	return false, err
}

// FileRules are what the operator's floor leaves a program that opens
// files itself, outside any sandbox, on a call's behalf (agentfs, on the
// command line and as MCP tools): the same writable roots and hidden paths
// the sandbox would give a command.
type FileRules struct {
	// MayChange refuses (sandbox_locked) a change of the file at path
	// (absolute, symlinks resolved) that a locked filesystem sandbox keeps
	// a command from making: outside the floor's workspace and allow-write
	// directories (anywhere, in read-only), or to one of agentplane's
	// control files (every state directory and config file the call could
	// use, the directory of agentplane's programs, what makes git run a
	// program, sandbox.GitControl). Nil when no floor
	// holds the filesystem.
	MayChange func(path string) error
	// Hidden are the floor's deny-read paths and what the sandbox hides
	// of agentplane's own (the secret key, session sockets and tokens),
	// resolved.
	Hidden []string
	// Held: some floor holds what the program reads or writes
	// (HoldsFiles), so that a flag naming a file it would open unconfined
	// is refused.
	Held bool
}

// Files returns the file rules of the operator's floor for a program
// whose state directory flag is stateDir; the zero FileRules when nothing
// is locked.
func Files(env *clikit.Env, stateDir string) (FileRules, error) {
	floors, err := Floors(env)
	if err != nil || len(floors) == 0 {
		return FileRules{}, err
	}
	var rules FileRules
	var bounds [][]string
	for _, f := range floors {
		rules.Held = rules.Held || f.HoldsFiles()
		if slices.Contains(f.Held, sandbox.FloorDenyRead) {
			for _, d := range f.DenyRead {
				if r, err := filepath.EvalSymlinks(d); err == nil {
					d = r
				}
				rules.Hidden = append(rules.Hidden, d)
			}
		}
		if roots, ok := f.WriteRoots(); ok {
			// Resolved once, refusing a planted link, and compared
			// as they are: the change goes through directories opened
			// without following a link, so it lands inside them.
			res, err := sandbox.ResolveRoots(roots)
			if err != nil {
				return rules, err
			}
			bounds = append(bounds, res)
		}
	}
	var control sandbox.Policy
	if rules.Held || len(bounds) > 0 {
		(&Options{StateDir: stateDir}).control(env, &control)
		// What the sandbox hides from a command of its own (the state
		// directories' secret key, the session sockets and tokens) is
		// hidden from agentfs too: it reads outside the sandbox, and a
		// session's token read through it is the one secret a
		// sandboxed command was kept from.
		for _, h := range control.Hide {
			if r, err := filepath.EvalSymlinks(h); err == nil {
				h = r
			} else if d, err := filepath.EvalSymlinks(filepath.Dir(h)); err == nil {
				h = filepath.Join(d, filepath.Base(h)) // a key still to be made
			}
			rules.Hidden = append(rules.Hidden, h)
		}
	}
	if len(bounds) == 0 {
		return rules, nil
	}
	// The command policy's rule files, which agentsh reads at its next
	// call, as the sandbox protects them.
	protected := append(control.Protect, guard.ControlFiles(env, nil)...)
	// The programs themselves: a helper program planted beside them, or
	// one of them replaced (the helper's through a symbolic link beside
	// them too), would run unconfined at the next sandboxed call.
	if exe, err := os.Executable(); err == nil {
		protected = append(protected, sandbox.ProgramDirs(exe)...)
	}
	home := env.Getenv("HOME")
	rules.MayChange = func(path string) error {
		for _, roots := range bounds {
			if !slices.ContainsFunc(roots, func(r string) bool {
				return path == r || r == "/" || strings.HasPrefix(path, r+string(filepath.Separator))
			}) {
				return fileLocked(path, "outside the sandbox's writable roots ("+orNone(roots)+")")
			}
		}
		for _, p := range protected {
			if sandbox.Within(path, p) {
				return fileLocked(path, "one of agentplane's control files ("+p+")")
			}
		}
		if what, ok := sandbox.GitControl(path, home); ok {
			return fileLocked(path, what)
		}
		return nil
	}
	return rules, nil
}

func orNone(paths []string) string {
	if len(paths) == 0 {
		return "none"
	}
	return strings.Join(paths, ", ")
}

func fileLocked(path, what string) error {
	return result.Errorf(result.CodeSandboxLocked, "the configured sandbox is locked: %s is %s", path, what).
		With("hint", "the operator's config sets sandbox_lock; files change only where the sandbox lets a command write")
}

// floorWorkspace is the workspace of the first floor that holds one: the
// one a call that names none writes in.
func floorWorkspace(floors []sandbox.Floor) string {
	for _, f := range floors {
		if f.Workspace != "" && slices.Contains(f.Held, sandbox.FloorSandbox) {
			return f.Workspace
		}
	}
	return ""
}

// absPath makes p absolute against where agentsh was started, as Policy
// does; "" stays "".
func absPath(p string) string {
	if p == "" {
		return ""
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// floorPaths makes paths absolute exactly as Policy will (~/ included),
// so that the floor compares the paths the sandbox applies: a call's
// "~/x" is the home's x, never a directory "~" in the workspace.
func floorPaths(paths []string) []string {
	if len(paths) == 0 {
		return nil
	}
	here, _ := run.Cwd("")
	return absAll(here, paths)
}

// settings are the call's sandbox settings, as its flags gave them.
func (o *Options) settings() sandbox.Settings {
	return sandbox.Settings{Mode: o.Mode, Workspace: absPath(o.Workspace), Net: o.Net, AllowWrite: floorPaths(o.AllowWrite),
		AllowHost: o.AllowHost, DenyRead: floorPaths(o.DenyRead), Memory: o.Memory, CPUTime: o.CPUTime, Pids: int64(o.Pids),
		FileSize: o.FileSize, Nofile: int64(o.Nofile), User: o.User, UserCaches: o.UserCaches}
}

// floorValue sets the field of s that the floor flag name gives, from its
// configured values v, and reports whether it holds anything; a value
// that does not parse is an error. A marked flag without a field is an
// internal error.
func floorValue(s *sandbox.Settings, name string, v []string) (bool, error) {
	first := ""
	if len(v) > 0 {
		first = v[0]
	}
	var err error
	switch name {
	case sandbox.FloorSandbox:
		s.Mode = first
	case sandbox.FloorWorkspace:
		s.Workspace = absPath(first)
		return s.Workspace != "", nil
	case sandbox.FloorNet:
		s.Net = first
	case sandbox.FloorMemory:
		s.Memory, err = clikit.ParseSize(first)
	case sandbox.FloorFileSize:
		s.FileSize, err = clikit.ParseSize(first)
	case sandbox.FloorCPUTime:
		s.CPUTime, err = clikit.ParseDuration(first)
	case sandbox.FloorPids:
		s.Pids, err = clikit.ParseSize(first)
	case sandbox.FloorNofile:
		s.Nofile, err = clikit.ParseSize(first)
	case sandbox.FloorAllowWrite:
		s.AllowWrite = floorPaths(v)
	case sandbox.FloorAllowHost:
		s.AllowHost = v
	case sandbox.FloorDenyRead:
		s.DenyRead = floorPaths(v)
	case sandbox.FloorUser:
		s.User = first
		return s.User != "", nil
	case sandbox.FloorUserCaches:
		s.UserCaches, err = strconv.ParseBool(first)
	default:
		return false, result.Errorf(result.CodeInternal, "--%s is marked as a sandbox floor but has no setting", name)
	}
	return err == nil, err
}

// AddLockFlag registers the hidden sandbox-lock setting so that it
// can be read from the environment and config file.
func AddLockFlag(fs *pflag.FlagSet) {
	var lock bool
	fs.BoolVar(&lock, "sandbox-lock", false, "refuse calls that loosen the configured sandbox")
	_ = fs.MarkHidden("sandbox-lock")
	clikit.MarkFlags(fs, clikit.Configurable, "sandbox-lock")
	clikit.MarkFlags(fs, clikit.NoRequest, "sandbox-lock")
	clikit.MarkFlags(fs, clikit.Operator, "sandbox-lock")
	clikit.MarkFlags(fs, clikit.NotForwarded, "sandbox-lock")
}
