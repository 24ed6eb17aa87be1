// Package state keeps an agentplane environment's state directory: the
// secret key that authenticates handles, atomic file writes, file locks,
// never-reused ids, the durable lifecycle event log and change watching.
//
// One state directory is one environment. Everything in it is written so that
// a crash or SIGKILL at any moment leaves files that still parse: whole files
// are replaced by rename, and the event log is appended one line per write(2)
// with readers ignoring a torn last line.
//
// Faults get stable codes (Classify): a full filesystem is no_space, a
// read-only one state_read_only, a file damaged from outside state_corrupt.
// Readers need no write access (shared locks are taken on read-only
// descriptors); the temp files of killed atomic writes are removed by the
// next writer that holds the lock proving their writer dead (RemoveTemps).
package state

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/internal/account"
)

// keySize is the length in bytes of the environment's secret key.
const keySize = 32

// KeyFile is the name of the secret key file inside the state directory
// (the sandbox hides it from commands).
const KeyFile = "secret.key"

const keyFile = KeyFile

// SessionTokens is the directory inside the state directory that holds
// the sessions' tokens, one file per session named by its id: one
// directory, so that a sandbox made before a session started hides that
// session's token too.
const SessionTokens = "session-tokens"

// Dir is an opened state directory.
type Dir struct {
	path string
	key  []byte
}

// DefaultDir returns the state directory CONTRACT §1 prescribes when no flag
// names one: $AGENTPLANE_STATE_DIR, else $XDG_STATE_HOME/agentplane, else
// ~/.local/state/agentplane. getenv and home are passed in so that the
// caller (the CLI) decides where the environment comes from. A home that
// is not an absolute path (HOME unset, as under cron or env -i) is the
// user's home in the user database instead, and "" when that has none: a
// relative one would put the environment in whatever directory the call
// runs in, such as /tmp, where another user can make its parents first
// and move them about.
func DefaultDir(getenv func(string) string, home string) string {
	if d := getenv("AGENTPLANE_STATE_DIR"); d != "" {
		return d
	}
	// The XDG spec says relative values are invalid and must be ignored.
	if x := getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "agentplane")
	}
	if !filepath.IsAbs(home) {
		home = ""
		if u, err := account.Describe(os.Geteuid()); err == nil && filepath.IsAbs(u.Home) {
			home = u.Home
		}
		if home == "" {
			return ""
		}
	}
	return filepath.Join(home, ".local", "state", "agentplane")
}

// Open opens the state directory at dir, creating it (0700) and its secret
// key (0600) if needed. Concurrent first-time Opens of the same directory,
// from goroutines or processes, all end up with the same key.
func Open(dir string) (*Dir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("state: create %s: %w", abs, err)
	}
	if err := checkPrivate(abs, 0o022, "writable by others"); err != nil {
		return nil, err
	}
	key, err := loadOrCreateKey(abs)
	if err != nil {
		return nil, err
	}
	return &Dir{path: abs, key: key}, nil
}

// Path returns the absolute path of the state directory.
func (d *Dir) Path() string { return d.path }

// Join returns a path inside the state directory.
func (d *Dir) Join(elem ...string) string {
	return filepath.Join(append([]string{d.path}, elem...)...)
}

func loadOrCreateKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, keyFile)
	key, err := readKey(path)
	if err == nil {
		return key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	fresh := make([]byte, keySize)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	tmp, err := writeTemp(dir, keyFile, fresh, 0o600)
	if err != nil {
		return nil, err
	}
	// link(2) fails with EEXIST instead of replacing, so exactly one
	// concurrent creator wins and the others adopt the winner's key. The
	// temp file was fully written and fsynced first, so the key file is
	// never seen half written.
	lerr := os.Link(tmp, path)
	_ = os.Remove(tmp)
	if lerr != nil && !errors.Is(lerr, fs.ErrExist) {
		return nil, fmt.Errorf("state: install secret key: %w", lerr)
	}
	if lerr == nil {
		_ = syncDir(dir)
	}
	return readKey(path)
}

func readKey(path string) ([]byte, error) {
	if err := checkPrivate(path, 0o077, "readable by others"); err != nil {
		return nil, err
	}
	b, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) != keySize {
		return nil, corrupt(path, fmt.Errorf("%d bytes, want %d", len(b), keySize))
	}
	return b, nil
}

// NextID allocates the next id of kind ("job", "ses", …) from a counter kept
// under a lock, so ids are never reused while the state directory exists. A
// handle whose tag verifies therefore names an id this environment
// allocated: if its files are gone it was removed, not guessed. A counter
// that does not parse is an error; see NextIDRepairing.
func (d *Dir) NextID(kind string) (uint64, error) {
	return d.NextIDRepairing(kind, nil)
}

// NextIDRepairing is NextID that repairs a damaged counter instead of
// failing every allocation from then on: floor returns the highest id of
// kind that the caller can still find in use or handed out (its
// directories, the handles in the event log), and counting goes on after
// it. With a nil floor a damaged counter is an error (state_corrupt).
func (d *Dir) NextIDRepairing(kind string, floor func() uint64) (uint64, error) {
	if !validKind(kind) {
		return 0, fmt.Errorf("state: invalid id kind %q", kind)
	}
	dir := d.Join("ids")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	path := filepath.Join(dir, kind)
	unlock, err := Lock(path + ".lock")
	if err != nil {
		return 0, err
	}
	defer unlock()
	// The lock is held: temp files of the counter are of killed writers.
	RemoveTemps(dir, kind)
	var n uint64
	b, err := ReadFile(path)
	switch {
	case err == nil:
		n, err = strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
		if err != nil {
			if floor == nil {
				return 0, corrupt(path, err)
			}
			n = floor()
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return 0, err
	}
	n++
	if err := WriteFileAtomic(path, []byte(strconv.FormatUint(n, 10)+"\n"), 0o600); err != nil {
		return 0, err
	}
	return n, nil
}

// LastID returns the highest id of kind allocated so far (0 if none).
func (d *Dir) LastID(kind string) (uint64, error) {
	b, err := ReadFile(d.Join("ids", kind))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
}

func validKind(kind string) bool {
	if kind == "" || len(kind) > 8 {
		return false
	}
	return strings.IndexFunc(kind, func(r rune) bool { return r < 'a' || r > 'z' }) < 0
}

// flock with a retry on EINTR, which a signal to the process can cause
// while it blocks.
func flock(fd int, how int) error {
	for {
		err := unix.Flock(fd, how)
		if err != unix.EINTR {
			return err
		}
	}
}

// checkPrivate refuses path when another user owns it or its mode has any
// of the bits in others: a state directory someone else made (in /tmp,
// say) or a key they can read would let them forge this environment's
// handles or plant files in it. A path that does not exist passes (it is
// about to be created, privately).
func checkPrivate(path string, others os.FileMode, what string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&others != 0 {
		return fmt.Errorf("state: %s is %s (mode %04o); an environment must be private to its user", path, what, fi.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("state: %s belongs to uid %d, not to this user (uid %d)", path, st.Uid, os.Geteuid())
	}
	return nil
}
