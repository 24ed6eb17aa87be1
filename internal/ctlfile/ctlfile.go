// Package ctlfile reads the operator's control files (policy rules, config
// files) as the kernel finds them, and tells which file was read: a
// check that a file is one a sandboxed shell could not have rewritten must
// be about the file whose bytes were taken, not about a path the check
// spelled again (a ".." the check cleaned away while the kernel went up
// from where a link led, a link swapped between the check and the read).
package ctlfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// File is a control file as it was read.
type File struct {
	// Path is the file as named.
	Path string
	// Real is where the file read is: the path the kernel gives for the
	// open file ("" when it cannot be told).
	Real string
	// Links is its number of hard links: a file with another name may
	// have been written through that one.
	Links uint64
	// ID is its identity: device, inode and birth time ("" when it
	// cannot be told; see IdentityOf).
	ID string
	// Data is what was read.
	Data []byte
}

// Read reads the file at path, which must be a regular file (a FIFO in
// its place does not hold the reader up: it is opened without waiting).
func Read(path string) (File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return File{}, err
	}
	if !st.Mode().IsRegular() {
		// The null device is the empty file ("--config /dev/null": no
		// settings); nothing else but a regular file is one.
		if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(st, null) {
			return File{Path: path, Real: os.DevNull, Links: 1}, nil
		}
		return File{}, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("not a regular file")}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return File{}, err
	}
	return File{Path: path, Real: openedPath(f, path, st), Links: links(st), ID: identity(f, st), Data: data}, nil
}

// openedPathByName is where the open file f is, found by resolving its
// name again: only if that name leads to f's very file.
func openedPathByName(path string, st os.FileInfo) string {
	real, err := filepath.EvalSymlinks(Abs(path))
	if err != nil {
		return ""
	}
	if st2, err := os.Stat(real); err != nil || !os.SameFile(st, st2) {
		return ""
	}
	return real
}

// Abs is path made absolute the way the kernel resolves it: what comes up
// to its last ".." is resolved through its links (a/link/.. is the
// directory above the link's target, not a), and the rest is kept as
// named. A path whose beginning does not exist is cleaned as written.
func Abs(path string) string {
	if !filepath.IsAbs(path) {
		wd, err := os.Getwd()
		if err != nil {
			return filepath.Clean(path)
		}
		path = wd + string(filepath.Separator) + path
	}
	parts := strings.Split(path, string(filepath.Separator))
	last := -1
	for i, p := range parts {
		if p == ".." {
			last = i
		}
	}
	if last < 0 {
		return filepath.Clean(path)
	}
	head := strings.Join(parts[:last+1], string(filepath.Separator))
	real, err := filepath.EvalSymlinks(head)
	if err != nil {
		return filepath.Clean(path)
	}
	return filepath.Join(append([]string{real}, parts[last+1:]...)...)
}
