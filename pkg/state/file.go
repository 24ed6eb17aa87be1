package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/internal/faultpoint"
)

// WriteFileAtomic replaces path with data so that a reader, or the file after
// a crash, holds either the old content or the new one, never a mix: it
// writes a temp file in the same directory, fsyncs it, renames it over path
// and fsyncs the directory so the rename itself is durable.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := writeTemp(dir, base, data, perm)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// WriteJSONAtomic encodes v as indented JSON and writes it with
// WriteFileAtomic.
func WriteJSONAtomic(path string, v any, perm os.FileMode) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, append(b, '\n'), perm)
}

// ReadJSON decodes the JSON file at path into v. Errors from os.ReadFile are
// returned unchanged, so callers can test for fs.ErrNotExist; a file that
// does not parse is a state_corrupt error (see IsCorrupt).
func ReadJSON(path string, v any) error {
	b, err := ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return corrupt(path, err)
	}
	return nil
}

// writeTemp writes data to a new uniquely named, fsynced file in dir and
// returns its path. The name starts with '.' so listings of the directory
// can skip temp files left by a crash.
func writeTemp(dir, base string, data []byte, perm os.FileMode) (string, error) {
	f, err := os.CreateTemp(dir, TempPrefix(base)+"*")
	if err != nil {
		return "", err
	}
	name := f.Name()
	fail := func(err error) (string, error) {
		_ = f.Close()
		_ = os.Remove(name)
		return "", err
	}
	if err := f.Chmod(perm); err != nil {
		return fail(err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	faultpoint.Hit("state.temp.written")
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(name)
		return "", err
	}
	return name, nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil && err != unix.EINVAL {
		return err
	}
	return nil
}

// Lock takes an exclusive flock(2) on path, creating the file if needed,
// and returns the function that releases it. The lock belongs to the open
// file, so it is released by the kernel if the process dies.
func Lock(path string) (unlock func(), err error) {
	return lockFile(path, unix.LOCK_EX)
}

// LockShared takes a shared flock(2) on path: many readers may hold it at
// once, and none while someone holds the exclusive lock. A reader needs no
// write access: flock works on a descriptor opened read-only, and on a
// read-only state directory where the lock file was never created there
// is no writer to exclude (nothing can write there), so the lock is then
// a no-op.
func LockShared(path string) (unlock func(), err error) {
	return lockFile(path, unix.LOCK_SH)
}

// openLockFile opens the lock file: read-write (created if missing) for
// an exclusive lock, read-only for a shared one.
func openLockFile(path string, how int) (*os.File, error) {
	if how == unix.LOCK_EX {
		return OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	}
	f, err := OpenFile(path, os.O_RDONLY, 0)
	if !errors.Is(err, fs.ErrNotExist) {
		return f, err
	}
	f, err = OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600)
	if errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrPermission) {
		return os.Open(os.DevNull) // nothing to lock against; see LockShared
	}
	return f, err
}

func lockFile(path string, how int) (func(), error) {
	f, err := openLockFile(path, how)
	if err != nil {
		return nil, err
	}
	if err := flock(int(f.Fd()), how); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("state: lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil
}

// OpenFile is os.OpenFile for a file inside a state directory: it never
// follows a symlink in the last component (a job that can write to the
// state directory could plant one there to have the supervisor append to,
// or a reader show, a file elsewhere). A symlink found there is a damaged
// state file (state_corrupt).
//
// Nor does it block on a FIFO (or device) planted there: the open does not
// wait for a writer (O_NONBLOCK, which a regular file ignores), and what is
// not a regular file is state_corrupt too.
func OpenFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, perm)
	if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK) {
		return nil, corrupt(path, errors.New("it is a symlink; state files are never links"))
	}
	if errors.Is(err, syscall.ENXIO) {
		return nil, corrupt(path, errors.New("it is a FIFO or a socket; state files are regular files"))
	}
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("it is not a regular file (%v); state files are regular files", fi.Mode().Type())
		}
		return nil, corrupt(path, err)
	}
	return f, nil
}

// ReadFile is os.ReadFile through OpenFile.
func ReadFile(path string) ([]byte, error) {
	f, err := OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
