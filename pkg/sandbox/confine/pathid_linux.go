package confine

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Writable roots by identity. The runner checks a writable root (the
// workspace against the lock's floor, every path made free of symlinks)
// and records its identity (Identify); the helper starts later, in another
// process, and a command of another sandbox that can write a parent of
// the root could replace one of its directories by a symbolic link in
// between (or rename it away and make another). Following the path again
// would then bind, and grant Landlock writes to, wherever the link points.
// So the helper never follows the path: it opens it with no symbolic link
// on any component (openat2 RESOLVE_NO_SYMLINKS) and refuses it unless it
// is the very directory the runner recorded (device and inode), and it
// clones, mounts onto and grants what it opened, by its descriptor.

// Identify opens path (absolute and free of symbolic links) without
// following a link anywhere on it and returns its identity, for the spec.
// A link on the way means the path changed since it was resolved.
func Identify(path string) (FileID, error) {
	fd, err := openNoSymlinks(path)
	if err != nil {
		return FileID{}, err
	}
	defer unix.Close(fd)
	return fdID(fd)
}

// OpenChecked opens path as an O_PATH descriptor without following a
// symbolic link on any component, and refuses it when its identity is not
// want: what the helper binds or grants is then the directory the runner
// checked, wherever a concurrent process moved things since.
func OpenChecked(path string, want FileID) (int, error) {
	fd, err := openNoSymlinks(path)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return -1, &ChangedError{Path: path, What: "a symbolic link is on it now"}
		}
		return -1, err
	}
	got, err := fdID(fd)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	if got != want {
		unix.Close(fd)
		return -1, &ChangedError{Path: path, What: fmt.Sprintf("it is another file now (device %d inode %d, checked %d %d)",
			got.Dev, got.Ino, want.Dev, want.Ino)}
	}
	return fd, nil
}

func fdID(fd int) (FileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return FileID{}, err
	}
	return FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}, nil
}

// openNoSymlinks opens the absolute path O_PATH with no symbolic link
// followed: openat2 where the kernel has it, else (older kernels, or
// inside a sandbox, whose seccomp filter answers openat2 with ENOSYS) one
// component at a time with O_NOFOLLOW, each checked not to be a link.
func openNoSymlinks(path string) (int, error) {
	if !strings.HasPrefix(path, "/") {
		return -1, fmt.Errorf("%s is not absolute", path)
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := unix.Openat2(unix.AT_FDCWD, path, &how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue
		case errors.Is(err, unix.ENOSYS):
			return walkNoSymlinks(path)
		default:
			return -1, err
		}
	}
}

// walkNoSymlinks is openNoSymlinks one component at a time. The path is
// clean (no "." or ".."), as the runner made it.
func walkNoSymlinks(path string) (int, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_CLOEXEC|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(strings.Trim(path, "/"), "/") {
		if c == "" {
			continue
		}
		if c == "." || c == ".." {
			unix.Close(fd)
			return -1, fmt.Errorf("%s is not a clean path", path)
		}
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			unix.Close(next)
			return -1, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(next)
			return -1, unix.ELOOP
		}
		fd = next
	}
	return fd, nil
}
