// Package audit keeps an environment's audit log: one JSON line per command
// that agentsh, its sessions and agentjob ran, in audit.jsonl in the state
// directory, so that a human can later see what an agent did, with which
// policy decision, and how it ended. The log records what ran, never the
// command's output.
//
// Appends from concurrent processes are serialised by an exclusive flock(2)
// on a sibling lock file (audit.lock) and each record is written with a single
// write(2) on an O_APPEND descriptor, so lines never interleave. The same lock
// covers size-based rotation (audit.jsonl → audit.jsonl.1 → … → audit.jsonl.N),
// so a rotation can never race an append.
//
// Between rotations a file only ever grows: a torn last line left by a crash
// is not cut off but ended, by starting the next record with '\n'. The torn
// fragment then stands alone on its line, readers skip it as unparsable, and
// a follower's byte offset into the file stays valid. Keeping the fragment
// rather than truncating it also suits an audit trail: nothing once written
// is erased except by rotation. A record that reached the disk whole except
// for its final newline is thereby recovered, not dropped.
package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/internal/account"
	"github.com/agentplane/agentplane/pkg/state"
)

// FileName is the audit log's name inside the state directory.
const FileName = "audit.jsonl"

// LockName is the lock file beside the log that appenders and rotation hold.
const LockName = "audit.lock"

// DefaultMaxBytes is the size at which the log is rotated unless
// Log.MaxBytes says otherwise.
const DefaultMaxBytes = 16 << 20

// DefaultKeep is how many rotated files are kept unless Log.Keep says
// otherwise.
const DefaultKeep = 3

// Record is one line of the audit log: one command run (or started) by an
// agentplane program. It never holds the command's output.
type Record struct {
	// Time is when the run ended (or started, for detached jobs), in
	// state.TimeFormat; Append sets it to now when empty.
	Time string `json:"time"`
	// Program is the program that ran it: "agentsh", "agentjob",
	// "agentsh-session", …
	Program string `json:"program"`
	// Operation is the program's verb: "run", "start", "session_call", …
	Operation string `json:"operation"`
	// Command is the shell string or the argv ([]string), as given.
	Command any `json:"command"`
	// Description is the caller's stated intent (CONTRACT §1).
	Description string `json:"description"`
	// Cwd is the directory the command ran in.
	Cwd string `json:"cwd"`
	// Decision is the policy decision (allow, prompt, forbidden), or empty
	// when no policy was in force.
	Decision string `json:"decision"`
	// Approved is set when a prompt decision was overridden by --approved.
	Approved bool `json:"approved,omitempty"`
	// PolicyRuntime is what the runtime policy guard decided while the
	// command ran (execguard.Report), when it was enforced.
	PolicyRuntime any `json:"policy_runtime,omitempty"`
	// Sandbox describes the sandbox the command ran in, if any.
	Sandbox any `json:"sandbox,omitempty"`
	// Status is the run's status: completed, timeout, cancelled, error,
	// started, denied, …
	Status string `json:"status"`
	// ExitCode is the command's exit code; nil when it has none (it did
	// not run, or has not ended yet).
	ExitCode *int `json:"exit_code"`
	// DurationMS is how long the run took, in milliseconds.
	DurationMS int64 `json:"duration_ms"`
	// Handle is the job or session handle, for agentjob and sessions.
	Handle string `json:"handle,omitempty"`
	// Session is the session handle a session call ran in.
	Session string `json:"session,omitempty"`
	// ErrorCode is the stable error code when the run failed or was refused.
	ErrorCode string `json:"error_code,omitempty"`
	// PID is the command's process id, when it got one.
	PID int `json:"pid,omitempty"`
	// User is the OS user who ran it; Append fills it when empty.
	User string `json:"user"`
	// Network, on a record with status "denied" and error code
	// network_denied, is the connection the network allowlist refused
	// while the command ran: one record per refused attempt.
	Network *NetworkDenial `json:"network,omitempty"`
}

// NetworkDenial is one connection the network allowlist refused.
type NetworkDenial struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"` // http, connect or socks5
	Reason   string `json:"reason"`
}

// Log is an audit log file with its rotated predecessors. The zero values
// of MaxBytes and Keep select the defaults; Path is required.
type Log struct {
	// Path is the log file, normally <state dir>/audit.jsonl. The lock file
	// and rotated files live beside it.
	Path string
	// MaxBytes is the size the current file may reach before it is rotated;
	// 0 or less means DefaultMaxBytes. A single record larger than this
	// still gets written, alone in a fresh file.
	MaxBytes int64
	// Keep is how many rotated files (Path.1 … Path.Keep) are kept; older
	// ones are dropped. 0 or less means DefaultKeep.
	Keep int
	// Fsync makes each Append fsync the file before returning. It is off by
	// default because an append sits on every agentsh call's path and an
	// fsync costs milliseconds on real disks; without it a record is lost
	// only if the machine (not just the process) crashes, and what reached
	// the disk still parses.
	Fsync bool
}

// Error is a failure of a log operation, naming the operation and file.
type Error struct {
	Op   string // "append", "rotate", "read", "follow"
	Path string
	Err  error
}

func (e *Error) Error() string { return "audit: " + e.Op + " " + e.Path + ": " + e.Err.Error() }

// Unwrap returns the underlying cause, so errors.Is(err, fs.ErrNotExist)
// and the like work.
func (e *Error) Unwrap() error { return e.Err }

func (l *Log) maxBytes() int64 {
	if l.MaxBytes <= 0 {
		return DefaultMaxBytes
	}
	return l.MaxBytes
}

func (l *Log) keep() int {
	if l.Keep <= 0 {
		return DefaultKeep
	}
	return l.Keep
}

func (l *Log) lockPath() string { return filepath.Join(filepath.Dir(l.Path), LockName) }

// rotated returns the path of the i-th rotated file (1 is the newest).
func (l *Log) rotated(i int) string { return l.Path + "." + strconv.Itoa(i) }

// Append writes r as one line at the end of the log, rotating first when
// the line would take the current file past MaxBytes. It fills Time and
// User when they are empty. The directory is created (0700) if missing.
func (l *Log) Append(r Record) error {
	if r.Time == "" {
		r.Time = state.FormatTime(time.Now())
	}
	if r.User == "" {
		r.User = currentUser()
	}
	var buf bytes.Buffer
	buf.WriteByte('\n') // room for the torn-line separator, dropped if unneeded
	enc := json.NewEncoder(&buf)
	// Commands are full of &, < and >; the log is for people and jq, so
	// keep them readable rather than HTML-escaped.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return &Error{Op: "append", Path: l.Path, Err: err}
	}
	line := buf.Bytes() // '\n' + JSON + '\n'

	unlock, err := state.Lock(l.lockPath())
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(l.Path), 0o700); err == nil {
			unlock, err = state.Lock(l.lockPath())
		}
	}
	if err != nil {
		return &Error{Op: "append", Path: l.Path, Err: err}
	}
	defer unlock()

	f, size, err := l.openCurrent()
	if err != nil {
		return &Error{Op: "append", Path: l.Path, Err: err}
	}
	if endsInNewline(f, size) {
		// No torn tail to end, so no separator. When there is one (a crash
		// mid-write), the leading '\n' stops it gluing onto this record.
		line = line[1:]
	}
	if size > 0 && size+int64(len(line)) > l.maxBytes() {
		_ = f.Close()
		if err := l.rotate(); err != nil {
			return &Error{Op: "rotate", Path: l.Path, Err: err}
		}
		if f, _, err = l.openCurrent(); err != nil {
			return &Error{Op: "append", Path: l.Path, Err: err}
		}
		// A fresh file needs no separator; a torn tail, if any, stays
		// ended by nothing in the rotated file, where readers skip it.
		if line[0] == '\n' {
			line = line[1:]
		}
	}
	defer f.Close()
	// One write(2): with O_APPEND and the lock held, the line lands whole
	// at the end. os.File.Write only loops on a short write, which regular
	// files produce only when the disk is full.
	if _, err := f.Write(line); err != nil {
		return &Error{Op: "append", Path: l.Path, Err: err}
	}
	if l.Fsync {
		if err := f.Sync(); err != nil {
			return &Error{Op: "append", Path: l.Path, Err: err}
		}
	}
	return nil
}

// openCurrent opens the current file for appending (creating it) and
// returns its size.
func (l *Log) openCurrent() (*os.File, int64, error) {
	// O_RDWR, not O_WRONLY: endsInNewline reads the last byte back.
	f, err := os.OpenFile(l.Path, os.O_RDWR|os.O_CREATE|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// endsInNewline reports whether the file of the given size is empty or ends
// in '\n'. A read error counts as yes: an extra separator is only wanted
// for a torn tail, and guessing wrong costs at most a blank line.
func endsInNewline(f *os.File, size int64) bool {
	if size == 0 {
		return true
	}
	var b [1]byte
	if _, err := f.ReadAt(b[:], size-1); err != nil {
		return true
	}
	return b[0] == '\n'
}

// rotate shifts Path.i to Path.i+1 (the oldest falls off by being renamed
// over) and the current file to Path.1. The caller holds the lock.
func (l *Log) rotate() error {
	for i := l.keep(); i >= 2; i-- {
		if err := os.Rename(l.rotated(i-1), l.rotated(i)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return os.Rename(l.Path, l.rotated(1))
}

// currentUser names the OS user for Record.User, looked up once per
// process: through NSS (getpwuid_r in a cgo build, with its nscd probe)
// that is about a fifth of a millisecond; a static build reads
// /etc/passwd, and runs getent only for a user the file does not hold
// (internal/account).
var currentUser = sync.OnceValue(func() string {
	if u, err := account.Describe(os.Getuid()); err == nil && u.Name != "" {
		return u.Name
	}
	return strconv.Itoa(os.Getuid())
})

// Prepare starts, on another goroutine, the work an Append does the first
// time in a process, so that a program which knows a record is coming
// (agentsh, before it starts the command) has it done by the time it
// appends instead of waiting for it after the command: the user lookup,
// and encoding/json's description of Record (built by reflection on first
// use, about as long again). Calling it is never required.
func Prepare() {
	go func() {
		currentUser()
		_ = json.NewEncoder(io.Discard).Encode(Record{Command: []string{}})
	}()
}

// segment is one opened log file, identified by inode so that a follower
// can recognise it after a rename.
type segment struct {
	f   *os.File
	ino uint64
}

// snapshot opens the existing log files, oldest first (Path.Keep … Path.1,
// then Path). It holds the shared lock only while opening, so the set is
// consistent (no rotation half-seen) and appenders wait only for a few
// open(2)s, not for the reading.
func (l *Log) snapshot() ([]segment, error) {
	unlock, err := state.LockShared(l.lockPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no state directory, no log
	}
	if err != nil {
		return nil, err
	}
	defer unlock()
	var segs []segment
	add := func(path string) error {
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		ino, err := inode(f)
		if err != nil {
			_ = f.Close()
			return err
		}
		segs = append(segs, segment{f: f, ino: ino})
		return nil
	}
	for i := l.keep(); i >= 1; i-- {
		if err := add(l.rotated(i)); err != nil {
			closeAll(segs)
			return nil, err
		}
	}
	if err := add(l.Path); err != nil {
		closeAll(segs)
		return nil, err
	}
	return segs, nil
}

func closeAll(segs []segment) {
	for _, s := range segs {
		_ = s.f.Close()
	}
}

func inode(f *os.File) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// scan reads complete lines of f from off and hands each to fn, returning
// the offset just past the last complete line. A final line without its
// newline is left unread: it is an append in progress (a reader can see a
// write(2) half copied) or a torn one, which the next append ends.
func scan(f *os.File, off int64, fn func(line []byte) error) (int64, error) {
	r := bufio.NewReaderSize(io.NewSectionReader(f, off, 1<<62), 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A line longer than the buffer: gather it whole.
			var long []byte
			long = append(long, line...)
			for err == bufio.ErrBufferFull {
				line, err = r.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err == io.EOF {
			return off, nil
		}
		if err != nil {
			return off, err
		}
		off += int64(len(line))
		if err := fn(line); err != nil {
			return off, err
		}
	}
}

// parse decodes one line, reporting false for anything that is not a
// record (a torn fragment, a blank separator line).
func parse(line []byte) (Record, bool) {
	var r Record
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &r) != nil {
		return Record{}, false
	}
	return r, true
}

// notBefore reports whether r's time is at or after since. With a zero
// since everything passes, including records whose time does not parse.
func notBefore(r Record, since time.Time) bool {
	if since.IsZero() {
		return true
	}
	t, err := time.Parse(time.RFC3339Nano, r.Time)
	return err == nil && !t.Before(since)
}

// Read returns the records timed at or after since (all when since is
// zero), oldest first, across the rotated files and then the current one.
// With limit > 0 only the newest limit of them are returned, like tail -n.
// Lines that do not parse are skipped. A missing log reads as empty.
func (l *Log) Read(since time.Time, limit int) ([]Record, error) {
	segs, err := l.snapshot()
	if err != nil {
		return nil, &Error{Op: "read", Path: l.Path, Err: err}
	}
	defer closeAll(segs)
	var out []Record
	for _, s := range segs {
		_, err := scan(s.f, 0, func(line []byte) error {
			if r, ok := parse(line); ok && notBefore(r, since) {
				out = append(out, r)
				// Trim in batches so a small limit over a big log stays
				// small in memory without copying on every record.
				if limit > 0 && len(out) >= 2*limit+1024 {
					out = append(out[:0:0], out[len(out)-limit:]...)
				}
			}
			return nil
		})
		if err != nil {
			return nil, &Error{Op: "read", Path: l.Path, Err: err}
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, nil
}
