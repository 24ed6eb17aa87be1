package sandbox

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
		// A listing without a sort or a stat per entry: the temp dir
		// of a long-lived machine holds thousands of entries, and this
		// runs on every sandboxed call. (scanDir follows no symlink: a
		// TMPDIR below one is listed where it resolves to.)
		list := p
		if real, err := filepath.EvalSymlinks(p); err == nil {
			list = real
		}
		_ = scanDir(list, func(name []byte, typ byte) {
			if !bytes.HasPrefix(name, []byte(areaPrefix)) || typ != unix.DT_DIR && typ != unix.DT_UNKNOWN {
				return
			}
			id := string(name[len(areaPrefix):])
			if id == uid {
				return
			}
			if _, err := strconv.Atoi(id); err != nil {
				return
			}
			path := filepath.Join(p, string(name))
			if typ == unix.DT_UNKNOWN {
				if st, err := os.Lstat(path); err != nil || !st.IsDir() {
					return
				}
			}
			areas = append(areas, path)
		})
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
