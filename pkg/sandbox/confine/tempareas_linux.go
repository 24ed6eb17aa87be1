package confine

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The helper's half of the temp areas (package sandbox, tempareas_linux.go,
// picks them and the run's own TMPDIR): each area is covered by an empty
// read-only tmpfs, and only the run's own mounts inside one come back.

// splitByArea separates the mounts inside a temp area (to be bound after
// the areas are covered) from the others (before: a writable root that
// contains an area, such as --workspace /tmp, must not land on its cover).
func splitByArea(mounts []clonedMount, areas []string) (outside, inside []clonedMount) {
	for _, m := range mounts {
		if insideAny(m.path, areas) {
			inside = append(inside, m)
		} else {
			outside = append(outside, m)
		}
	}
	return outside, inside
}

// holdsAny reports whether one of mounts lies inside dir.
func holdsAny(dir string, mounts []clonedMount) bool {
	for _, m := range mounts {
		if insideAny(m.path, []string{dir}) {
			return true
		}
	}
	return false
}

func insideAny(path string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(path, d+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// coverTempAreas mounts an empty tmpfs on each area, makes the mount
// points of the run's own mounts inside them, binds those, and turns the
// covers read-only.
//
// An area gone since the runner listed it (another temp dir's, removed
// with that dir: a test's, a build's) holds nothing to hide and is left
// out; one the run's own mounts are inside is the run's, and is there.
// So is one that is no directory now: another uid's area is its owner's
// to swap for a symlink after the runner listed it, and a cover mounted
// through the link would land on what it names (the run's workspace, its
// TMPDIR, "/"). Each cover goes onto the directory opened without
// following a symlink, and everything after is done through the cover's
// own descriptor, never the path again.
func coverTempAreas(areas []string, inside []clonedMount) error {
	type cover struct {
		path string
		fd   int
	}
	var held []cover // holding the run's own mounts: read-only after those
	defer func() {
		for _, c := range held {
			_ = unix.Close(c.fd)
		}
	}()
	for _, a := range areas {
		holds := holdsAny(a, inside)
		fd, err := coverArea(a, !holds)
		if err != nil {
			if (err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP) && !holds {
				continue
			}
			return fmt.Errorf("cannot cover the temp area %s: %v", a, err)
		}
		if !holds {
			if fd >= 0 {
				_ = unix.Close(fd)
			}
			continue
		}
		held = append(held, cover{a, fd})
	}
	for _, m := range inside {
		// 0711 whatever the umask: a --user target must reach its TMPDIR.
		for _, c := range held {
			rel, ok := strings.CutPrefix(m.path, c.path+string(filepath.Separator))
			if !ok {
				continue
			}
			dir := ""
			for _, part := range strings.Split(rel, string(filepath.Separator)) {
				dir = filepath.Join(dir, part)
				if err := unix.Mkdirat(c.fd, dir, 0o711); err != nil && err != unix.EEXIST {
					return fmt.Errorf("cannot make a mount point for %s: %v", m.path, err)
				}
				if err := unix.Fchmodat(c.fd, dir, 0o711, 0); err != nil {
					return fmt.Errorf("cannot make a mount point for %s: %v", m.path, err)
				}
			}
		}
	}
	// The mount points inside the covers are the helper's own, made just
	// now where nothing else can write: bound by their paths.
	for i := range inside {
		inside[i].id = FileID{}
	}
	if err := bindWritable(inside); err != nil {
		return err
	}
	for _, c := range held {
		if err := unix.MountSetattr(c.fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: coverAttr | unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fmt.Errorf("cannot make the temp area %s read-only: %v", c.path, err)
		}
	}
	return nil
}

const coverAttr = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC

// coverArea mounts an empty tmpfs (read-only when readOnly) onto the
// directory at path, opened with no symlink followed on any component
// (the runner resolved every area), and returns the descriptor of the new
// mount's root, -1 for a read-only one. A path that is not a directory is
// ENOTDIR; one with a symlink on it, ELOOP.
//
// A read-only cover is mount(2) onto the descriptor's /proc link (the
// directory itself, as runc mounts onto what it opened): one system call,
// as before; the mount API's fsopen, five fsconfig and fsmount cost about
// 10 µs more per area. One that must stay writable for a while (it holds
// the run's own mounts), or a helper without /proc, takes the mount API,
// whose descriptor the caller goes on through.
func coverArea(path string, readOnly bool) (int, error) {
	dfd, err := openNoSymlinks(path)
	if err != nil {
		return -1, err
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return -1, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return -1, unix.ENOTDIR
	}
	if readOnly {
		err := unix.Mount("agentplane-area", "/proc/self/fd/"+strconv.Itoa(dfd), "tmpfs",
			unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY, "size=4k,nr_inodes=64,mode=0711")
		if err != unix.ENOENT {
			return -1, err
		}
	}
	attr := uint64(coverAttr)
	if readOnly {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	mfd, err := detachedTmpfs("agentplane-area", "64", "0711", attr)
	if err != nil {
		return -1, err
	}
	if err := unix.MoveMount(mfd, "", dfd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		_ = unix.Close(mfd)
		return -1, err
	}
	return mfd, nil
}
