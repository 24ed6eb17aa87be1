package confine

import (
	"fmt"
	"os"
	"path/filepath"
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
func coverTempAreas(areas []string, inside []clonedMount) error {
	covered := areas[:0:0]
	for _, a := range areas {
		if err := unix.Mount("agentplane-area", a, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=64,mode=0711"); err != nil {
			if (err == unix.ENOENT || err == unix.ENOTDIR) && !holdsAny(a, inside) {
				continue
			}
			return fmt.Errorf("cannot cover the temp area %s: %v", a, err)
		}
		covered = append(covered, a)
	}
	areas = covered
	for _, m := range inside {
		// 0711 whatever the umask: a --user target must reach its TMPDIR.
		for _, a := range areas {
			rel, ok := strings.CutPrefix(m.path, a+string(filepath.Separator))
			if !ok {
				continue
			}
			dir := a
			for _, part := range strings.Split(rel, string(filepath.Separator)) {
				dir = filepath.Join(dir, part)
				if err := os.Mkdir(dir, 0o711); err != nil && !os.IsExist(err) {
					return fmt.Errorf("cannot make a mount point for %s: %v", m.path, err)
				}
				if err := os.Chmod(dir, 0o711); err != nil {
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
	for _, a := range areas {
		if err := setAttr(a, false, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, 0); err != nil {
			return fmt.Errorf("cannot make the temp area %s read-only: %v", a, err)
		}
	}
	return nil
}
