package sandbox

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// What the read-only binds cannot stop: git metadata a command creates
// that the user's git follows. The index and the work tree must stay
// writable (git commit, git submodule add and git worktree add do the same
// operations), so nothing refuses these by name; the run's end reports
// them instead (the result's sandbox.git.planted, and so its audit
// record):
//
//   - a commondir or config.worktree in a protected git directory that had
//     none (a commondir names a forged common directory, whose config git
//     then reads);
//   - a new git directory under a protected git directory's modules/ (a
//     submodule not cloned yet: git uses it once it exists) or a new entry
//     under its worktrees/;
//   - a .git, file or directory, at a gitlink path (mode 160000) of a
//     protected repository's index, changed since the start: git status in
//     the superproject recurses into a populated submodule and runs what
//     its git directory's config names (core.fsmonitor). The command can
//     add the gitlink itself (git update-index --add --cacheinfo). Or a
//     symlink made since the start on the way to that .git, which may be
//     old (a repository the command made in an earlier run);
//   - a .git in a writable root that had none (git finds it first from
//     there).
//
// "Since the start" is the inode's change time, which no command can set
// back (utimes sets the others). Only what the search recorded at the
// start is looked at again, and on the common path (a run that touched no
// git metadata) that is a stat per git directory and per index, and the
// gitlink listing of each index from a cache in the caller's area.

// Bounds of the index check; variables, so that tests can lower them.
var (
	maxIndexBytes int64 = 64 << 20
	maxGitlinks         = 100000
)

// gitWatch is what the start recorded to check against at the end.
type gitWatch struct {
	mu       sync.Mutex
	since    unix.Timespec        // the start, or the last check's
	clock    func() unix.Timespec // coarseNow (a test's clock)
	writable []string
	dirs     []*watchedGitDir
	indexes  []watchedIndex
	roots    map[string]bool     // a writable root -> whether it has a .git
	cache    string              // gitlinkCache in the caller's area ("": none)
	memo     map[string][]string // the last check's listings (a session's next call)
	// known are the gitlink paths the indexes had at the start (or the
	// last check): the .git at a gitlink added since is reported whatever
	// its age (the command may have written it in an earlier run, where
	// the index had no gitlink there).
	known map[string]bool
	// seen are the symbolic links and .git files the last check looked at
	// on the way to each gitlink, with their inodes and times then. A
	// change in the tick a check starts in reads as at or after it (and a
	// multigrain file system stamps one just before it later still), so
	// the next check would find the same path new again, unchanged; what
	// the last check saw unchanged it has judged already.
	seen map[string]inodeKey
}

// inodeKey is what tells an unchanged path from a rewritten one.
type inodeKey struct {
	dev, ino   uint64
	size       int64
	mtim, ctim unix.Timespec
}

func keyOf(st *unix.Stat_t) inodeKey {
	return inodeKey{uint64(st.Dev), st.Ino, st.Size, st.Mtim, st.Ctim}
}

// watchedGitDir is a git directory in a writable root as the search found
// it (gitGuard.gitdir).
type watchedGitDir struct {
	path                      string
	depth                     int // of nesting (listModules)
	commondir, configWorktree bool
	modules                   map[string]bool // git directories below modules/ (relative)
	moduleDirs                []string        // modules/ and the directories between it and them
	worktrees                 map[string]bool // the directories in worktrees/
}

// watchedIndex is a repository's index and the work tree its paths are
// relative to.
type watchedIndex struct {
	gitdir, wt string
}

// coarseNow is the clock the kernel stamps inodes with, read at its
// coarse resolution: a change after it never gets an earlier time.
func coarseNow() unix.Timespec {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts) != nil {
		ts = unix.NsecToTimespec(time.Now().Add(-time.Second).UnixNano())
	}
	return ts
}

// notBefore reports whether t is at or after since, at t's own precision:
// a file system that keeps whole seconds (or microseconds) stamps a change
// just after since with a time that may read before it.
func notBefore(t, since unix.Timespec) bool {
	s := since
	switch {
	case t.Nsec == 0:
		s.Nsec = 0
	case t.Nsec%1000 == 0:
		s.Nsec -= s.Nsec % 1000
	}
	return t.Sec > s.Sec || t.Sec == s.Sec && t.Nsec >= s.Nsec
}

// changedSince reports whether path's inode changed at or after since
// (false when it is missing).
func changedSince(path string, since unix.Timespec) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil && notBefore(st.Ctim, since)
}

func lexists(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil
}

// watch records, from what the search found, the state the end checks
// against. since is the time taken before the search.
func (g *gitGuard) watch(roots []string, since unix.Timespec, cache string) *gitWatch {
	w := &gitWatch{since: since, clock: coarseNow, writable: g.writable, roots: map[string]bool{}, cache: cache}
	for _, r := range roots {
		w.roots[r] = lexists(filepath.Join(r, ".git"))
		if !w.roots[r] {
			// The repository the root lies in, if any: its index is out of
			// reach, but a gitlink of it inside the root is not.
			if gitdir, wt := enclosingRepo(r); gitdir != "" && g.indexes[gitdir] == "" {
				g.indexes[gitdir] = wt
			}
		}
	}
	w.dirs = g.watched
	slices.SortFunc(w.dirs, func(a, b *watchedGitDir) int { return strings.Compare(a.path, b.path) })
	for gitdir, wt := range g.indexes {
		if wt != "" && under(wt, g.writable) || enclosesAny(wt, g.writable) {
			w.indexes = append(w.indexes, watchedIndex{gitdir, wt})
		}
	}
	slices.SortFunc(w.indexes, func(a, b watchedIndex) int { return strings.Compare(a.gitdir, b.gitdir) })
	// (From the cache, kept in memo for the end's check.)
	links, _ := w.gitlinks()
	w.known = knownLinks(links)
	return w
}

func knownLinks(links []gitlinkPath) map[string]bool {
	known := make(map[string]bool, len(links))
	for _, l := range links {
		known[l.path] = true
	}
	return known
}

// enclosesAny reports whether a writable root lies below dir.
func enclosesAny(dir string, roots []string) bool {
	if dir == "" {
		return false
	}
	for _, r := range roots {
		if strings.HasPrefix(r, dir+string(filepath.Separator)) || dir == "/" {
			return true
		}
	}
	return false
}

// enclosingRepo finds the repository whose work tree holds dir, looking
// up from dir's parent as git does: its git directory and work tree.
func enclosingRepo(dir string) (gitdir, wt string) {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		dotgit := filepath.Join(d, ".git")
		if st, err := os.Lstat(dotgit); err == nil {
			switch {
			case st.IsDir():
				return dotgit, d
			case st.Mode().IsRegular():
				return readGitdirFile(dotgit), d
			case st.Mode()&os.ModeSymlink != 0:
				real, _ := filepath.EvalSymlinks(dotgit)
				return real, d
			}
		}
		if filepath.Dir(d) == d {
			return "", ""
		}
	}
}

// subdirs lists a directory's subdirectories (nil when it cannot be read).
func subdirs(dir string) map[string]bool {
	es, err := readDirTypes(dir)
	if err != nil {
		return nil
	}
	names := map[string]bool{}
	for _, e := range es {
		if e.typ == os.ModeDir {
			names[e.name] = true
		}
	}
	return names
}

// checker is check, or nil for no watch.
func (w *gitWatch) checker() func() ([]string, bool) {
	if w == nil {
		return nil
	}
	return w.check
}

// check returns the git metadata planted since the start (or the last
// check), sorted, and whether every index could be read; the next check
// reports only what is newer.
func (w *gitWatch) check() (planted []string, complete bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	since := w.since
	w.since = w.clock()
	for _, d := range w.dirs {
		planted = d.check(since, planted)
	}
	for r, had := range w.roots {
		if !had && lexists(filepath.Join(r, ".git")) {
			planted = append(planted, filepath.Join(r, ".git"))
			w.roots[r] = true
		}
	}
	links, complete := w.gitlinks()
	seen := map[string]inodeKey{}
	// isNew: path's inode changed at or after since, and the last check
	// did not see it as it is. What the next check could find new
	// unchanged is kept in seen.
	isNew := func(path string) (is, exists bool) {
		var st unix.Stat_t
		if unix.Lstat(path, &st) != nil {
			return false, false
		}
		k := keyOf(&st)
		if notBefore(st.Ctim, w.since) {
			seen[path] = k
		}
		return notBefore(st.Ctim, since) && w.seen[path] != k, true
	}
	for _, l := range links {
		dotgit := filepath.Join(l.path, ".git")
		link := newSymlink(l.wt, l.path, isNew)
		changed, exists := isNew(dotgit)
		switch {
		case link != "":
			planted = append(planted, link)
		case changed || exists && !w.known[l.path]:
			planted = append(planted, dotgit)
		}
	}
	w.seen = seen
	if complete {
		w.known = knownLinks(links)
	}
	slices.Sort(planted)
	return slices.Compact(planted), complete
}

// gitlinkPath is a gitlink's path in its work tree, absolute.
type gitlinkPath struct{ wt, path string }

// newSymlink returns the first directory on the way from the work tree wt
// down to path that is a symbolic link isNew finds new, or "" (it asks
// isNew of every link on the way): git
// follows it to a .git elsewhere, which may be old (a repository the
// command made in an earlier run).
func newSymlink(wt, path string, isNew func(string) (is, exists bool)) string {
	var chain []string
	for d := path; d != wt && strings.HasPrefix(d, wt+string(filepath.Separator)); d = filepath.Dir(d) {
		chain = append(chain, d)
	}
	first := ""
	for i := len(chain) - 1; i >= 0; i-- {
		var st unix.Stat_t
		if unix.Lstat(chain[i], &st) != nil {
			break
		}
		// Each link is looked at, so that the next check knows them all.
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if is, _ := isNew(chain[i]); is && first == "" {
				first = chain[i]
			}
		}
	}
	return first
}

// check adds to planted what is new in the git directory d since since.
func (d *watchedGitDir) check(since unix.Timespec, planted []string) []string {
	changed := changedSince(d.path, since)
	if changed {
		// Something was added, removed or renamed right in it.
		for _, f := range []struct {
			name string
			had  *bool
		}{{"commondir", &d.commondir}, {"config.worktree", &d.configWorktree}} {
			if !*f.had && lexists(filepath.Join(d.path, f.name)) {
				planted = append(planted, filepath.Join(d.path, f.name))
				*f.had = true
			}
		}
	}
	modules := filepath.Join(d.path, "modules")
	walk := changed && len(d.moduleDirs) == 0 && lexists(modules)
	for _, m := range d.moduleDirs {
		walk = walk || changedSince(m, since)
	}
	if walk {
		found, dirs := listModules(modules, d.depth)
		now := map[string]bool{}
		for name := range found {
			now[name] = true
			if !d.modules[name] {
				planted = append(planted, filepath.Join(modules, name))
			}
		}
		d.modules, d.moduleDirs = now, dirs
	}
	worktrees := filepath.Join(d.path, "worktrees")
	if changedSince(worktrees, since) {
		now := subdirs(worktrees)
		for name := range now {
			if !d.worktrees[name] {
				planted = append(planted, filepath.Join(worktrees, name))
			}
		}
		d.worktrees = now
	}
	return planted
}

// gitlinks returns the gitlink paths of every watched index that lie
// inside a writable root, and whether every index could be read.
func (w *gitWatch) gitlinks() ([]gitlinkPath, bool) {
	if len(w.indexes) == 0 {
		return nil, true
	}
	ok := true
	var cached map[string][]string
	fresh := map[string][]string{}
	memo := map[string][]string{} // this check's indexes only
	var out []gitlinkPath
	for _, ix := range w.indexes {
		path := filepath.Join(ix.gitdir, "index")
		var st unix.Stat_t
		if unix.Stat(path, &st) != nil {
			continue // no index yet: no gitlink
		}
		key := indexKey(path, &st)
		links, hit := w.memo[key]
		if !hit {
			if cached == nil {
				cached = readGitlinkCache(w.cache)
			}
			links, hit = cached[key]
		}
		if hit && len(links) > 0 && strings.HasPrefix(links[0], sharedMark) {
			// A split index: the listing holds while its shared index's
			// key does too (a rewrite in place leaves the index as it was).
			_, ok := sharedIndexKey(links[0])
			hit = ok
		}
		if !hit {
			started := time.Now()
			var err error
			if links, err = readGitlinks(ix.gitdir, path, &st); err != nil {
				ok = false
				continue
			}
			settled := started.Sub(time.Unix(st.Ctim.Unix())) > areaCacheMargin
			if settled && len(links) > 0 && strings.HasPrefix(links[0], sharedMark) {
				ctim, ok := sharedIndexKey(links[0])
				settled = ok && started.Sub(time.Unix(ctim.Unix())) > areaCacheMargin
			}
			if settled {
				fresh[key] = links
			}
		}
		memo[key] = links
		if len(links) > 0 && strings.HasPrefix(links[0], sharedMark) {
			links = links[1:]
		}
		for _, l := range links {
			if p := filepath.Join(ix.wt, l); under(p, w.writable) {
				out = append(out, gitlinkPath{ix.wt, p})
			}
		}
	}
	w.memo = memo
	if len(fresh) > 0 {
		writeGitlinkCache(w.cache, fresh)
	}
	return out, ok
}

// indexKey names an index file's content: a write sets its change time,
// which no command sets back, and a file written in its place has another
// inode or a later change time.
func indexKey(path string, st *unix.Stat_t) string {
	return fmt.Sprintf("%d %d %d %d.%d %d.%d %s", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec, strconv.Quote(path))
}

// gitlinkCacheHeader starts the cache; a cache of other rules (a split
// index's listing kept without its shared index's key) is no answer.
const gitlinkCacheHeader = "gitlinks 2"

// sharedMark starts the first element of a split index's listing: the
// key of its shared index (indexKey), which no gitlink path holds (a
// path in an index ends at its first NUL).
const sharedMark = "\x00shared "

// sharedIndexKey reports whether the shared index a listing's first
// element (sharedMark and its key) names still has that key, and its
// change time.
func sharedIndexKey(mark string) (unix.Timespec, bool) {
	key := strings.TrimPrefix(mark, sharedMark)
	q := strings.IndexByte(key, '"')
	if q < 0 {
		return unix.Timespec{}, false
	}
	path, err := strconv.Unquote(key[q:])
	var st unix.Stat_t
	if err != nil || unix.Stat(path, &st) != nil || indexKey(path, &st) != key {
		return unix.Timespec{}, false
	}
	return st.Ctim, true
}

// readGitlinks reads the gitlink paths of the index at path (of the git
// directory gitdir), with those of its shared index under split-index;
// then the first element is sharedMark and the shared index's key, which
// the listing holds only as long as.
func readGitlinks(gitdir, path string, st *unix.Stat_t) ([]string, error) {
	hashLen := gitHashLen(gitdir)
	links, shared, err := readIndexFile(path, st.Size, hashLen)
	if err != nil || shared == "" {
		return links, err
	}
	sp := filepath.Join(gitdir, "sharedindex."+shared)
	var sst unix.Stat_t
	if unix.Stat(sp, &sst) != nil {
		return links, nil // git refuses the index then
	}
	more, _, err := readIndexFile(sp, sst.Size, hashLen)
	if err != nil {
		return nil, err
	}
	// Entries the split index deletes or replaces are kept: a path too
	// many is only looked at.
	links = append(links, more...)
	slices.Sort(links)
	return append([]string{sharedMark + indexKey(sp, &sst)}, slices.Compact(links)...), nil
}

// gitHashLen is the length of the object ids of the repository whose git
// directory is gitdir: 32 under extensions.objectFormat sha256 (in the
// common directory's config), else 20.
func gitHashLen(gitdir string) int {
	common := gitdir
	if data, err := os.ReadFile(filepath.Join(gitdir, "commondir")); err == nil {
		common = resolveFrom(gitdir, strings.TrimSpace(string(data)))
	}
	n := 20
	scanGitConfig(filepath.Join(common, "config"), func(section, key, val string) {
		if section == "extensions" && key == "objectformat" && strings.EqualFold(val, "sha256") {
			n = 32
		}
	})
	return n
}

func readIndexFile(path string, size int64, hashLen int) ([]string, string, error) {
	if size > maxIndexBytes {
		return nil, "", fmt.Errorf("index %s: %d bytes, more than %d", path, size, maxIndexBytes)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	if int64(len(data)) > maxIndexBytes {
		return nil, "", fmt.Errorf("index %s: more than %d bytes", path, maxIndexBytes)
	}
	links, shared, err := parseIndex(data, hashLen)
	if err != nil {
		return nil, "", fmt.Errorf("index %s: %w", path, err)
	}
	return links, shared, nil
}

var errIndex = errors.New("not a git index, or cut short")

// parseIndex returns the paths of the gitlink entries (mode 0160000) of a
// git index (DIRC, versions 2 to 4, object ids of hashLen bytes) and the
// hex id of its shared index ("link" extension), if any. The trailing
// checksum is not verified: git refuses an index whose checksum is wrong,
// so a corrupt one names nothing git follows either.
func parseIndex(data []byte, hashLen int) (links []string, shared string, err error) {
	be32 := binary.BigEndian.Uint32
	if len(data) < 12+hashLen || string(data[:4]) != "DIRC" {
		return nil, "", errIndex
	}
	version := be32(data[4:])
	if version < 2 || version > 4 {
		return nil, "", fmt.Errorf("index version %d", version)
	}
	body := data[:len(data)-hashLen]
	fixed := 40 + hashLen + 2 // stat data, mode, ids, size, object id, flags
	least := (fixed + 8) &^ 7 // the shortest entry, padded (a one-byte name: 64 bytes)
	if version == 4 {
		least = fixed + 2
	}
	n := int(be32(data[8:]))
	if n < 0 || n > (len(body)-12)/least {
		return nil, "", errIndex
	}
	off := 12
	var name []byte // version 4: the previous entry's name
	for i := 0; i < n; i++ {
		if len(body)-off < fixed {
			return nil, "", errIndex
		}
		e := body[off:]
		mode := be32(e[24:])
		flags := binary.BigEndian.Uint16(e[40+hashLen:])
		p := fixed
		if flags&0x4000 != 0 { // extended flags
			if version < 3 {
				return nil, "", errIndex
			}
			p += 2
		}
		if p > len(e) {
			return nil, "", errIndex
		}
		if version == 4 {
			strip, k := indexVarint(e[p:])
			if k == 0 || strip > uint64(len(name)) {
				return nil, "", errIndex
			}
			p += k
			z := indexNUL(e[p:])
			if z < 0 {
				return nil, "", errIndex
			}
			name = append(name[:len(name)-int(strip)], e[p:p+z]...)
			p += z + 1
			off += p
		} else {
			l := int(flags & 0xfff)
			if l == 0xfff {
				if l = indexNUL(e[p:]); l < 0 {
					return nil, "", errIndex
				}
			}
			size := (p + l + 8) &^ 7
			if size > len(e) || e[p+l] != 0 {
				return nil, "", errIndex
			}
			name = e[p : p+l]
			off += size
		}
		if mode == 0o160000 {
			if len(links) >= maxGitlinks {
				return nil, "", fmt.Errorf("more than %d gitlinks", maxGitlinks)
			}
			links = append(links, string(name))
		}
	}
	for len(body)-off >= 8 {
		sig, size := string(body[off:off+4]), int(be32(body[off+4:]))
		off += 8
		if size < 0 || size > len(body)-off {
			return nil, "", errIndex
		}
		if sig == "link" && size >= hashLen {
			if id := body[off : off+hashLen]; strings.Trim(string(id), "\x00") != "" {
				shared = hex.EncodeToString(id)
			}
		}
		off += size
	}
	return links, shared, nil
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// indexVarint decodes git's offset varint (varint.c), returning the value
// and the bytes read (0: malformed).
func indexVarint(b []byte) (uint64, int) {
	if len(b) == 0 {
		return 0, 0
	}
	c := b[0]
	v := uint64(c & 0x7f)
	i := 1
	for c&0x80 != 0 {
		if i >= len(b) || i > 9 {
			return 0, 0
		}
		v++
		c = b[i]
		v = v<<7 + uint64(c&0x7f)
		i++
	}
	return v, i
}

// The gitlink listings are kept in the caller's area (which every run's
// covers hide) by index key, so that a run whose repositories' indexes did
// not change reads one small file rather than every index. Concurrent runs
// share it under flock, written in place, like the areas' listing
// (otherAreas). A listing is kept only when the index last changed more
// than areaCacheMargin before it was read.
const (
	gitlinkCache      = "gitlinks"
	maxGitlinkCache   = 32 // indexes kept
	maxGitlinkCacheSz = 1 << 20
)

// readGitlinkCache reads the cache: index key -> gitlink paths. The file
// is gitlinkCacheHeader, then per index a line "I key" and a line "G path" (Go
// quoted) per gitlink, and "end": a file cut short is no answer.
func readGitlinkCache(path string) map[string][]string {
	if path == "" {
		return map[string][]string{}
	}
	data, _ := readLocked(path, maxGitlinkCacheSz)
	return parseGitlinkCache(data)
}

func parseGitlinkCache(data []byte) map[string][]string {
	out := map[string][]string{}
	lines := strings.Split(string(data), "\n")
	if len(lines) < 3 || lines[0] != gitlinkCacheHeader || lines[len(lines)-1] != "" || lines[len(lines)-2] != "end" {
		return out
	}
	got := map[string][]string{}
	key := ""
	for _, l := range lines[1 : len(lines)-2] {
		switch {
		case strings.HasPrefix(l, "I "):
			key = l[2:]
			got[key] = []string{}
		case strings.HasPrefix(l, "G ") && key != "":
			p, err := strconv.Unquote(l[2:])
			if err != nil {
				return out
			}
			got[key] = append(got[key], p)
		default:
			return out
		}
	}
	return got
}

// writeGitlinkCache adds fresh to the cache, dropping the oldest beyond
// maxGitlinkCache indexes.
func writeGitlinkCache(path string, fresh map[string][]string) {
	if path == "" {
		return
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_EX) != nil {
		return
	}
	old := parseGitlinkCache(preadAll(fd, maxGitlinkCacheSz))
	var b strings.Builder
	b.WriteString(gitlinkCacheHeader + "\n")
	write := func(key string, links []string) {
		b.WriteString("I " + key + "\n")
		for _, l := range links {
			b.WriteString("G " + strconv.Quote(l) + "\n")
		}
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range fresh {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		write(k, fresh[k])
	}
	kept := len(keys)
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range old {
			if !yield(k) {
				return
			}
		}
	}) {
		if kept >= maxGitlinkCache {
			break
		}
		if _, dup := fresh[k]; !dup {
			write(k, old[k])
			kept++
		}
	}
	b.WriteString("end\n")
	data := []byte(b.String())
	if len(data) > maxGitlinkCacheSz {
		_ = unix.Ftruncate(fd, 0)
		return
	}
	if n, err := unix.Pwrite(fd, data, 0); err != nil || n != len(data) {
		_ = unix.Ftruncate(fd, 0)
		return
	}
	_ = unix.Ftruncate(fd, int64(len(data)))
}

// readLocked reads a file under a shared flock, at most max bytes.
func readLocked(path string, max int) ([]byte, bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_SH) != nil {
		return nil, false
	}
	data := preadAll(fd, max)
	return data, data != nil
}

// preadAll reads fd from its start, at most max bytes (nil: more, or an
// error).
func preadAll(fd, max int) []byte {
	buf := make([]byte, 4096)
	data := []byte{}
	for {
		n, err := unix.Pread(fd, buf, int64(len(data)))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || len(data)+n > max {
			return nil
		}
		if n == 0 {
			return data
		}
		data = append(data, buf[:n]...)
	}
}
