// Package sandbox confines one command with kernel mechanisms: Landlock for
// the filesystem, a network namespace for --net none, a mount namespace to
// hide --deny-read paths, no_new_privs and a reduced capability bounding set
// against privilege climbs, rlimits, and cgroup v1 memory and pids limits
// where the machine offers them.
//
// Go cannot run code between fork and exec, so the confinement is applied by
// a re-exec helper: Prepare returns an argv that starts the calling program
// again with the hidden subcommand HelperCommand, and that program must route
// it to HelperMain before doing anything else. The helper restricts itself
// and then execve()s the target, so the target and everything it starts
// inherit the restrictions.
//
//	prep, err := sandbox.Prepare(policy, self)   // *result.Error on refusal
//	defer prep.Cleanup()
//	req.Argv = prep.Argv(req.Argv)
//	req.Env = append(req.Env, prep.Env...)
//	req.SysProcAttr = prep.SysProcAttr
//	res, err := run.Run(ctx, req)
//	if err := prep.Failure(); err != nil { … the helper could not set up … }
//	code := prep.Classify(res.ExitCode, res.Signal)
//
// What cannot be enforced is refused with code sandbox_unavailable; nothing
// is ever run with less protection than asked for.
package sandbox

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
)

// Modes of the filesystem policy.
const (
	ModeNone           = "none"
	ModeReadOnly       = "read-only"
	ModeWorkspaceWrite = "workspace-write"
)

// Network policies.
const (
	NetHost = "host"
	NetNone = "none"
)

// Error codes of this package. The last two are the same codes pkg/run
// uses, so the CLI maps them to exit statuses 127 and 126 the same way.
const (
	CodeUnavailable          = "sandbox_unavailable"
	CodeFailed               = "sandbox_failed"
	CodeMemoryLimit          = "memory_limit"
	CodeCPULimit             = "cpu_limit"
	CodeFileSizeLimit        = "file_size_limit"
	CodePidsLimit            = "pids_limit"
	CodeCommandNotFound      = "command_not_found"
	CodeCommandNotExecutable = "command_not_executable"
)

// HelperCommand is the hidden first argument that marks a re-exec of the
// program as the sandbox helper. The program's main must call
// HelperMain(os.Args[2:]) when os.Args[1] equals it, before any other work.
const HelperCommand = "__sandbox-exec"

// Exit statuses of the helper when it fails before the target runs. They
// follow the coreutils convention the agentsh contract uses.
const (
	exitSetupFailed   = 125
	exitNotExecutable = 126
	exitNotFound      = 127
)

// minLandlockABI is the oldest Landlock ABI accepted: ABI 3 is the first
// that restricts truncate(2), without which a file outside the writable
// paths could still be emptied.
const minLandlockABI = 3

// maxLandlockABI is the newest ABI whose access rights the policy is
// written for. ABI 9 starts restricting connects to pathname UNIX sockets,
// which would change what "read everywhere" means; it is left out until
// that is decided and tested.
const maxLandlockABI = 7

// Policy is what the caller asks for. The zero value asks for nothing.
type Policy struct {
	Mode       string   // none (or ""), read-only, workspace-write
	Workspace  string   // writable in workspace-write mode
	AllowWrite []string // more writable directories (workspace-write)
	DenyRead   []string // files and directories hidden from the command
	Net        string   // host (or ""), none
	Memory     int64    // bytes; 0 means no limit
	CPUTime    time.Duration
	Pids       int   // processes and threads of the whole tree
	FileSize   int64 // largest file the command may write, bytes
	Nofile     int   // open file descriptors
	User       string
	// Protect lists agentplane's own control files and directories (the
	// state directory, the config file), which stay read-only to the
	// command even inside a writable root; a path that does not exist is
	// skipped. The workspace's .git/hooks and .git/config are added by
	// Prepare. Hide lists those the command may not even read (the
	// environment's secret key, session sockets): they are covered by an
	// empty file or directory. Both are set by the program, never by a
	// request.
	Protect []string `json:",omitempty"`
	Hide    []string `json:",omitempty"`
	// CacheDir is the private, per-environment directory where toolchain
	// caches go (GOCACHE, GOMODCACHE, npm, pip, cargo, XDG_CACHE_HOME) in the
	// filesystem modes; "" leaves the caller's caches alone. UserCaches,
	// an operator setting, makes the user's own cache directories writable
	// instead.
	CacheDir   string `json:",omitempty"`
	UserCaches bool   `json:",omitempty"`
}

// Empty reports whether p asks for no confinement at all, in which case
// the command can run without the helper.
func (p Policy) Empty() bool {
	return (p.Mode == "" || p.Mode == ModeNone) && (p.Net == "" || p.Net == NetHost) &&
		len(p.DenyRead) == 0 && p.Memory == 0 && p.CPUTime == 0 && p.Pids == 0 &&
		p.FileSize == 0 && p.Nofile == 0 && p.User == ""
}

// Prepared is a policy made ready for one run. Cleanup must be called after
// the run, and after Classify and Failure.
type Prepared struct {
	// Argv wraps the target argv in the helper invocation; run it with
	// Path. The target's argv[0] is resolved by the helper against the
	// PATH of its own environment, after the restrictions are in place.
	Argv func(argv []string) []string
	// Path is the helper's executable: HelperProgram beside the caller,
	// or the caller's own executable.
	Path string
	// Env holds the variables to add to the command's environment (after
	// the caller's, so they win): TMPDIR, TMP and TEMP.
	Env []string
	// SysProcAttr carries the namespaces to create (and, for a caller
	// that is not root, the user namespace they need); Setsid is left to
	// the runner. It has no Credential: --user is applied by the helper,
	// which must stay root until it has joined the cgroups and mounted.
	SysProcAttr *syscall.SysProcAttr
	// Report says what is enforced, for the result's "sandbox" field.
	Report map[string]any
	// TempDir is the private directory the command may write (TMPDIR).
	TempDir string
	// Cleanup removes the private directory and the cgroups. It may be
	// called more than once.
	Cleanup func()
	// Classify names the limit that ended or hampered the run, or returns
	// "" when none did. Call it only for runs that ended by themselves
	// (not timed out or cancelled), before Cleanup: a SIGKILL under a CPU
	// limit is taken for the CPU hard limit.
	Classify func(exitCode int, signal string) string
	// Failure returns the helper's error (a *result.Error with code
	// sandbox_failed, command_not_found or command_not_executable) when it
	// could not start the target, else nil. Call it before Cleanup.
	Failure func() error
	// ExitStatus turns the helper's exit status into the command's: the
	// helper is PID 1 of the sandbox's PID namespace, which the kernel
	// never lets die of a signal, so it exits 128+N for a target killed by
	// signal N and records the signal, which ExitStatus restores. Call it
	// before Classify and Cleanup.
	ExitStatus func(exitCode int, signal string) (int, string)
	// LimitsHit names the limits the kernel enforced during the run
	// (memory_limit, pids_limit), whatever the exit status: a command
	// can exit 0 after a fork or an allocation failed. Call it before
	// Cleanup.
	LimitsHit func() []string
	// KeepFDs is how many descriptors after stderr the runner passes on
	// purpose (ExtraFiles); set it before Argv. Every other descriptor the
	// helper inherited is closed at exec.
	KeepFDs int
	// Control makes the helper serve readiness probes on a control
	// socket, the first extra descriptor (NewControl); set it before Argv.
	Control bool
}

// HelperProgram is the name of the helper's own small program. When it is
// installed beside the calling executable it is run instead of the
// caller itself: it links only this package, so it starts several times
// faster than the full programs, and the helper's start-up is most of a
// sandboxed call's overhead.
const HelperProgram = "agentplane-sandbox"

// specVersion changes whenever spec changes meaning: a helper from
// another build refuses the spec rather than enforcing less than asked.
const specVersion = 2

// spec is what the parent hands to the helper, as base64 JSON in argv.
type spec struct {
	V           int      `json:"v"`
	Status      string   `json:"status"` // file the helper writes its error to
	LandlockABI int      `json:"landlock_abi,omitempty"`
	Writable    []string `json:"writable,omitempty"`
	// ReadOnlyRoot: every mount read-only but the writable roots.
	ReadOnlyRoot bool        `json:"read_only_root,omitempty"`
	MinimalDev   bool        `json:"minimal_dev,omitempty"`
	ReadOnly     []string    `json:"read_only,omitempty"` // bound read-only
	HideDirs     []string    `json:"hide_dirs,omitempty"`
	HideFiles    []string    `json:"hide_files,omitempty"`
	NetNone      bool        `json:"net_none,omitempty"`
	Cgroups      []string    `json:"cgroups,omitempty"` // directories to join
	Rlimits      []rlimitSet `json:"rlimits,omitempty"`
	UID          int         `json:"uid"` // -1: keep
	GID          int         `json:"gid"`
	Groups       []int       `json:"groups,omitempty"`
	DropCaps     bool        `json:"drop_caps,omitempty"`
	// DropFileCaps also drops CHOWN, FOWNER and FSETID, with which root
	// changes the metadata of files it does not own.
	DropFileCaps bool `json:"drop_file_caps,omitempty"`
	// ClearAmbient: the helper got ambient capabilities in its user
	// namespace that the target must not inherit.
	ClearAmbient bool `json:"clear_ambient,omitempty"`
	// KeepFDs is how many descriptors after stderr (3, 4, …) the caller
	// passes on purpose; every other inherited one is closed at exec.
	KeepFDs int `json:"keep_fds,omitempty"`
	// Control: fd 3 is a control socket for readiness probes (control.go).
	Control bool `json:"control,omitempty"`
}

type rlimitSet struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// helperError is the status file's content.
type helperError struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// Signal, without a code, is not a failure: the target died of it.
	Signal int `json:"signal,omitempty"`
}

// Prepare validates p, checks that this machine can enforce it, and sets up
// the private temp dir and the cgroups. self is the path of the running
// executable (os.Executable), which must route HelperCommand to HelperMain.
// Errors are *result.Error with code invalid_request or sandbox_unavailable.
func Prepare(p Policy, self string) (*Prepared, error) {
	return PrepareWith(p, self, Probe())
}

// PrepareWith is Prepare against given machine capabilities, so that tests
// can pretend a machine lacks a feature.
func PrepareWith(p Policy, self string, caps Capabilities) (*Prepared, error) {
	p, err := normalize(p)
	if err != nil {
		return nil, err
	}
	if p.Empty() {
		return passthrough(), nil
	}
	if !filepath.IsAbs(self) {
		return nil, result.Errorf(result.CodeInternal, "sandbox helper path %q is not absolute", self)
	}
	b := &builder{p: p, caps: caps, self: helperPath(self), sp: spec{V: specVersion, UID: -1, GID: -1}}
	if err := b.check(); err != nil {
		return nil, err
	}
	prep, err := b.build()
	if err != nil {
		b.cleanup()
		return nil, err
	}
	return prep, nil
}

// helperPath returns the helper program beside self when there is one,
// else self (which must route HelperCommand to HelperMain).
func helperPath(self string) string {
	p := filepath.Join(filepath.Dir(self), HelperProgram)
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return p
	}
	return self
}

func passthrough() *Prepared {
	return &Prepared{
		Argv:       func(argv []string) []string { return argv },
		Report:     map[string]any{"mode": ModeNone, "network": NetHost},
		Cleanup:    func() {},
		Classify:   func(int, string) string { return "" },
		Failure:    func() error { return nil },
		ExitStatus: func(code int, sig string) (int, string) { return code, sig },
		LimitsHit:  func() []string { return nil },
	}
}

func invalid(format string, args ...any) error {
	return result.Errorf(result.CodeInvalidRequest, format, args...)
}

func unavailable(format string, args ...any) *result.Error {
	return result.Errorf(CodeUnavailable, format, args...).
		With("hint", "run `agentsh sandbox check` to see what this machine can enforce")
}

// normalize checks values and makes paths absolute and free of symlinks,
// so that the Landlock rules and the mounts name the real objects.
func normalize(p Policy) (Policy, error) {
	switch p.Mode {
	case "":
		p.Mode = ModeNone
	case ModeNone, ModeReadOnly, ModeWorkspaceWrite:
	default:
		return p, invalid("unknown sandbox mode %q (want none, read-only or workspace-write)", p.Mode)
	}
	switch p.Net {
	case "":
		p.Net = NetHost
	case NetHost, NetNone:
	default:
		return p, invalid("unknown network policy %q (want host or none)", p.Net)
	}
	if p.Memory < 0 || p.CPUTime < 0 || p.Pids < 0 || p.FileSize < 0 || p.Nofile < 0 {
		return p, invalid("sandbox limits must not be negative")
	}
	if p.CPUTime > 0 && p.CPUTime < time.Second {
		return p, invalid("cpu time limit %s is below the kernel's granularity of 1s", p.CPUTime)
	}
	if p.Mode == ModeWorkspaceWrite && p.Workspace == "" {
		return p, invalid("workspace-write needs a workspace directory")
	}
	if p.Mode != ModeWorkspaceWrite {
		if len(p.AllowWrite) > 0 {
			// Granting nothing while the caller believes it granted
			// something hides a mistake; say so.
			return p, invalid("--allow-write needs --sandbox workspace-write")
		}
		// Only workspace-write gives the workspace a meaning.
		p.Workspace = ""
	}
	dir := func(what, path string) (string, error) {
		real, err := realPath(path)
		if err != nil {
			return "", invalid("%s %s: %v", what, path, err)
		}
		st, err := os.Stat(real)
		if err != nil {
			return "", invalid("%s %s: %v", what, path, unwrap(err))
		}
		if !st.IsDir() {
			return "", invalid("%s %s is not a directory", what, path)
		}
		return real, nil
	}
	var err error
	if p.Workspace != "" {
		if p.Workspace, err = dir("workspace", p.Workspace); err != nil {
			return p, err
		}
	}
	aw := make([]string, 0, len(p.AllowWrite))
	for _, d := range p.AllowWrite {
		real, err := dir("allow-write directory", d)
		if err != nil {
			return p, err
		}
		aw = append(aw, real)
	}
	p.AllowWrite = aw
	dr := make([]string, 0, len(p.DenyRead))
	for _, d := range p.DenyRead {
		real, err := realPath(d)
		if err != nil {
			return p, invalid("deny-read path %s: %v", d, err)
		}
		if real == "/" {
			return p, invalid("deny-read cannot hide /")
		}
		dr = append(dr, real)
	}
	p.DenyRead = dr
	return p, nil
}

// realPath makes path absolute and resolves symlinks. A path that does not
// exist is returned cleaned, so that the caller can decide what absence
// means.
func realPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return abs, nil
	}
	return real, err
}

func unwrap(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

type builder struct {
	p    Policy
	caps Capabilities
	self string
	sp   spec

	report    map[string]any
	base      string   // private directory, removed by cleanup
	cgroups   []string // created cgroup directories, removed by cleanup
	memCgroup string
	pidCgroup string
	memRlimit bool
}

// isolating reports whether the policy draws a boundary that root's
// capabilities could cross (setns, umount, open_by_handle_at), in which case
// the helper shrinks the capability bounding set.
func (b *builder) isolating() bool {
	return b.p.Mode != ModeNone || b.p.Net == NetNone || len(b.p.DenyRead) > 0 || b.p.User != ""
}

// check refuses what this machine cannot enforce, naming what is missing.
func (b *builder) check() error {
	p, c := b.p, b.caps
	if p.Mode != ModeNone {
		if c.LandlockABI < minLandlockABI {
			return unavailable("--sandbox %s needs Landlock ABI %d or later; this kernel has %s", p.Mode, minLandlockABI, abiText(c.LandlockABI))
		}
	}
	nsOK := c.Root || c.UserNS
	if p.Net == NetNone && !(c.NetNS && nsOK) {
		return unavailable("--net none needs network namespaces%s", ifNotRoot(c.Root, " and unprivileged user namespaces"))
	}
	// Every sandboxed run gets its own mount, PID, IPC and cgroup
	// namespaces and a seccomp filter; a machine without them runs nothing
	// sandboxed rather than something half confined.
	if !(c.MountNS && c.PidNS && c.IPCNS && c.CgroupNS && nsOK) {
		return unavailable("the sandbox needs mount, PID, IPC and cgroup namespaces%s", ifNotRoot(c.Root, " and unprivileged user namespaces"))
	}
	if !c.MountAPI {
		return unavailable("the sandbox needs the mount API of Linux 5.12 (open_tree, move_mount, mount_setattr)")
	}
	if !c.Seccomp || !seccompArch {
		return unavailable("the sandbox needs seccomp filters on this architecture")
	}
	if p.Pids > 0 && c.CgroupV1Pids == "" && c.Root {
		return unavailable("--pids needs a writable cgroup v1 pids controller when running as root (RLIMIT_NPROC does not apply to root)")
	}
	if p.User != "" && !c.Root {
		return unavailable("--user needs agentsh to run as root")
	}
	return nil
}

func abiText(abi int) string {
	if abi <= 0 {
		return "no Landlock"
	}
	return "ABI " + strconv.Itoa(abi)
}

func ifNotRoot(root bool, s string) string {
	if root {
		return ""
	}
	return s
}

func (b *builder) build() (*Prepared, error) {
	p := b.p
	b.report = map[string]any{"mode": p.Mode, "no_new_privs": true}

	// A --user target must be able to reach its temp dir; the caller's
	// $TMPDIR may sit below directories only the caller can enter, so the
	// system's /tmp (world-traversable, sticky) is used then.
	parent := ""
	if p.User != "" {
		parent = "/tmp"
	}
	sweepStale(parent)
	base, err := os.MkdirTemp(parent, tempPrefix)
	if err != nil {
		return nil, result.Errorf(CodeFailed, "cannot create the sandbox's private directory: %v", unwrap(err)).Wrap(err)
	}
	b.base = base
	// 0711: a --user target must reach tmp/ but not list or read the
	// status file beside it.
	if err := os.Chmod(base, 0o711); err != nil {
		return nil, result.Errorf(CodeFailed, "chmod %s: %v", base, unwrap(err))
	}
	if err := writeOwner(base); err != nil {
		return nil, result.Errorf(CodeFailed, "cannot record the sandbox's owner: %v", unwrap(err))
	}
	tmp := filepath.Join(base, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, result.Errorf(CodeFailed, "cannot create the sandbox's temp dir: %v", unwrap(err))
	}
	// The helper creates the status file at its start, while it may still
	// write here, and writes to it only if it fails or the target dies of
	// a signal. The command sees /dev/null in its place.
	status := filepath.Join(base, "status")
	b.sp.Status = status
	b.report["tmpdir"] = tmp
	if err := os.WriteFile(status, nil, 0o600); err != nil {
		return nil, result.Errorf(CodeFailed, "cannot create the sandbox's status file: %v", unwrap(err))
	}
	b.sp.HideFiles = append(b.sp.HideFiles, status, filepath.Join(base, ownerFile))

	if p.User != "" {
		if err := b.user(tmp); err != nil {
			return nil, err
		}
	}
	var env []string
	if p.Mode != ModeNone {
		b.sp.LandlockABI = min(b.caps.LandlockABI, maxLandlockABI)
		writable := []string{}
		if p.Mode == ModeWorkspaceWrite {
			writable = append(writable, p.Workspace)
			writable = append(writable, p.AllowWrite...)
			b.report["workspace"] = p.Workspace
			b.report["allow_write"] = p.AllowWrite
		}
		writable = append(writable, tmp)
		cacheRoots, cacheEnv, err := b.caches()
		if err != nil {
			return nil, err
		}
		writable = append(writable, cacheRoots...)
		env = append(env, cacheEnv...)
		b.sp.Writable = writable
		b.sp.ReadOnlyRoot = true
		b.sp.DropFileCaps = b.caps.Root
		b.report["filesystem"] = "landlock"
		b.report["root"] = "read_only"
		b.report["landlock_abi"] = b.sp.LandlockABI
		b.report["writable"] = writable
	} else {
		b.report["filesystem"] = "host"
	}
	b.sp.MinimalDev = p.Mode != ModeNone || len(p.DenyRead) > 0
	if b.sp.MinimalDev {
		b.report["dev"] = "minimal"
	}

	if len(p.DenyRead) > 0 {
		hidden, missing := []string{}, []string{}
		for _, path := range p.DenyRead {
			st, err := os.Stat(path)
			switch {
			case err != nil:
				// Nothing to hide; outside the writable paths it cannot
				// appear during the run either.
				missing = append(missing, path)
				continue
			case st.IsDir():
				b.sp.HideDirs = append(b.sp.HideDirs, path)
			default:
				b.sp.HideFiles = append(b.sp.HideFiles, path)
			}
			hidden = append(hidden, path)
		}
		b.report["deny_read"] = hidden
		if len(missing) > 0 {
			b.report["deny_read_missing"] = missing
		}
	}
	b.control()

	attr := &syscall.SysProcAttr{
		// A new mount, PID and IPC namespace for every sandboxed run: the
		// command sees only its own processes (no signals, prlimit or
		// /proc/PID/root outside) and no host SysV IPC.
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC,
		// The helper is PID 1 of the namespace: when it dies, the kernel
		// kills everything inside, so the tree cannot outlive its runner.
		Pdeathsig: syscall.SIGKILL,
	}
	namespaces := []string{"mount", "pid", "ipc", "cgroup"}
	if p.Net == NetNone {
		attr.Cloneflags |= syscall.CLONE_NEWNET
		b.sp.NetNone = true
		b.report["network"] = "namespace"
		namespaces = append(namespaces, "net")
		if socks := hostUnixSockets(); len(socks) > 0 {
			b.sp.HideFiles = append(b.sp.HideFiles, socks...)
			b.report["hidden_unix_sockets"] = len(socks)
		}
	} else {
		b.report["network"] = NetHost
	}
	if !b.caps.Root {
		// An unprivileged caller gets the namespaces through a user
		// namespace that maps only its own ids, so files keep their
		// owners and nothing gains privilege outside.
		uid, gid := os.Getuid(), os.Getgid()
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		// The helper keeps its own uid, which would lose the namespace's
		// capabilities at execve; ambient capabilities carry over the two
		// it needs for the mounts and the loopback, and it clears them
		// before starting the target.
		attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN}
		b.sp.ClearAmbient = true
		b.report["user_namespace"] = true
		namespaces = append(namespaces, "user")
	}
	b.report["namespaces"] = namespaces
	b.report["proc"] = "private"
	b.report["seccomp"] = SeccompRules()

	if err := b.limits(); err != nil {
		return nil, err
	}
	b.sp.DropCaps = b.caps.Root
	if b.sp.DropCaps {
		b.report["capabilities"] = keptCapNames(b.sp.DropFileCaps)
	}

	statusPath := status
	memCg, pidCg := b.memCgroup, b.pidCgroup
	policy := p
	cgroups := b.cgroups
	sp := b.sp
	self := b.self

	var once sync.Once
	cleanup := func() {
		once.Do(func() {
			for i := len(cgroups) - 1; i >= 0; i-- {
				removeCgroup(cgroups[i])
			}
			_ = os.RemoveAll(base)
		})
	}
	prep := &Prepared{
		Path:        self,
		Env:         append([]string{"TMPDIR=" + tmp, "TMP=" + tmp, "TEMP=" + tmp}, env...),
		SysProcAttr: attr,
		Report:      b.report,
		TempDir:     tmp,
		Cleanup:     cleanup,
		Classify: func(exitCode int, signal string) string {
			return classify(policy, memCg, pidCg, statusPath, exitCode, signal)
		},
		Failure: func() error { return readFailure(statusPath) },
		ExitStatus: func(exitCode int, signal string) (int, string) {
			return exitStatus(statusPath, exitCode, signal)
		},
		LimitsHit: func() []string { return limitsHit(memCg, pidCg) },
	}
	prep.Argv = func(argv []string) []string {
		s := sp
		s.KeepFDs, s.Control = prep.KeepFDs, prep.Control
		enc, _ := json.Marshal(s)
		out := make([]string, 0, len(argv)+4)
		out = append(out, self, HelperCommand, base64.RawURLEncoding.EncodeToString(enc), "--")
		return append(out, argv...)
	}
	return prep, nil
}

// control adds agentplane's control files to the spec: read-only those
// the caller named and the git metadata that would run code outside the
// sandbox later (a workspace's .git/hooks and .git/config, the user's own
// git config), hidden the secrets.
func (b *builder) control() {
	var protect []string
	for _, w := range b.sp.Writable {
		protect = append(protect, gitControl(w)...)
	}
	if home, err := os.UserHomeDir(); err == nil {
		for _, f := range []string{".gitconfig", ".config/git"} {
			path := filepath.Join(home, f)
			if under(path, b.sp.Writable) {
				protect = append(protect, path)
			}
		}
	}
	protect = append(protect, b.p.Protect...)
	var ro []string
	for _, path := range protect {
		real, err := realPath(path)
		if err != nil {
			continue
		}
		if _, err := os.Stat(real); errors.Is(err, fs.ErrNotExist) && under(real, b.sp.Writable) {
			// The command could create it (a config file, a state
			// directory with a forged key); an empty directory in its
			// place is protected instead.
			_ = os.MkdirAll(real, 0o700)
		}
		if _, err := os.Stat(real); err == nil && !slices.Contains(ro, real) {
			ro = append(ro, real)
		}
	}
	b.sp.ReadOnly = ro
	if len(ro) > 0 {
		b.report["protected"] = ro
	}
	var hidden []string
	for _, path := range b.p.Hide {
		real, err := realPath(path)
		if err != nil {
			continue
		}
		st, err := os.Stat(real)
		switch {
		case err != nil:
			continue
		case st.IsDir():
			b.sp.HideDirs = append(b.sp.HideDirs, real)
		default:
			b.sp.HideFiles = append(b.sp.HideFiles, real)
		}
		hidden = append(hidden, real)
	}
	if len(hidden) > 0 {
		b.report["hidden"] = hidden
	}
}

// gitControl returns the parts of a repository at root that make git run
// code or change where it looks: hooks, config, and a .git file (a
// worktree's or submodule's pointer to its git directory). A missing hooks
// directory is created (empty, as git init would) so that it can be
// protected; otherwise a command could create it and plant a hook.
func gitControl(root string) []string {
	dotgit := filepath.Join(root, ".git")
	st, err := os.Lstat(dotgit)
	switch {
	case err != nil:
		return nil
	case !st.IsDir():
		return []string{dotgit}
	}
	hooks := filepath.Join(dotgit, "hooks")
	if _, err := os.Lstat(hooks); errors.Is(err, fs.ErrNotExist) {
		_ = os.Mkdir(hooks, 0o755)
	}
	return []string{hooks, filepath.Join(dotgit, "config")}
}

// under reports whether path is one of roots or inside one.
func under(path string, roots []string) bool {
	for _, r := range roots {
		if path == r || strings.HasPrefix(path, r+string(filepath.Separator)) || r == "/" {
			return true
		}
	}
	return false
}

// user resolves --user to ids and hands the private temp dir to that user.
func (b *builder) user(tmp string) error {
	name := b.p.User
	u, err := user.Lookup(name)
	if err != nil {
		if _, nerr := strconv.Atoi(name); nerr != nil {
			return invalid("unknown user %q", name)
		}
		if u, err = user.LookupId(name); err != nil {
			return invalid("unknown user id %s", name)
		}
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return invalid("user %q has non-numeric ids", name)
	}
	var groups []int
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.Atoi(s); err == nil {
				groups = append(groups, g)
			}
		}
	}
	sort.Ints(groups)
	b.sp.UID, b.sp.GID, b.sp.Groups = uid, gid, groups
	if err := os.Chown(tmp, uid, gid); err != nil {
		return result.Errorf(CodeFailed, "chown %s: %v", tmp, unwrap(err))
	}
	b.report["user"] = map[string]any{"name": u.Username, "uid": uid, "gid": gid}
	return nil
}

// limits turns the resource limits into cgroups and rlimits.
func (b *builder) limits() error {
	p, c := b.p, b.caps
	if p.Memory > 0 {
		if c.CgroupV1Memory != "" {
			dir, err := b.newCgroup(c.CgroupV1Memory, c.memoryParent)
			if err != nil {
				return err
			}
			limit := strconv.FormatInt(p.Memory, 10)
			if err := writeCgroup(dir, "memory.limit_in_bytes", limit); err != nil {
				return err
			}
			// Without memsw the command could page out to swap and
			// exceed the limit; where swap accounting exists, cap it too.
			if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
				if err := writeCgroup(dir, "memory.memsw.limit_in_bytes", limit); err != nil {
					return err
				}
			}
			b.memCgroup = dir
			b.sp.Cgroups = append(b.sp.Cgroups, dir)
			b.report["memory"] = "cgroup_v1"
		} else {
			b.sp.Rlimits = append(b.sp.Rlimits, rlimitSet{unix.RLIMIT_AS, uint64(p.Memory), uint64(p.Memory)})
			b.report["memory"] = "rlimit_as"
			b.report["memory_note"] = "no writable memory cgroup: address space is limited instead; an allocation fails rather than the process being killed"
		}
		b.report["memory_bytes"] = p.Memory
	}
	if p.Pids > 0 {
		if c.CgroupV1Pids != "" {
			dir, err := b.newCgroup(c.CgroupV1Pids, c.pidsParent)
			if err != nil {
				return err
			}
			if err := writeCgroup(dir, "pids.max", strconv.Itoa(p.Pids)); err != nil {
				return err
			}
			b.pidCgroup = dir
			b.sp.Cgroups = append(b.sp.Cgroups, dir)
			b.report["pids"] = "cgroup_v1"
		} else {
			// check() refused this for root, for whom NPROC is ignored.
			b.sp.Rlimits = append(b.sp.Rlimits, rlimitSet{unix.RLIMIT_NPROC, uint64(p.Pids), uint64(p.Pids)})
			b.report["pids"] = "rlimit_nproc"
			b.report["pids_note"] = "RLIMIT_NPROC counts every process of the user, not only this command's"
		}
		b.report["pids_max"] = p.Pids
	}
	if p.CPUTime > 0 {
		secs := uint64((p.CPUTime + time.Second - 1) / time.Second)
		// SIGXCPU at the soft limit; SIGKILL one second later for a
		// command that ignores it.
		b.sp.Rlimits = append(b.sp.Rlimits, rlimitSet{unix.RLIMIT_CPU, secs, secs + 1})
		b.report["cpu_time_ms"] = int64(secs) * 1000
	}
	if p.FileSize > 0 {
		b.sp.Rlimits = append(b.sp.Rlimits, rlimitSet{unix.RLIMIT_FSIZE, uint64(p.FileSize), uint64(p.FileSize)})
		b.report["file_size"] = p.FileSize
	}
	if p.Nofile > 0 {
		b.sp.Rlimits = append(b.sp.Rlimits, rlimitSet{unix.RLIMIT_NOFILE, uint64(p.Nofile), uint64(p.Nofile)})
		b.report["nofile"] = p.Nofile
	}
	return nil
}

// newCgroup creates a cgroup for this run below the caller's own cgroup in
// that hierarchy, so that limits set on the caller keep covering the
// command.
func (b *builder) newCgroup(mount, parent string) (string, error) {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	sweepCgroups(filepath.Join(mount, parent))
	dir := filepath.Join(mount, parent, cgroupName(hex.EncodeToString(rnd[:])))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", unavailable("cannot create cgroup %s: %v", dir, unwrap(err))
	}
	b.cgroups = append(b.cgroups, dir)
	return dir, nil
}

func writeCgroup(dir, file, value string) error {
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return unavailable("cannot set %s to %s: %v", path, value, unwrap(err))
	}
	return nil
}

func (b *builder) cleanup() {
	for i := len(b.cgroups) - 1; i >= 0; i-- {
		removeCgroup(b.cgroups[i])
	}
	if b.base != "" {
		_ = os.RemoveAll(b.base)
	}
}

// removeCgroup kills what is left in dir and removes it. Exited tasks leave
// a cgroup asynchronously, so rmdir is retried for a short while.
func removeCgroup(dir string) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) || time.Now().After(deadline) {
			return
		}
		if data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// classify reads the cgroup counters and the exit status to name the limit
// that ended the run.
func classify(p Policy, memCg, pidCg, status string, exitCode int, signal string) string {
	if e, _ := readHelperError(status); e != nil && e.Code != "" {
		return e.Code
	}
	sig := signalOf(exitCode, signal)
	if memCg != "" && memoryHit(memCg, sig) {
		return CodeMemoryLimit
	}
	switch {
	case sig == unix.SIGXCPU && p.CPUTime > 0:
		return CodeCPULimit
	case sig == unix.SIGKILL && p.CPUTime > 0:
		// The hard CPU limit sends SIGKILL; the OOM case was ruled out
		// above and the caller does not classify timeouts.
		return CodeCPULimit
	case sig == unix.SIGXFSZ && p.FileSize > 0:
		return CodeFileSizeLimit
	}
	if pidCg != "" && counter(filepath.Join(pidCg, "pids.events"), "max") > 0 {
		return CodePidsLimit
	}
	return ""
}

// signalOf takes the signal name from the runner, or else reads a shell's
// 128+N exit status, since `sh -c 'hog'` reports its child's death that way.
func signalOf(exitCode int, signal string) unix.Signal {
	if signal != "" {
		name := strings.TrimPrefix(strings.ToUpper(signal), "SIG")
		if s := unix.SignalNum("SIG" + name); s != 0 {
			return s
		}
		return 0
	}
	if exitCode > 128 && exitCode < 128+65 {
		return unix.Signal(exitCode - 128)
	}
	return 0
}

// memoryHit reports an OOM kill in the memory cgroup. oom_kill in
// memory.oom_control counts kills (kernel 4.13+); failcnt is the fallback
// for older kernels, believed only together with a SIGKILL.
func memoryHit(dir string, sig unix.Signal) bool {
	if n := counter(filepath.Join(dir, "memory.oom_control"), "oom_kill"); n > 0 {
		return true
	} else if n == 0 {
		return false
	}
	return sig == unix.SIGKILL && counter(filepath.Join(dir, "memory.failcnt"), "") > 0
}

// counter reads "key value" lines (or a bare number when key is ""), and
// returns -1 when the file or the key is missing.
func counter(path, key string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case key == "" && len(f) == 1:
		case len(f) == 2 && f[0] == key:
			f = f[1:]
		default:
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	return -1
}

func readHelperError(status string) (*helperError, error) {
	data, err := os.ReadFile(status)
	if err != nil || len(data) == 0 {
		return nil, err
	}
	var e helperError
	if err := json.Unmarshal(data, &e); err == nil && e.Code == "" && e.Signal > 0 {
		return &e, nil
	}
	if err := json.Unmarshal(data, &e); err != nil || e.Code == "" {
		return &helperError{Code: CodeFailed, Message: "the sandbox helper failed: " + strings.TrimSpace(string(data))}, nil
	}
	return &e, nil
}

func readFailure(status string) error {
	e, _ := readHelperError(status)
	if e == nil || e.Code == "" {
		return nil
	}
	return result.Errorf(e.Code, "%s", e.Message)
}

// decodeSpec is the helper's half of the argv protocol.
func decodeSpec(arg string) (spec, error) {
	var sp spec
	data, err := base64.RawURLEncoding.DecodeString(arg)
	if err != nil {
		return sp, fmt.Errorf("bad sandbox spec: %v", err)
	}
	if err := json.Unmarshal(data, &sp); err != nil {
		return sp, fmt.Errorf("bad sandbox spec: %v", err)
	}
	return sp, nil
}

// caches returns the writable roots and environment for toolchain caches
// in a filesystem mode. By default every cache goes to a private directory
// of the environment (one per uid), so that a build works without making
// the user's own caches writable (a poisoned build cache or module cache
// would run code in the user's next unsandboxed build). UserCaches makes
// the user's cache directories writable instead, as they are.
func (b *builder) caches() ([]string, []string, error) {
	p := b.p
	home, _ := os.UserHomeDir()
	if p.UserCaches {
		var roots []string
		for _, d := range userCacheDirs(home) {
			if real, err := realPath(d); err == nil {
				if st, err := os.Stat(real); err == nil && st.IsDir() {
					roots = append(roots, real)
				}
			}
		}
		b.report["caches"] = map[string]any{"kind": "user", "writable": roots}
		return roots, nil, nil
	}
	if p.CacheDir == "" {
		return nil, nil, nil
	}
	dir := filepath.Join(p.CacheDir, "uid-"+strconv.Itoa(os.Getuid()))
	kind := "private"
	if b.sp.UID >= 0 {
		// The environment's directory is the caller's (0700); another
		// user's tools get a cache for this run only, in its temp dir.
		dir, kind = filepath.Join(b.base, "tmp", ".cache"), "run"
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, result.Errorf(CodeFailed, "cannot create the toolchain cache %s: %v", dir, unwrap(err))
	}
	if b.sp.UID >= 0 {
		if err := os.Chown(dir, b.sp.UID, b.sp.GID); err != nil {
			return nil, nil, result.Errorf(CodeFailed, "chown %s: %v", dir, unwrap(err))
		}
	}
	real, err := realPath(dir)
	if err != nil {
		return nil, nil, result.Errorf(CodeFailed, "toolchain cache %s: %v", dir, err)
	}
	env := []string{
		"XDG_CACHE_HOME=" + filepath.Join(real, "xdg"),
		"GOCACHE=" + filepath.Join(real, "go-build"),
		"GOMODCACHE=" + filepath.Join(real, "go-mod"),
		// Module files are read-only by default, which would keep the
		// operator from removing the cache.
		"GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -modcacherw"),
		"npm_config_cache=" + filepath.Join(real, "npm"),
		"PIP_CACHE_DIR=" + filepath.Join(real, "pip"),
		"CARGO_HOME=" + filepath.Join(real, "cargo"),
	}
	// Modules the user already downloaded are served read-only from the
	// user's own module cache before the network is asked, so builds work
	// offline (--net none) with the private cache.
	if dl := filepath.Join(userModCache(home), "cache", "download"); dl != "" {
		if st, err := os.Stat(dl); err == nil && st.IsDir() {
			proxy := os.Getenv("GOPROXY")
			if proxy == "" {
				proxy = "https://proxy.golang.org,direct"
			}
			if proxy != "off" {
				env = append(env, "GOPROXY=file://"+dl+","+proxy)
			}
		}
	}
	b.report["caches"] = map[string]any{"kind": kind, "dir": real}
	if kind == "run" {
		return nil, env, nil
	}
	return []string{real}, env, nil
}

func userModCache(home string) string {
	if v := os.Getenv("GOMODCACHE"); v != "" {
		return v
	}
	if v := os.Getenv("GOPATH"); v != "" {
		return filepath.Join(filepath.SplitList(v)[0], "pkg", "mod")
	}
	return filepath.Join(home, "go", "pkg", "mod")
}

// userCacheDirs are the caches UserCaches makes writable.
func userCacheDirs(home string) []string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		cache = filepath.Join(home, ".cache")
	}
	dirs := []string{cache, userModCache(home), filepath.Join(home, ".npm"), filepath.Join(home, ".cargo", "registry"), filepath.Join(home, ".cargo", "git")}
	if v := os.Getenv("GOCACHE"); v != "" {
		dirs = append(dirs, v)
	}
	return dirs
}

// exitStatus restores a signal death that the helper recorded.
func exitStatus(status string, exitCode int, signal string) (int, string) {
	e, _ := readHelperError(status)
	if e == nil || e.Code != "" || e.Signal <= 0 || signal != "" {
		return exitCode, signal
	}
	return 128 + e.Signal, proctree.SignalName(syscall.Signal(e.Signal))
}

// limitsHit reads the cgroup counters, which say whether the kernel
// refused a fork or killed for memory whatever the exit status.
func limitsHit(memCg, pidCg string) []string {
	var hit []string
	if memCg != "" && counter(filepath.Join(memCg, "memory.oom_control"), "oom_kill") > 0 {
		hit = append(hit, CodeMemoryLimit)
	}
	if pidCg != "" && counter(filepath.Join(pidCg, "pids.events"), "max") > 0 {
		hit = append(hit, CodePidsLimit)
	}
	return hit
}
