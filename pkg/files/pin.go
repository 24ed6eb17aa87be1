package files

import (
	"errors"
	"os"
	"path"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/result"
)

// Pinned directories: resolve checks a path (confinement, deny rules) and
// returns it free of symlinks, but a directory on it can be replaced by a
// symlink a moment later, and an os.Root lookup would follow that link
// anywhere inside the root, a denied directory included. So an operation
// never goes by the checked path again: it opens the file's directory once,
// one component at a time with O_NOFOLLOW from the root, holds it as an
// os.Root of its own, and does every lookup, create, rename and link in it
// by the file's base name. A symlink met on the way means the path changed
// since it was checked; the path is then checked again, and refused with
// that check's answer (outside_root, path_denied) or as changed.

// errPathChanged is the refusal of a path whose directories changed
// between its check and its use, when checking it again finds no other
// fault.
func errPathChanged(given string) *result.Error {
	return newErr(result.CodeIOError, "%s changed while agentfs used it (a directory on it was replaced); nothing was done through it", given)
}

// dirOf returns the pinned directory of t and t's base name in it.
func (s *session) dirOf(t target) (*os.Root, string, error) {
	d, err := s.pinDir(path.Dir(t.rel), t.given)
	if err != nil {
		return nil, "", err
	}
	return d, path.Base(t.rel), nil
}

// sideOf returns the pinned directory of a side file (temp, backup) of t,
// which lives beside it, and the side file's base name.
func (s *session) sideOf(t target, side string) (*os.Root, string, error) {
	d, err := s.pinDir(path.Dir(side), t.given)
	if err != nil {
		return nil, "", err
	}
	return d, path.Base(side), nil
}

// pinDir opens the directory rel (relative to the root, as resolve made it)
// without following a symlink anywhere on the way, and keeps it open for
// the session. given is the caller's path, for a re-check and messages.
func (s *session) pinDir(rel, given string) (*os.Root, error) {
	if rel == "" {
		rel = "."
	}
	if d, ok := s.pinned[rel]; ok {
		return d, nil
	}
	top, err := s.root.Open(".")
	if err != nil {
		return nil, osError(err, given)
	}
	fd, err := unix.Dup(int(top.Fd()))
	top.Close()
	if err != nil {
		return nil, osError(err, given)
	}
	for _, c := range splitPath(rel) {
		if c == "" || c == "." {
			continue
		}
		next, err := openDirNoFollow(fd, c)
		if err != nil {
			link := isSymlinkAt(fd, c, err)
			unix.Close(fd)
			if link {
				return nil, s.recheck(given)
			}
			return nil, osError(&os.PathError{Op: "openat", Path: given, Err: err}, given)
		}
		unix.Close(fd)
		fd = next
	}
	d, err := os.OpenRoot(fdPath(fd))
	unix.Close(fd)
	if err != nil {
		return nil, osError(err, given)
	}
	if s.pinned == nil {
		s.pinned = map[string]*os.Root{}
	}
	s.pinned[rel] = d
	return d, nil
}

// openDirNoFollow opens the directory name in the directory dirfd,
// failing (ELOOP, or ENOTDIR on some systems) when name is a symlink.
func openDirNoFollow(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// isSymlinkAt reports whether the open of name in dirfd failed with err
// because name is a symlink: ELOOP (EMLINK on the BSDs) says so by itself,
// an ENOTDIR is told apart from a plain file by a look at name.
func isSymlinkAt(dirfd int, name string, err error) bool {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EMLINK) {
		return true
	}
	var st unix.Stat_t
	return errors.Is(err, unix.ENOTDIR) && unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// recheck resolves given again after its directories changed: the new
// path's own refusal if it has one, else errPathChanged.
func (s *session) recheck(given string) error {
	if _, err := s.resolve(given, true); err != nil {
		return err
	}
	return errPathChanged(given)
}

// closePinned closes the pinned directories of the session.
func (s *session) closePinned() {
	for _, d := range s.pinned {
		d.Close()
	}
	s.pinned = nil
}
