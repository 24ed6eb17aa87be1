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
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
	// Failure returns the helper's error (a *result.Error with code
	// sandbox_failed, command_not_found or command_not_executable) when it
	// could not start the target, else nil. Call it before Cleanup.
	Failure func() error
}

// spec is what the parent hands to the helper, as base64 JSON in argv.
type spec struct {
	Status      string      `json:"status"` // file the helper writes its error to
	LandlockABI int         `json:"landlock_abi,omitempty"`
	Writable    []string    `json:"writable,omitempty"`
	DenyDirs    []string    `json:"deny_dirs,omitempty"`
	DenyFiles   []string    `json:"deny_files,omitempty"`
	NetNone     bool        `json:"net_none,omitempty"`
	Cgroups     []string    `json:"cgroups,omitempty"` // directories to join
	Rlimits     []rlimitSet `json:"rlimits,omitempty"`
	UID         int         `json:"uid"` // -1: keep
	GID         int         `json:"gid"`
	Groups      []int       `json:"groups,omitempty"`
	DropCaps    bool        `json:"drop_caps,omitempty"`
	// ClearAmbient: the helper got ambient capabilities in its user
	// namespace that the target must not inherit.
	ClearAmbient bool `json:"clear_ambient,omitempty"`
	// Seatbelt (macOS) is the sandbox-exec argv up to "--", which the
	// helper puts before the target's.
	Seatbelt []string `json:"seatbelt,omitempty"`
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
	return prepare(p, self, caps)
}

func passthrough() *Prepared {
	return &Prepared{
		Argv:     func(argv []string) []string { return argv },
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

// processRlimits are the limits every platform enforces with setrlimit on
// the command's process: CPU time, file size and descriptors. Each is
// recorded in report.
func processRlimits(p Policy, report map[string]any) []rlimitSet {
	var out []rlimitSet
	if p.CPUTime > 0 {
		secs := uint64((p.CPUTime + time.Second - 1) / time.Second)
		// SIGXCPU at the soft limit; SIGKILL one second later for a
		// command that ignores it.
		out = append(out, rlimitSet{unix.RLIMIT_CPU, secs, secs + 1})
		report["cpu_time_ms"] = int64(secs) * 1000
	}
	if p.FileSize > 0 {
		out = append(out, rlimitSet{unix.RLIMIT_FSIZE, uint64(p.FileSize), uint64(p.FileSize)})
		report["file_size"] = p.FileSize
	}
	if p.Nofile > 0 {
		out = append(out, rlimitSet{unix.RLIMIT_NOFILE, uint64(p.Nofile), uint64(p.Nofile)})
		report["nofile"] = p.Nofile
	}
	return out
}

// rlimitHit names the process limit a signal reports: SIGXCPU, or the
// SIGKILL of the hard limit, for the CPU time; SIGXFSZ for the file size.
// The caller rules out the other reasons for a SIGKILL first (an OOM
// kill, a timeout).
func rlimitHit(p Policy, sig unix.Signal) string {
	switch {
	case sig == unix.SIGXCPU && p.CPUTime > 0:
		return CodeCPULimit
	case sig == unix.SIGKILL && p.CPUTime > 0:
		return CodeCPULimit
	case sig == unix.SIGXFSZ && p.FileSize > 0:
		return CodeFileSizeLimit
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
