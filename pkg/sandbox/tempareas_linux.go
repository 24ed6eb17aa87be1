package sandbox

import (
	"bytes"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
//
// An area's name is one anyone can work out, in a directory anyone can
// write, so another user (or a command of another run that can write
// /tmp) may put something there first: a directory of its own (0777 or
// not), a symlink, a file, a FIFO. Such a plant is never the caller's
// area and never denies it one. The area is the caller's only when it is
// a directory of the caller's uid, not a symlink, that nobody else could
// ever write (a mode without write for group and others; one that had it
// may hold what others put there), and a mode is set (0711) only through
// a descriptor opened without following a symlink and checked by fstat;
// in a sticky temp dir nobody else can then rename or remove it. When the
// name is taken by anything else, the caller's area is
// "agentplane-sandbox.UID.SUFFIX" beside it, with a random suffix nobody
// can take first (a taken one is retried): the first such directory of
// the caller's in name order, made when there is none. It is found again
// by the listing that finds other uids' areas, so it needs no record
// anywhere; the plant is left as it is. Likewise another uid's area counts
// (and is covered) only when it is a directory of the uid its name says,
// and of another uid's suffixed areas only the first maxFallbacks: nobody
// can make a run cover more directories than there are users (each cover is a
// mount in the run's namespace, and the kernel refuses a run more than
// mount-max of them).

const (
	areaPrefix = "agentplane-sandbox."
	// fallbackHex is the length of a suffixed area's random suffix.
	fallbackHex = 12
	// maxFallbacks bounds the suffixed areas of each uid a run covers.
	maxFallbacks = 4
)

// systemTmp is the system's temp dir, where --user runs live; a variable
// for the tests, which must not plant areas in the machine's own.
var systemTmp = "/tmp"

// tempAreas returns the area this run's private directory goes in (below
// parent, the temp dir when "") and every area to cover.
func tempAreas(parent string) (string, []string, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	euid := os.Geteuid()
	uid := strconv.Itoa(euid)
	var own, home string
	var areas []string
	for _, p := range []string{parent, systemTmp} {
		if p != parent && filepath.Clean(p) == filepath.Clean(parent) {
			continue
		}
		// (scanDir follows no symlink: a TMPDIR below one is listed
		// where it resolves to.)
		list := p
		if real, err := filepath.EvalSymlinks(p); err == nil {
			list = real
		}
		mine, others, err := areaIn(p, list, uid, euid)
		if err != nil {
			if p == parent {
				return "", nil, err
			}
			continue // /tmp not writable: no --user run can live there either
		}
		if p == parent {
			own = mine
		}
		if filepath.Clean(p) == filepath.Clean(systemTmp) {
			home = mine
		}
		areas = append(areas, mine)
		for _, name := range others {
			if a := filepath.Join(p, name); a != mine {
				areas = append(areas, a)
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
	if home != "" { // (made unless /tmp is not writable)
		if real, err := filepath.EvalSymlinks(home); err == nil {
			home = real
		}
		listed := elsewhere(home, own, uid)
		if _, suffixed, _ := parseArea(filepath.Base(home)); suffixed {
			// Two first calls after a plant may each have made an area
			// in /tmp, and listed their areas elsewhere in their own: the
			// lists of every suffixed area of the caller's there count
			// (read, not added to).
			for _, a := range slices.Clone(areas) {
				if id, sfx, _ := parseArea(filepath.Base(a)); sfx && id == uid && a != home && filepath.Dir(a) == filepath.Dir(home) {
					listed = append(listed, elsewhere(a, a, uid)...)
				}
			}
		}
		for _, a := range listed {
			if a != own && !slices.Contains(areas, a) {
				areas = append(areas, a)
			}
		}
	}
	return own, areas, nil
}

// areaIn returns the caller's area in the temp dir p (listed at list) and
// the names of the areas to cover there besides: its own, or when that
// name is taken by something not the caller's, its first suffixed one,
// made if there is none.
func areaIn(p, list, uid string, euid int) (string, []string, error) {
	mine := filepath.Join(p, areaPrefix+uid)
	err := ownArea(mine, euid, true)
	if err == nil {
		return mine, otherAreas(list, mine, uid), nil
	}
	if !errors.Is(err, errNotOwn) {
		return "", nil, err
	}
	// Planted. The listing is not kept (its cache lives in the area it
	// finds): a call pays it while the plant stays.
	others, suffixed := listAreas(list, uid)
	others = append(others, suffixed...) // (the caller's other runs may be in them)
	for _, name := range suffixed {
		if a := filepath.Join(p, name); ownArea(a, euid, false) == nil {
			return a, others, nil
		}
	}
	for try := 0; ; try++ {
		b := make([]byte, fallbackHex/2)
		_, _ = crand.Read(b)
		name := areaPrefix + uid + "." + hex.EncodeToString(b)
		a := filepath.Join(p, name)
		err := unix.Mkdir(a, 0o711)
		if errors.Is(err, unix.EEXIST) && try < 10 {
			continue // taken by someone else, or by another run just now
		}
		if err == nil {
			err = ownArea(a, euid, false)
		}
		if err != nil {
			return "", nil, result.Errorf(result.CodeSandboxFailed, "the sandbox's temp area %s is not a directory of uid %s, and no other could be made beside it: %v", mine, uid, unwrap(err))
		}
		return a, append(others, name), nil
	}
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
		if id, _, ok := parseArea(filepath.Base(line)); ok && id == uid && filepath.IsAbs(line) && !slices.Contains(listed, line) {
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
	// areaCacheVersion starts the key: a listing kept under other rules
	// (before every area's owner was checked) is no answer.
	areaCacheVersion = "v2"
)

// otherAreas returns the names of the other uids' areas in dir, whose own
// area (the cache's home) is mine.
func otherAreas(dir, mine, uid string) []string {
	var st unix.Stat_t
	statErr := unix.Stat(dir, &st)
	cache := filepath.Join(mine, areaCache)
	key := fmt.Sprintf("%s %d %d %d %d", areaCacheVersion, st.Dev, st.Ino, st.Mtim.Sec, st.Mtim.Nsec)
	if statErr == nil {
		if names, ok := readAreaCache(cache, key); ok {
			return names
		}
	}
	listed := time.Now()
	names, suffixed := listAreas(dir, uid)
	names = append(names, suffixed...)
	if statErr == nil && listed.Sub(time.Unix(st.Mtim.Unix())) > areaCacheMargin {
		writeAreaCache(cache, key, names)
	}
	return names
}

// listAreas lists dir for the areas that are not the caller's own (uid's
// unsuffixed one): other uids' (each a directory of the uid its name says,
// at most maxFallbacks suffixed ones of each) and the caller's suffixed
// ones (all, in name order). Without a sort or a stat of every entry: a stat of
// each that is named like an area.
func listAreas(dir, uid string) (others, suffixed []string) {
	others = []string{}
	perUID := map[string][]string{}
	_ = scanDir(dir, func(name []byte, typ byte) {
		if !bytes.HasPrefix(name, []byte(areaPrefix)) || typ != unix.DT_DIR && typ != unix.DT_UNKNOWN {
			return
		}
		id, fallback, ok := parseArea(string(name))
		if !ok || id == uid && !fallback {
			return
		}
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(dir, string(name)), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || strconv.FormatUint(uint64(st.Uid), 10) != id {
			return
		}
		if fallback {
			perUID[id] = append(perUID[id], string(name))
		} else {
			others = append(others, string(name))
		}
	})
	for id, names := range perUID {
		slices.Sort(names)
		if id == uid {
			// Only the caller makes these, and one it cannot use (a mode
			// open to others) must not hide the next from it.
			suffixed = names
		} else {
			others = append(others, names[:min(len(names), maxFallbacks)]...)
		}
	}
	return others, suffixed
}

// parseArea splits an area's name into its uid and whether it has a
// suffix (areaPrefix, the uid in decimal, maybe "." and fallbackHex
// lowercase hex digits); ok is false for any other name.
func parseArea(name string) (uid string, suffixed, ok bool) {
	rest, ok := strings.CutPrefix(name, areaPrefix)
	if !ok {
		return "", false, false
	}
	id, sfx, suffixed := strings.Cut(rest, ".")
	if id == "" || len(id) > 10 || strings.Trim(id, "0123456789") != "" || len(id) > 1 && id[0] == '0' {
		return "", false, false
	}
	if suffixed && (len(sfx) != fallbackHex || strings.Trim(sfx, "0123456789abcdef") != "") {
		return "", false, false
	}
	return id, suffixed, true
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
		if _, _, ok := parseArea(n); !ok {
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

// errNotOwn: what is at an area's path is not a directory of the caller's
// that only the caller could ever write.
var errNotOwn = errors.New("not a directory of the caller's")

// ownArea checks that path is a directory of uid's (the caller's), and
// not a symlink, and sets it to 0711 (a --user target must reach its own
// TMPDIR below, but not list). With create it makes the directory when
// there is none. Anything else there (a symlink, a file, a FIFO, another
// uid's directory, one of the caller's that others may write) is
// errNotOwn, and left alone: a directory that was open to others may hold
// what they put there, which the area's readers (the listing's cache, the
// list of areas elsewhere, the spares) would take for the caller's.
//
// One lstat when the area is as it should be, which nothing follows (in a
// sticky temp dir nobody else can move it); a mode is set only through a
// descriptor opened without following a symlink and checked again.
func ownArea(path string, uid int, create bool) error {
	var st unix.Stat_t
	err := unix.Lstat(path, &st)
	if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && int(st.Uid) == uid && st.Mode&0o7777 == 0o711 {
		return nil
	}
	if errors.Is(err, unix.ENOENT) && create {
		if err := unix.Mkdir(path, 0o711); err != nil && !errors.Is(err, unix.EEXIST) {
			return result.Errorf(result.CodeSandboxFailed, "cannot create the sandbox's temp area %s: %v", path, err)
		}
	} else if err != nil {
		return result.Errorf(result.CodeSandboxFailed, "temp area %s: %v", path, err)
	}
	fd, err := openArea(path)
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return errNotOwn
	case err != nil:
		return result.Errorf(result.CodeSandboxFailed, "temp area %s: %v", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return result.Errorf(result.CodeSandboxFailed, "temp area %s: %v", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != uid || st.Mode&0o022 != 0 {
		return errNotOwn
	}
	if st.Mode&0o7777 != 0o711 {
		// Made under a umask, or closed further by the caller. An O_PATH
		// descriptor takes no fchmod; its /proc link is the very
		// directory (a mode without read may let the caller open it no
		// other way).
		if err := unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), 0o711); err != nil {
			return result.Errorf(result.CodeSandboxFailed, "chmod %s: %v", path, err)
		}
	}
	return nil
}

// openArea opens path as an O_PATH descriptor of a directory, refusing a
// symlink (ELOOP or ENOTDIR) and never opening a FIFO.
func openArea(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}
