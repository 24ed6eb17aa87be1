// Package confine is the sandbox helper's side of package sandbox: the
// process that the runner starts with a Spec on an inherited pipe
// (SpecFD), which confines
// itself (on Linux, as PID 1 of new namespaces: process accounting, the
// mounts with the temp-area covers and the pinned git directories,
// capabilities, no_new_privs, Landlock, the seccomp filter, rlimits; on
// macOS by execing sandbox-exec) and then starts the target, so that the
// target and everything it starts inherit the confinement; under --net
// none it also serves the Unix socket gate (seccomp user notification)
// while the target runs. It links only the standard library's core,
// golang.org/x/sys/unix and pkg/result, and no cgo, so that the helper's
// own program (cmd/agentplane-sandbox) is a small static binary: its
// start-up is part of every sandboxed call. Package sandbox builds the
// Spec and reads the status file back.
package confine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"syscall"
)

// Command is the hidden first argument that marks a re-exec of a program
// as the sandbox helper. The program's main must call Main(os.Args[2:])
// when os.Args[1] equals it, before any other work.
const Command = "__sandbox-exec"

// Exit statuses of the helper when it fails before the target runs. They
// follow the coreutils convention the agentsh contract uses.
const (
	ExitSetupFailed   = 125
	ExitNotExecutable = 126
	ExitNotFound      = 127
)

// SpecVersion changes whenever Spec changes meaning: a helper from another
// build refuses the spec rather than enforcing less than asked. 6: the
// runner resolves a probe's addresses (4, this package) and the helper
// turns on accounting, covers the temp areas and pins the git directories
// (5 on main); a helper of either 5 would miss half of it. 7: the helper
// shows the command a cgroup filesystem of the run's own cgroups only
// (cgroupView), and records the limit deaths of the orphans it reaps in the
// status file (Failure.Deaths). 8: the spec comes on a pipe (SpecFD), not
// in argv. 9: the spec's descriptor may be a socket on which the helper
// reports the command's end (Report). 10: the spec is in the record format
// of EncodeSpec, not JSON. 11: each writable root, write file and
// read-only path comes with the identity the runner checked (WritableIDs,
// WriteFileIDs, ReadOnlyIDs), which the helper holds it to. 12: the records
// end with an end record, without which a spec cut short at a record's end
// is refused. 13: the paths hidden at the caller's request (--deny-read,
// the program's secrets) come as Hidden, each with the identity the runner
// saw (HiddenIDs), which the helper covers or fails the run. 14: the
// dynamic loader's variables of the target's environment come in the spec
// (Env), not in the helper's own. 16: a helper whose argv names only the
// spec's descriptor was started before its run was prepared, and takes the
// target's argv, environment, directory and streams with the spec (Argv,
// Environ, Dir, ReadEarlySpec). 17: such a helper starts with a coarse
// timer slack, and sets the target's own (TimerSlack) before it starts it.
const SpecVersion = 17

// Spec is what the runner hands to the helper, encoded by EncodeSpec on
// the pipe at SpecFD. Never in argv: the helper is PID 1 of the sandbox, and the
// command could read its own policy's layout (the covered paths, the
// status file) in /proc/1/cmdline.
type Spec struct {
	V           int      `json:"v"`
	Status      string   `json:"status"` // file the helper writes its error to
	LandlockABI int      `json:"landlock_abi,omitempty"`
	Writable    []string `json:"writable,omitempty"`
	WriteFiles  []string `json:"write_files,omitempty"`
	// WritableIDs and WriteFileIDs are the identities of Writable and
	// WriteFiles, one each, as the runner checked them: the helper opens
	// each path without following a symbolic link and refuses one that is
	// not that file (pathid_linux.go).
	WritableIDs  []FileID `json:"writable_ids,omitempty"`
	WriteFileIDs []FileID `json:"write_file_ids,omitempty"`
	// DenyDirs and DenyFiles are the program's own files to hide (the
	// status and accounting files, the host's Unix sockets), covered by
	// their path where they still are.
	DenyDirs  []string `json:"deny_dirs,omitempty"`
	DenyFiles []string `json:"deny_files,omitempty"`
	// Hidden are the paths hidden at the caller's request (--deny-read,
	// the environment's secret key and session sockets), HiddenIDs their
	// identities, one each: the helper opens each path without following
	// a symbolic link, refuses one that is not that file (or is gone), and
	// covers what it opened, a directory with an empty tmpfs and anything
	// else with /dev/null (mounts_linux.go). Covered by its path, a file
	// whose parent a concurrent command renamed away since the runner
	// looked would be covered at its old name, or nowhere, and read at the
	// new one.
	Hidden    []string `json:"hidden,omitempty"`
	HiddenIDs []FileID `json:"hidden_ids,omitempty"`
	NetNone   bool     `json:"net_none,omitempty"`
	// ProxyPort, with --net proxy: listen there inside the namespace and
	// hand the listener over the descriptor after the control socket
	// (proxyFD).
	ProxyPort int      `json:"proxy_port,omitempty"`
	Cgroups   []string `json:"cgroups,omitempty"` // directories to join
	Rlimits   []Rlimit `json:"rlimits,omitempty"`
	UID       int      `json:"uid"` // -1: keep
	GID       int      `json:"gid"`
	Groups    []int    `json:"groups,omitempty"`
	DropCaps  bool     `json:"drop_caps,omitempty"`
	// ClearAmbient: the helper got ambient capabilities in its user
	// namespace that the target must not inherit.
	ClearAmbient bool `json:"clear_ambient,omitempty"`
	// Seatbelt (macOS) is the sandbox-exec argv up to "--", which the
	// helper puts before the target's.
	Seatbelt []string `json:"seatbelt,omitempty"`
	// ReadOnlyRoot (Linux): every mount read-only but the writable roots.
	ReadOnlyRoot bool     `json:"read_only_root,omitempty"`
	MinimalDev   bool     `json:"minimal_dev,omitempty"`
	ReadOnly     []string `json:"read_only,omitempty"` // bound read-only
	// ReadOnlyIDs are the identities of ReadOnly, one each (as
	// WritableIDs): a control file is protected where it is, not where a
	// swapped parent would lead.
	ReadOnlyIDs []FileID `json:"read_only_ids,omitempty"`
	// DropFileCaps also drops CHOWN, FOWNER and FSETID, with which root
	// changes the metadata of files it does not own.
	DropFileCaps bool `json:"drop_file_caps,omitempty"`
	// KeepFDs is how many descriptors after stderr (3, 4, …; after the
	// control socket when there is one) the caller passes on purpose;
	// every other inherited one is closed at exec.
	KeepFDs int `json:"keep_fds,omitempty"`
	// Control: fd 3 is a control socket for readiness probes (control.go).
	Control bool `json:"control,omitempty"`
	// Acct: the helper turns on process accounting into this file
	// (acct_linux.go).
	Acct string `json:"acct,omitempty"`
	// TempAreas are covered, TempDir (the run's own) bound back
	// (tempareas_linux.go).
	TempAreas []string `json:"temp_areas,omitempty"`
	TempDir   string   `json:"temp_dir,omitempty"`
	// Pinned directories are bound onto themselves so that they cannot be
	// renamed or removed (gitcontrol_linux.go), before the ReadOnly binds;
	// an entry PinLink and a path is a symbolic link, bound onto itself
	// unfollowed, so that it cannot be replaced.
	Pinned []string `json:"pinned,omitempty"`
	// Report: the spec's descriptor is one end of a socket pair, which
	// the runner shuts for writing after the spec; the helper keeps it
	// (close-on-exec) and writes EndMessage on it once the command is
	// over and its PID namespace holds no other process, before its own
	// exit, which waits for the kernel to tear the namespaces down.
	Report bool `json:"report,omitempty"`
	// Argv, Environ and Dir are the target's argv, its whole environment
	// and its working directory, for a helper started before its run was
	// prepared (the runner's StartEarly), whose own command line names no
	// target and whose environment is empty; its standard streams come
	// with the spec's first bytes (ReadEarlySpec). Unset otherwise: the
	// helper's argv after "--", its environment and its directory are the
	// target's.
	Argv    []string `json:"argv,omitempty"`
	Environ []string `json:"environ,omitempty"`
	Dir     string   `json:"dir,omitempty"`
	// TimerSlack, when not 0, is the timer slack in nanoseconds the
	// helper gives the target's thread before it starts it: a helper
	// started ahead starts with a coarse one (package spawn), which the
	// target, its child, would inherit.
	TimerSlack int `json:"timer_slack,omitempty"`
	// Env are the dynamic loader's variables (LD_PRELOAD, LD_AUDIT, …,
	// DYLD_*, as NAME=value) of the target's environment, which the runner
	// keeps out of the helper's own: the loader would run the code they
	// name in the helper, before any confinement. The helper sets them
	// for the target (and its probes) before it starts it.
	Env []string `json:"env,omitempty"`
}

// A FileID is a file's identity: its device and inode.
type FileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// StartedMessage is the helper's report, on the end report's socket,
// that it is starting the target (the fork comes right after it; a
// failure of it is in the status file); EndMessage follows it.
var StartedMessage = []byte("started\n")

// EndMessage is the helper's report of the command's end: exit is the
// status the helper is about to exit with (a signal death as 128+N, the
// signal itself in the status file, which is complete before the report
// is sent).
func EndMessage(exit int) []byte {
	return []byte("end " + strconv.Itoa(exit) + "\n")
}

// ParseEnd reads an EndMessage; ok is false for anything else.
func ParseEnd(msg []byte) (exit int, ok bool) {
	rest, found := strings.CutPrefix(string(msg), "end ")
	rest, nl := strings.CutSuffix(rest, "\n")
	if !found || !nl {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || n > 255 || strconv.Itoa(n) != rest {
		return 0, false
	}
	return n, true
}

// Rlimit is one resource limit to set before the target starts.
type Rlimit struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// Failure is the status file's content: why the helper could not start
// the target, or the signal the target died of.
type Failure struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// Signal, without a code, is not a failure: the target died of it.
	Signal int `json:"signal,omitempty"`
	// Deaths, without a code, is not a failure either: processes of the
	// run other than the target that the helper reaped died of a signal
	// a limit sends (deaths.go).
	Deaths Deaths `json:"deaths,omitempty"`
	// Changed, with the code, is the path the helper refused because it
	// is another file than the one the runner checked (ChangedError): a
	// process outside replaced it during the start, as a host's git
	// rewrites .git/config by a rename. The runner may start again.
	Changed string `json:"changed,omitempty"`
}

// ChangedError is the helper's refusal of a path that changed since the
// runner checked it (OpenChecked): a file the sandbox binds, covers or
// grants is then not the one the runner saw.
type ChangedError struct {
	Path string
	What string // how: "it is another file now (...)", "it is gone", ...
}

func (e *ChangedError) Error() string { return e.Path + " changed since it was checked: " + e.What }

// Probe kinds of a control request.
const (
	ProbeCmd  = "cmd"  // Arg is argv (JSON array): run it confined like the job
	ProbeTCP  = "tcp"  // Arg is host:port
	ProbeHTTP = "http" // Arg is a URL; a status below 500 passes
)

// ControlRequest asks the helper for one probe.
type ControlRequest struct {
	ID   int    `json:"id"`
	Kind string `json:"kind"`
	Addr string `json:"addr,omitempty"`
	// Addrs are Addr's host resolved to IP:port by the runner: the helper
	// links no resolver (control_linux.go).
	Addrs []string `json:"addrs,omitempty"`
	Argv  []string `json:"argv,omitempty"`
}

// ControlReply answers the request of the same ID.
type ControlReply struct {
	ID int  `json:"id"`
	OK bool `json:"ok"`
}

// ControlFD is where the helper finds its control socket.
const ControlFD = 3

// SpecFD is the descriptor on which the helper reads its spec: the first
// extra file after the control socket, if any, which the runner names in
// the helper's argv (Command, the number, "--", the target's argv).
func SpecFD(control bool) int {
	if control {
		return ControlFD + 1
	}
	return 3
}

// maxSpec bounds what the helper reads as its spec.
const maxSpec = 16 << 20

// ReadSpec is the helper's half of the spec protocol: it reads the spec
// from the pipe or socket at fd to its end. It closes fd, which the target
// must not inherit, unless the spec asks for the end report (Report): it
// then returns fd, marked close-on-exec, else -1.
func ReadSpec(fd int) (Spec, int, error) {
	var sp Spec
	if fd < 0 || syscall.SetNonblock(fd, false) != nil {
		return sp, -1, fmt.Errorf("bad sandbox spec descriptor %d", fd)
	}
	syscall.CloseOnExec(fd)
	data, err := readAll(fd, maxSpec+1)
	if err != nil {
		syscall.Close(fd)
		return sp, -1, fmt.Errorf("cannot read the sandbox spec: %v", unwrap(err))
	}
	sp, err = ParseSpec(data)
	if err != nil || !sp.Report {
		syscall.Close(fd)
		return sp, -1, err
	}
	return sp, fd, nil
}

// readAll reads fd to its end, at most limit bytes, without wrapping it
// in an os.File (whose finalizer would close it). A spec is a few hundred
// bytes: the buffer starts small (every page of a larger one is a fault
// on the helper's way to the command) and grows as needed.
func readAll(fd, limit int) ([]byte, error) {
	return readMore(fd, make([]byte, 0, 4<<10), limit)
}

// readMore is readAll after the bytes of data were read.
func readMore(fd int, data []byte, limit int) ([]byte, error) {
	for len(data) < limit {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := syscall.Read(fd, data[len(data):cap(data)])
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		data = data[:len(data)+n]
	}
	return data, nil
}

// ParseSpec decodes a spec as the runner writes it (EncodeSpec). A JSON
// spec is an older runner's: its version is read, so that the helper can
// say it is from another build.
func ParseSpec(data []byte) (Spec, error) {
	var sp Spec
	if len(data) > maxSpec {
		return sp, fmt.Errorf("bad sandbox spec: larger than %d bytes", maxSpec)
	}
	if len(data) > 0 && data[0] == '{' {
		if err := json.Unmarshal(data, &sp); err != nil {
			return sp, fmt.Errorf("bad sandbox spec: %v", err)
		}
		return sp, nil
	}
	if err := decodeSpec(&sp, data); err != nil {
		return sp, fmt.Errorf("bad sandbox spec: %v", err)
	}
	return sp, nil
}

func unwrap(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
