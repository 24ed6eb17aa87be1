package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

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
		// (scanDir follows no symlink: a TMPDIR below one is listed
		// where it resolves to.)
		list := p
		if real, err := filepath.EvalSymlinks(p); err == nil {
			list = real
		}
		for _, name := range otherAreas(list, mine, uid) {
			areas = append(areas, filepath.Join(p, name))
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
	home := filepath.Join("/tmp", areaPrefix+uid)
	if real, err := filepath.EvalSymlinks(home); err == nil {
		home = real
	}
	if slices.Contains(areas, home) { // (made unless /tmp is not writable)
		for _, a := range elsewhere(home, own, uid) {
			if !slices.Contains(areas, a) {
				areas = append(areas, a)
			}
		}
	}
	return own, areas, nil
}

// A caller whose runs use more than one temp dir (TMPDIR set differently)
// has an area in each, and a run covers only those of the temp dirs it
// uses: a command, which may read everywhere but --deny-read paths, would
// read a concurrent run's TMPDIR in another one, and plant files in it
// (its status file too) from a writable root that holds it. So every area
// outside /tmp is listed in the caller's area in /tmp (areaElsewhere),
// which every run reads and covers the listed areas of. An area made after
// a run started is not covered in that run.
const areaElsewhere = "elsewhere"

// maxElsewhere bounds the list; beyond it, areas that are gone are dropped.
const maxElsewhere = 32

// elsewhere lists own in home's list when it is not home, and returns
// the listed areas that are still directories of uid, own and home aside.
// A line is an absolute path named for uid's area, nothing else: a torn
// line or a path holding a newline is no area.
func elsewhere(home, own, uid string) []string {
	flags, lock := unix.O_RDONLY, unix.LOCK_SH
	add := own != home && !strings.Contains(own, "\n")
	if add {
		flags, lock = unix.O_RDWR|unix.O_CREAT, unix.LOCK_EX
	}
	fd, err := unix.Open(filepath.Join(home, areaElsewhere), flags|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	if unix.Flock(fd, lock) != nil {
		return nil
	}
	var data []byte
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			break
		}
		data = append(data, buf[:n]...)
	}
	var listed, live []string
	for _, line := range strings.Split(string(data), "\n") {
		if filepath.IsAbs(line) && filepath.Base(line) == areaPrefix+uid && !slices.Contains(listed, line) {
			listed = append(listed, line)
		}
	}
	for _, a := range listed {
		var st unix.Stat_t
		if a != own && a != home && unix.Lstat(a, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && strconv.Itoa(int(st.Uid)) == uid {
			live = append(live, a)
		}
	}
	if !add || slices.Contains(listed, own) {
		return live
	}
	if len(listed) < maxElsewhere {
		_, _ = unix.Pwrite(fd, []byte(own+"\n"), int64(len(data)))
		return live
	}
	rewrite := []byte(strings.Join(append(slices.Clone(live), own), "\n") + "\n")
	if n, err := unix.Pwrite(fd, rewrite, 0); err == nil && n == len(rewrite) {
		_ = unix.Ftruncate(fd, int64(len(rewrite)))
	}
	return live
}

// The temp dir of a long-lived machine holds thousands of entries, and
// its listing (about a millisecond of CPU for 1,500) would run on every
// sandboxed call. It is kept in the caller's own area (areaCache, which
// the covers hide from every command) with the directory's device, inode
// and modification time, and reused while they are unchanged: adding,
// removing or renaming an entry sets the time, and only root can set it
// back. A listing is kept only when the directory was last changed more
// than areaCacheMargin before it started, so that a change in the same
// tick of the filesystem's clock as the one before cannot leave the time
// as it was.
const (
	areaCache       = "areas"
	areaCacheMargin = 2 * time.Second
)

// otherAreas returns the names of the other uids' areas in dir, whose own
// area (the cache's home) is mine.
func otherAreas(dir, mine, uid string) []string {
	var st unix.Stat_t
	statErr := unix.Stat(dir, &st)
	cache := filepath.Join(mine, areaCache)
	key := fmt.Sprintf("%d %d %d %d", st.Dev, st.Ino, st.Mtim.Sec, st.Mtim.Nsec)
	if statErr == nil {
		if names, ok := readAreaCache(cache, key); ok {
			return names
		}
	}
	listed := time.Now()
	names := listAreas(dir, uid)
	if statErr == nil && listed.Sub(time.Unix(st.Mtim.Unix())) > areaCacheMargin {
		writeAreaCache(cache, key, names)
	}
	return names
}

// listAreas lists dir for other uids' areas: without a sort or a stat per
// entry.
func listAreas(dir, uid string) []string {
	names := []string{}
	_ = scanDir(dir, func(name []byte, typ byte) {
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
		if typ == unix.DT_UNKNOWN {
			if st, err := os.Lstat(filepath.Join(dir, string(name))); err != nil || !st.IsDir() {
				return
			}
		}
		names = append(names, string(name))
	})
	return names
}

// The cache file is the key line, one name a line, and "end": a file cut
// short is no answer. Concurrent runs share it under flock, written in
// place (a rename would free the old file's block, which a filesystem
// mounted with discard waits for).

func readAreaCache(path, key string) ([]string, bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_SH) != nil {
		return nil, false
	}
	buf := make([]byte, 4096)
	var data []byte
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, false
		}
		if n == 0 {
			break
		}
		data = append(data, buf[:n]...)
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) < 3 || lines[0] != key || lines[len(lines)-1] != "" || lines[len(lines)-2] != "end" {
		return nil, false
	}
	names := lines[1 : len(lines)-2]
	for _, n := range names {
		if !strings.HasPrefix(n, areaPrefix) || strings.Contains(n, "/") {
			return nil, false
		}
	}
	return names, true
}

func writeAreaCache(path, key string, names []string) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_EX) != nil {
		return
	}
	data := []byte(key + "\n" + strings.Join(append(names, "end"), "\n") + "\n")
	if n, err := unix.Pwrite(fd, data, 0); err != nil || n != len(data) {
		_ = unix.Ftruncate(fd, 0)
		return
	}
	_ = unix.Ftruncate(fd, int64(len(data)))
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
