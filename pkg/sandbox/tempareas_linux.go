package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/result"
)

// Every run's private directory lives in a temp area, one directory per
// uid in the temp dir ("agentplane-sandbox.UID"), and each run covers
// every temp area it knows of with an empty read-only tmpfs in its mount
// namespace, with only its own TMPDIR bound back on top: the private temp
// dirs of other concurrent runs (their files, status and accounting files)
// are not there to read, whatever the command's uid or capabilities (root
// keeps CAP_DAC_OVERRIDE, so modes alone would not do). The areas covered
// are the caller's own in its temp dir and in /tmp (where --user runs
// live), created if missing so that one appearing later is covered too,
// and every other uid's area present in either when the run starts.

const areaPrefix = "agentplane-sandbox."

// tempAreas returns the area this run's private directory goes in (below
// parent, the temp dir when "") and every area to cover.
func tempAreas(parent string) (string, []string, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	uid := strconv.Itoa(os.Geteuid())
	own := filepath.Join(parent, areaPrefix+uid)
	var areas []string
	for _, p := range []string{parent, "/tmp"} {
		mine := filepath.Join(p, areaPrefix+uid)
		if slices.Contains(areas, mine) {
			continue
		}
		if err := ownArea(mine); err != nil {
			if mine == own {
				return "", nil, err
			}
			continue // /tmp not writable: no --user run can live there either
		}
		areas = append(areas, mine)
		entries, err := os.ReadDir(p)
		if err != nil {
			continue
		}
		for _, e := range entries {
			id, ok := strings.CutPrefix(e.Name(), areaPrefix)
			if !ok || !e.IsDir() || id == uid {
				continue
			}
			if _, err := strconv.Atoi(id); err == nil {
				areas = append(areas, filepath.Join(p, e.Name()))
			}
		}
	}
	// Resolved (a TMPDIR below a symlink), so that the private directory
	// made in own and the covers agree on every path.
	for i, a := range areas {
		if real, err := filepath.EvalSymlinks(a); err == nil {
			areas[i] = real
		}
	}
	if real, err := filepath.EvalSymlinks(own); err == nil {
		own = real
	}
	return own, areas, nil
}

// ownArea creates the caller's area at path, or checks that the one there
// is a directory of the caller's, not a symlink or another user's plant.
// 0711: a --user target must reach its own TMPDIR below, but not list.
func ownArea(path string) error {
	err := os.Mkdir(path, 0o711)
	if err != nil && !os.IsExist(err) {
		return result.Errorf(result.CodeSandboxFailed, "cannot create the sandbox's temp area %s: %v", path, unwrap(err))
	}
	st, err := os.Lstat(path)
	if err != nil {
		return result.Errorf(result.CodeSandboxFailed, "temp area %s: %v", path, unwrap(err))
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || !ok || int(sys.Uid) != os.Geteuid() {
		return result.Errorf(result.CodeSandboxFailed, "temp area %s is not a directory of uid %d: remove it", path, os.Geteuid())
	}
	if st.Mode().Perm() != 0o711 {
		if err := os.Chmod(path, 0o711); err != nil {
			return result.Errorf(result.CodeSandboxFailed, "chmod %s: %v", path, unwrap(err))
		}
	}
	return nil
}

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
func coverTempAreas(areas []string, inside []clonedMount) error {
	for _, a := range areas {
		if err := unix.Mount("agentplane-area", a, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=64,mode=0711"); err != nil {
			return fmt.Errorf("cannot cover the temp area %s: %v", a, err)
		}
	}
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
