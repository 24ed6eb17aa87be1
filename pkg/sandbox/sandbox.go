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
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/netproxy"
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
	NetHost  = "host"
	NetNone  = "none"
	NetProxy = "proxy" // a network namespace whose only way out is the allowlist proxy
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
	Net        string   // host (or ""), none, proxy
	// AllowHosts are the allowlist's patterns (netproxy.ParseRule) for
	// --net proxy; given with Net "" or host, they imply proxy.
	AllowHosts []string `json:",omitempty"`
	Memory     int64    // bytes; 0 means no limit
	CPUTime    time.Duration
	Pids       int   // processes and threads of the whole tree
	FileSize   int64 // largest file the command may write, bytes
	Nofile     int   // open file descriptors
	User       string
}

// Empty reports whether p asks for no confinement at all, in which case
// the command can run without the helper.
func (p Policy) Empty() bool {
	return (p.Mode == "" || p.Mode == ModeNone) && (p.Net == "" || p.Net == NetHost) &&
		len(p.AllowHosts) == 0 && len(p.DenyRead) == 0 && p.Memory == 0 && p.CPUTime == 0 && p.Pids == 0 &&
		p.FileSize == 0 && p.Nofile == 0 && p.User == ""
}

// Prepared is a policy made ready for one run. Cleanup must be called after
// the run, and after Classify and Failure.
type Prepared struct {
	// Argv wraps the target argv in the helper invocation. The target's
	// argv[0] is resolved by the helper against the PATH of its own
	// environment, after the restrictions are in place.
	Argv func(argv []string) []string
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
	// Launch is called before each start of the command (a job's restart
	// is a new start): the files it returns must be the command's first
	// extra files (fd 3 on), and started must be called once the start
	// returned, whether it succeeded or not. Without --net proxy it
	// returns no files and a started that does nothing.
	Launch func() (extraFiles []*os.File, started func(), err error)
	// Network reports the allowlist and its refusals so far, with --net
	// proxy; nil otherwise.
	Network func() *netproxy.Report
	// OnDeny, when set before the first Launch, is called for each
	// connection the allowlist refused (for the audit log).
	OnDeny func(netproxy.Denial)
	// Failure returns the helper's error (a *result.Error with code
	// sandbox_failed, command_not_found or command_not_executable) when it
	// could not start the target, else nil. Call it before Cleanup.
	Failure func() error
}

// spec is what the parent hands to the helper, as base64 JSON in argv.
type spec struct {
	Status      string   `json:"status"` // file the helper writes its error to
	LandlockABI int      `json:"landlock_abi,omitempty"`
	Writable    []string `json:"writable,omitempty"`
	DenyDirs    []string `json:"deny_dirs,omitempty"`
	DenyFiles   []string `json:"deny_files,omitempty"`
	NetNone     bool     `json:"net_none,omitempty"`
	// ProxyPort, with --net proxy: listen there inside the namespace and
	// hand the listener over fd 3.
	ProxyPort int         `json:"proxy_port,omitempty"`
	Cgroups   []string    `json:"cgroups,omitempty"` // directories to join
	Rlimits   []rlimitSet `json:"rlimits,omitempty"`
	UID       int         `json:"uid"` // -1: keep
	GID       int         `json:"gid"`
	Groups    []int       `json:"groups,omitempty"`
	DropCaps  bool        `json:"drop_caps,omitempty"`
	// ClearAmbient: the helper got ambient capabilities in its user
	// namespace that the target must not inherit.
	ClearAmbient bool `json:"clear_ambient,omitempty"`
}

type rlimitSet struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// helperError is the status file's content.
type helperError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
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
	b := &builder{p: p, caps: caps, self: self, sp: spec{UID: -1, GID: -1}}
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

func noLaunch() ([]*os.File, func(), error) { return nil, func() {}, nil }

func passthrough() *Prepared {
	return &Prepared{
		Argv:     func(argv []string) []string { return argv },
		Launch:   noLaunch,
		Network:  func() *netproxy.Report { return nil },
		Report:   map[string]any{"mode": ModeNone, "network": NetHost},
		Cleanup:  func() {},
		Classify: func(int, string) string { return "" },
		Failure:  func() error { return nil },
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
	case NetHost, NetNone, NetProxy:
	default:
		return p, invalid("unknown network policy %q (want host, none or proxy)", p.Net)
	}
	if len(p.AllowHosts) > 0 {
		if _, err := netproxy.ParseRules(p.AllowHosts); err != nil {
			return p, invalid("--allow-host: %v", err)
		}
		switch p.Net {
		case NetHost:
			p.Net = NetProxy // --allow-host alone implies --net proxy
		case NetNone:
			// None is stricter than any allowlist, so a request or flag
			// asking for it wins over configured hosts.
			p.AllowHosts = nil
		}
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
	return b.p.Mode != ModeNone || b.p.Net == NetNone || b.p.Net == NetProxy || len(b.p.DenyRead) > 0 || b.p.User != ""
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
	if (p.Net == NetNone || p.Net == NetProxy) && !(c.NetNS && nsOK) {
		return unavailable("--net %s needs network namespaces%s", p.Net, ifNotRoot(c.Root, " and unprivileged user namespaces"))
	}
	if len(p.DenyRead) > 0 && !(c.MountNS && nsOK) {
		return unavailable("--deny-read needs mount namespaces%s", ifNotRoot(c.Root, " and unprivileged user namespaces"))
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
	base, err := os.MkdirTemp(parent, "agentplane-sandbox-")
	if err != nil {
		return nil, result.Errorf(CodeFailed, "cannot create the sandbox's private directory: %v", unwrap(err)).Wrap(err)
	}
	b.base = base
	// 0711: a --user target must reach tmp/ but not list or read the
	// status file beside it.
	if err := os.Chmod(base, 0o711); err != nil {
		return nil, result.Errorf(CodeFailed, "chmod %s: %v", base, unwrap(err))
	}
	tmp := filepath.Join(base, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, result.Errorf(CodeFailed, "cannot create the sandbox's temp dir: %v", unwrap(err))
	}
	// The helper creates the status file at its start, while it may still
	// write here, and writes to it only if it fails.
	status := filepath.Join(base, "status")
	b.sp.Status = status
	b.report["tmpdir"] = tmp

	if p.User != "" {
		if err := b.user(tmp); err != nil {
			return nil, err
		}
	}
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
		b.sp.Writable = writable
		b.report["filesystem"] = "landlock"
		b.report["landlock_abi"] = b.sp.LandlockABI
		b.report["writable"] = writable
	} else {
		b.report["filesystem"] = "host"
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
				b.sp.DenyDirs = append(b.sp.DenyDirs, path)
			default:
				b.sp.DenyFiles = append(b.sp.DenyFiles, path)
			}
			hidden = append(hidden, path)
		}
		b.report["deny_read"] = hidden
		if len(missing) > 0 {
			b.report["deny_read_missing"] = missing
		}
	}

	attr := &syscall.SysProcAttr{}
	var np *netProxy
	var env []string
	switch p.Net {
	case NetNone:
		attr.Cloneflags |= syscall.CLONE_NEWNET
		b.sp.NetNone = true
		b.report["network"] = "namespace"
	case NetProxy:
		rules, err := netproxy.ParseRules(p.AllowHosts)
		if err != nil {
			return nil, invalid("--allow-host: %v", err)
		}
		attr.Cloneflags |= syscall.CLONE_NEWNET
		b.sp.NetNone = true
		b.sp.ProxyPort = ProxyPort
		np = newNetProxy(rules)
		env = proxyEnv(rules)
		b.report["network"] = NetProxy
		b.report["proxy"] = ProxyAddr
		b.report["allow_hosts"] = rules.Patterns()
	default:
		b.report["network"] = NetHost
	}
	if len(b.sp.DenyDirs)+len(b.sp.DenyFiles) > 0 {
		attr.Cloneflags |= syscall.CLONE_NEWNS
	}
	if attr.Cloneflags != 0 && !b.caps.Root {
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
	}

	if err := b.limits(); err != nil {
		return nil, err
	}
	b.sp.DropCaps = b.isolating() && b.caps.Root
	if b.sp.DropCaps {
		b.report["capabilities"] = keptCapNames()
	}

	enc, err := json.Marshal(b.sp)
	if err != nil {
		return nil, result.Errorf(result.CodeInternal, "encode sandbox spec: %v", err)
	}
	arg := base64.RawURLEncoding.EncodeToString(enc)
	self := b.self
	statusPath := status
	memCg, pidCg := b.memCgroup, b.pidCgroup
	policy := p
	cgroups := b.cgroups

	var once sync.Once
	cleanup := func() {
		once.Do(func() {
			if np != nil {
				np.close()
			}
			for i := len(cgroups) - 1; i >= 0; i-- {
				removeCgroup(cgroups[i])
			}
			_ = os.RemoveAll(base)
		})
	}
	prep := &Prepared{
		Argv: func(argv []string) []string {
			out := make([]string, 0, len(argv)+4)
			out = append(out, self, HelperCommand, arg, "--")
			return append(out, argv...)
		},
		Env:         append([]string{"TMPDIR=" + tmp, "TMP=" + tmp, "TEMP=" + tmp}, env...),
		SysProcAttr: attr,
		Report:      b.report,
		TempDir:     tmp,
		Cleanup:     cleanup,
		Classify: func(exitCode int, signal string) string {
			return classify(policy, memCg, pidCg, statusPath, exitCode, signal)
		},
		Failure: func() error { return readFailure(statusPath) },
		Launch:  noLaunch,
		Network: func() *netproxy.Report { return nil },
	}
	if np != nil {
		prep.Launch = func() ([]*os.File, func(), error) {
			if prep.OnDeny != nil {
				np.proxy.SetOnDeny(prep.OnDeny)
			}
			return np.launch()
		}
		prep.Network = func() *netproxy.Report {
			r := np.proxy.Report()
			return &r
		}
	}
	return prep, nil
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
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	dir := filepath.Join(mount, parent, "agentplane-"+hex.EncodeToString(rnd[:]))
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
	if e, _ := readHelperError(status); e != nil {
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
	if err := json.Unmarshal(data, &e); err != nil || e.Code == "" {
		return &helperError{Code: CodeFailed, Message: "the sandbox helper failed: " + strings.TrimSpace(string(data))}, nil
	}
	return &e, nil
}

func readFailure(status string) error {
	e, _ := readHelperError(status)
	if e == nil {
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
