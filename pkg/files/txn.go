package files

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/internal/faultpoint"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/textdiff"
)

// defaultFileMode is the mode of a file agentfs creates when none is given.
// It is applied exactly (not through the umask), so results are predictable.
const defaultFileMode fs.FileMode = 0o644

// diffContext is the number of context lines in reported diffs, as diff -u.
const diffContext = 3

// current is what a file is at the start of a change, read under the lock.
type current struct {
	exists  bool
	content []byte
	sha     string
	mode    fs.FileMode
	uid     int
	gid     int
	// factsOnly: the file is binary and only its facts were read (see
	// readFacts); content is nil and size says how large it is.
	factsOnly bool
	size      int64
	// info is the file as it was when read (inode, size, modification
	// time): the commit checks that it is still that file (see unchanged).
	info fs.FileInfo
	// streamed: the file was too large to hold, and was read in one pass
	// (streamFacts) for Read or Stat; content is nil.
	streamed *streamed
}

// plan is one file's part of a change set: what it becomes and, once the
// commit runs, the temp and backup names used to get there.
type plan struct {
	t      target
	cur    current
	data   []byte      // the new content, when !remove
	remove bool        // the file goes away
	mode   fs.FileMode // 0: keep the current mode, or defaultFileMode

	tmp     string // staged new content, relative to the root
	backup  string // hard link to (or the renamed) original, relative to the root
	bakName string // the name backup gets, chosen before the renames (the journal names it)
	renamed bool   // the original at t.rel has been replaced or removed
	hist    *historyEntry
	dataSHA string // cache of sha(data)

	unchanged bool // the plan would write what is already there
	text      bool // both contents are known to be UTF-8 text (edit, insert)
	onCommit  func()
}

// newSHA returns the hash of the new content, computed once: for a large
// file each hash is a measurable share of the work.
func (p *plan) newSHA() string {
	if p.dataSHA == "" {
		p.dataSHA = sha(p.data)
	}
	return p.dataSHA
}

// readCurrent reads the file at t, which must be a regular file or absent.
// Symlinks were resolved by resolve, so one found here was swapped in since:
// it is refused rather than followed (see pinDir for the directories).
func (s *session) readCurrent(t target) (current, error) { return s.readFile(t, false, nil) }

// readFacts is readCurrent for Read and Stat, which report no content of
// a binary file: a file whose first bytes show it binary is hashed in one
// streamed pass and not held in memory (a disk image, a model's weights),
// with factsOnly set.
// A file from readStreamMin bytes on is streamed (streamFacts), with sel,
// when not nil, taking the lines Read returns.
func (s *session) readFacts(t target, sel *lines) (current, error) { return s.readFile(t, true, sel) }

func (s *session) readFile(t target, factsOnly bool, sel *lines) (current, error) {
	d, name, err := s.dirOf(t)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return current{}, nil // its directory is still to be made
		}
		return current{}, err
	}
	fi, err := d.Lstat(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return current{}, nil
		}
		return current{}, osError(err, t.given)
	}
	switch {
	case fi.IsDir():
		return current{}, newErr(result.CodeIsDirectory, "%s is a directory", t.given)
	case !fi.Mode().IsRegular():
		return current{}, newErr(result.CodeNotRegularFile, "%s is not a regular file (%s)", t.given, kindOf(fi.Mode()))
	}
	if err := s.checkSize(t, fi.Size()); err != nil {
		return current{}, err
	}
	f, err := d.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return current{}, osError(err, t.given)
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil {
		return current{}, osError(err, t.given)
	}
	if !fi.Mode().IsRegular() {
		return current{}, newErr(result.CodeNotRegularFile, "%s is not a regular file", t.given)
	}
	if err := s.checkLinks(t, f, fi); err != nil {
		return current{}, err
	}
	if err := s.checkSize(t, fi.Size()); err != nil {
		return current{}, err
	}
	if factsOnly && fi.Size() >= readStreamMin {
		c, st, err := streamFacts(f, sel)
		if err != nil {
			return current{}, osError(err, t.given)
		}
		if err := s.checkSize(t, c.size); err != nil {
			return current{}, err
		}
		c.mode, c.uid, c.gid, c.info, c.streamed = fi.Mode(), -1, -1, fi, &st
		return c, nil
	}
	if factsOnly && fi.Size() > binarySniffLen {
		if c, ok, err := hashIfBinary(f, fi); ok || err != nil {
			if err != nil {
				return current{}, osError(err, t.given)
			}
			if err := s.checkSize(t, c.size); err != nil {
				return current{}, err
			}
			return c, nil
		}
	}
	// Read into a buffer of the exact size: growing a 100 MB buffer would
	// copy it. A file that grew since the Stat is still read to its end.
	buf := make([]byte, fi.Size())
	n, err := io.ReadFull(f, buf)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return current{}, osError(err, t.given)
	}
	buf = buf[:n]
	rest, err := io.ReadAll(f)
	if err != nil {
		return current{}, osError(err, t.given)
	}
	buf = append(buf, rest...)
	if err := s.checkSize(t, int64(len(buf))); err != nil {
		return current{}, err
	}
	c := current{exists: true, content: buf, mode: fi.Mode(), uid: -1, gid: -1, info: fi}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		c.uid, c.gid = int(st.Uid), int(st.Gid)
	}
	c.sha = sha(c.content)
	return c, nil
}

// checkDirs is prepareDirs for a dry run: the same refusals, nothing made.
func (s *session) checkDirs(ts []target, noMkdir bool) error {
	_, err := s.parentDirs(ts, noMkdir, false)
	return err
}

// prepareDirs creates the missing parents of each target (unless noMkdir)
// and returns the directories it created, deepest last, so a failed change
// can remove them again.
func (s *session) prepareDirs(ts []target, noMkdir bool) ([]string, error) {
	return s.parentDirs(ts, noMkdir, true)
}

func (s *session) parentDirs(ts []target, noMkdir, create bool) ([]string, error) {
	var created []string
	for _, t := range ts {
		dir := path.Dir(t.rel)
		var missing []string
		for d := dir; d != "." && d != "/"; d = path.Dir(d) {
			fi, err := s.root.Stat(d)
			if err == nil {
				if !fi.IsDir() {
					return created, newErr(result.CodeFileNotFound, "a parent of %s is not a directory", t.given)
				}
				break
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return created, osError(err, t.given)
			}
			missing = append(missing, d)
		}
		if len(missing) == 0 {
			continue
		}
		if noMkdir {
			return created, newErr(result.CodeFileNotFound, "the directory of %s does not exist", t.given).
				With("hint", "create it first, or allow parents to be created")
		}
		if !create {
			continue
		}
		for i := len(missing) - 1; i >= 0; i-- {
			parent, err := s.pinDir(path.Dir(missing[i]), t.given)
			if err != nil {
				return created, err
			}
			err = parent.Mkdir(path.Base(missing[i]), 0o755)
			if errors.Is(err, fs.ErrExist) {
				continue // made by someone else meanwhile: not ours to remove
			}
			if err != nil {
				return created, osError(err, t.given)
			}
			created = append(created, missing[i])
		}
	}
	return created, nil
}

// removeDirs undoes prepareDirs, deepest first; a directory someone else
// filled in the meantime stays.
func (s *session) removeDirs(dirs []string) {
	for i := len(dirs) - 1; i >= 0; i-- {
		if parent, err := s.pinDir(path.Dir(dirs[i]), dirs[i]); err == nil {
			_ = parent.Remove(path.Base(dirs[i]))
		}
	}
}

// lockDirs takes an exclusive flock on the directory of each target, in a
// fixed order so that two change sets never deadlock, and returns the
// function that releases them. See the package documentation for why the
// directory is what gets locked.
func (s *session) lockDirs(ts []target) (func(), error) {
	dirs := map[string]string{} // directory -> a path given in it
	for _, t := range ts {
		dirs[path.Dir(t.rel)] = t.given
	}
	order := make([]string, 0, len(dirs))
	for d := range dirs {
		order = append(order, d)
	}
	sort.Strings(order)
	var held []*os.File
	release := func() {
		for i := len(held) - 1; i >= 0; i-- {
			held[i].Close() // closing the descriptor drops the flock
		}
	}
	for _, d := range order {
		pd, err := s.pinDir(d, dirs[d])
		if err != nil {
			release()
			return nil, err
		}
		f, err := pd.Open(".")
		if err != nil {
			release()
			return nil, osError(err, s.display(d))
		}
		held = append(held, f)
		if err := flock(f); err != nil {
			release()
			return nil, newErr(result.CodeIOError, "lock %s: %v", s.display(d), err)
		}
		if s.locked == nil {
			s.locked = map[string]bool{}
		}
		s.locked[d] = true
	}
	// Every agentfs writer of these directories is held off now: what
	// killed ones left behind can go.
	for _, d := range order {
		s.sweep(d)
	}
	return release, nil
}

func flock(f *os.File) error { return flockHow(f, unix.LOCK_EX) }

func flockHow(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

// awaitWriters waits until no agentfs process is changing files in the
// directory rel (one that holds its lock), for a session that does not
// hold that lock itself: a shared lock is granted once the writer's
// exclusive one is released. It reports whether it waited.
func (s *session) awaitWriters(rel, given string) bool {
	if s.locked[rel] {
		return false // our own lock: no other writer is in there
	}
	pd, err := s.pinDir(rel, given)
	if err != nil {
		return false
	}
	f, err := pd.Open(".")
	if err != nil {
		return false
	}
	defer f.Close() // drops the shared lock
	if s.fs.beforeAwait != nil {
		s.fs.beforeAwait()
	}
	return flockHow(f, unix.LOCK_SH) == nil
}

// randomSuffix names temp and backup files; collisions are also caught by
// O_EXCL.
func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sideName is a hidden sibling of rel used during a commit:
// ".NAME.agentfs-OWNER-RANDOM.KIND", where OWNER names the process that
// made it (see ownerTag), so that a later operation can tell a leftover of
// a killed one from a live one's.
func (s *session) sideName(rel, kind string) string {
	base := path.Base(rel)
	if len(base) > maxSideBase {
		// Stay under NAME_MAX (255) whatever the file's own name length.
		base = base[:maxSideBase]
	}
	return path.Join(path.Dir(rel), "."+base+sideMark+s.owner()+"-"+randomSuffix()+"."+kind)
}

// maxSideBase is how much of a file's name its temp and backup names keep.
const maxSideBase = 200

// sideMark begins the agentfs part of a side file's name.
const sideMark = ".agentfs-"

// owner is this process's tag in side file names: its pid, its start time
// and the first bytes of the boot id, "PID-START-BOOT".
func (s *session) owner() string {
	if s.ownerTag == "" {
		pid := os.Getpid()
		start, _ := proctree.StartTime(pid)
		boot, _ := proctree.BootID()
		boot = strings.ReplaceAll(boot, "-", "")
		s.ownerTag = fmt.Sprintf("%d-%d-%.12s", pid, start, boot)
	}
	return s.ownerTag
}

// sweep removes from dir (a directory this session holds the lock of) the
// temp files that killed agentfs operations left: only names agentfs
// makes, and only when the process that made them is provably gone (its
// pid and start time no longer match, or the machine rebooted since). A
// leftover backup is removed only when it is a second link to the file
// itself, so it holds nothing the file does not; one that differs is the
// original of a change set cut off in its rename phase, kept for recovery.
func (s *session) sweep(dir string) {
	pd, err := s.pinDir(dir, s.display(dir))
	if err != nil {
		return
	}
	d, err := pd.Open(".")
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, name := range names {
		base, owner, kind, ok := parseSideName(name)
		if !ok || !s.ownerGone(owner) {
			continue
		}
		switch kind {
		case "tmp":
			// A staged file with a second name is a new file of a change
			// set cut off in its rename phase: its journal's proof that
			// the file is the set's, kept for putting back (it holds
			// nothing the file does not).
			if fi, err := pd.Lstat(name); err == nil && linkCount(fi) > 1 {
				continue
			}
			_ = pd.Remove(name)
		case "bak":
			if len(base) >= maxSideBase {
				continue // the file's name was cut: which file is unknown
			}
			a, aerr := pd.Lstat(name)
			b, berr := pd.Lstat(base)
			if aerr == nil && berr == nil && os.SameFile(a, b) {
				_ = pd.Remove(name)
			}
		}
	}
}

// parseSideName splits ".NAME.agentfs-PID-START-BOOT-RANDOM.KIND": a side
// name (sideOwner) that its maker signed.
func parseSideName(name string) (base, owner, kind string, ok bool) {
	base, _, ok = sideOwner(name)
	if !ok {
		return "", "", "", false
	}
	rest := name[1+len(base)+len(sideMark):]
	kind = rest[len(rest)-len("tmp"):]
	parts := strings.Split(rest[:len(rest)-len(".tmp")], "-")
	if len(parts) != 4 {
		return "", "", "", false // a name of another program, or of an agentfs that did not sign them
	}
	return base, strings.Join(parts[:3], "-"), kind, true
}

// ownerGone reports whether the process an owner tag names is provably
// not running: another boot, or its pid no longer has that start time.
func (s *session) ownerGone(owner string) bool {
	parts := strings.Split(owner, "-")
	pid, perr := strconv.Atoi(parts[0])
	start, serr := strconv.ParseUint(parts[1], 10, 64)
	if perr != nil || serr != nil || pid <= 0 {
		return false
	}
	if mine := strings.Split(s.owner(), "-"); parts[2] != mine[2] {
		return mine[2] != "" // another boot: nothing of it runs
	}
	return !proctree.Alive(pid, start)
}

// stage writes p's new content to a temp file beside the target, with the
// target's mode and owner, and syncs it.
func (s *session) stage(p *plan) error {
	mode := p.mode
	if mode == 0 {
		mode = defaultFileMode
		if p.cur.exists {
			mode = p.cur.mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		}
	}
	name := s.sideName(p.t.rel, "tmp")
	d, base, err := s.sideOf(p.t, name)
	if err != nil {
		return err
	}
	f, err := d.OpenFile(base, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return osError(err, p.t.given)
	}
	p.tmp = name
	fail := func(err error) error {
		f.Close()
		return osError(err, p.t.given)
	}
	if _, err := f.Write(p.data[:len(p.data)/2]); err != nil {
		return fail(err)
	}
	faultpoint.Hit("agentfs.stage.half")
	if _, err := f.Write(p.data[len(p.data)/2:]); err != nil {
		return fail(err)
	}
	if p.cur.exists && p.cur.uid >= 0 {
		// Keep the owner; only root can give a file away, so an EPERM
		// for anyone else is expected and the new owner is the writer.
		if err := f.Chown(p.cur.uid, p.cur.gid); err != nil && !errors.Is(err, fs.ErrPermission) {
			return fail(err)
		}
	}
	if err := f.Chmod(mode); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return osError(err, p.t.given)
	}
	return nil
}

// commit makes every plan true, or none. New contents are staged first;
// then each existing original gets a hard-link backup beside it and the
// temp file is renamed over it (or the original is renamed away for a
// removal). If anything fails part-way, the renamed originals come back
// from their backups and created files are removed. record says whether to
// add undo history (Undo itself does not).
func (s *session) commit(plans []*plan, record bool) (err error) {
	var jpath string // the change set's journal, once written
	defer func() {
		if err != nil {
			s.rollback(plans)
			// Rolled back: nothing to put back any more.
			_ = dropJournal(jpath)
		}
	}()
	for _, p := range plans {
		if !p.remove {
			if err := s.stage(p); err != nil {
				return err
			}
		}
	}
	faultpoint.Hit("agentfs.staged")
	if s.fs.afterStage != nil {
		if err := s.fs.afterStage(); err != nil {
			return err
		}
	}
	if record {
		for _, p := range plans {
			d, name, err := s.dirOf(p.t)
			if err != nil {
				return err
			}
			h, err := s.fs.recordHistory(d, name, p)
			if err != nil {
				return err
			}
			p.hist = h
		}
	}
	for _, p := range plans {
		if p.cur.exists {
			p.bakName = s.sideName(p.t.rel, "bak")
		}
	}
	if jpath, err = s.writeJournal(plans); err != nil {
		return err
	}
	faultpoint.Hit("agentfs.recorded")
	if s.fs.afterHistory != nil {
		if err := s.fs.afterHistory(); err != nil {
			return err
		}
	}
	for i, p := range plans {
		// Temp, backup and file are siblings: one pinned directory holds
		// all three, and every step goes by base name in it.
		d, name, err := s.dirOf(p.t)
		if err != nil {
			return err
		}
		if err := unchanged(d, name, p); err != nil {
			return err
		}
		if p.cur.exists {
			p.backup = p.bakName
			backup := path.Base(p.backup)
			if p.remove {
				if err := d.Rename(name, backup); err != nil {
					p.backup = ""
					return osError(err, p.t.given)
				}
				p.renamed = true
			} else if err := d.Link(name, backup); err != nil {
				// A file system without hard links: move the original
				// aside instead. Readers may briefly see no file.
				if err := d.Rename(name, backup); err != nil {
					p.backup = ""
					return osError(err, p.t.given)
				}
				p.renamed = true
			}
		}
		switch {
		case !p.remove && !p.cur.exists && jpath != "":
			// A new file of a journaled set is linked, its staged name kept
			// until the journal goes: the one proof that the file at the
			// name is this set's, which putting back needs before it
			// removes anything (someone may have made the same file since).
			// The link also refuses a name someone made meanwhile.
			if err := d.Link(path.Base(p.tmp), name); err != nil {
				if errors.Is(err, fs.ErrExist) {
					return newErr(result.CodeFileChanged, "%s was created by someone else while agentfs was writing it; nothing was written", p.t.given)
				}
				if err := d.Rename(path.Base(p.tmp), name); err != nil {
					return osError(err, p.t.given)
				}
				p.tmp = ""
			}
			p.renamed = true
		case !p.remove:
			if err := d.Rename(path.Base(p.tmp), name); err != nil {
				return osError(err, p.t.given)
			}
			p.tmp = ""
			p.renamed = true
		}
		faultpoint.Hit("agentfs.renamed")
		if s.fs.afterRename != nil {
			if err := s.fs.afterRename(i); err != nil {
				return err
			}
		}
	}
	// The renames are made durable while the backups are still there: if
	// that fails, the rollback still has every earlier version to put
	// back, so a failed commit leaves every file as it was (and its
	// history entry goes with it) rather than some changed and none
	// undoable.
	if err := s.syncDirs(plans); err != nil {
		return err
	}
	// Every rename is durable: the change set is whole, and nothing may
	// put it back from here on.
	if err := dropJournal(jpath); err != nil {
		return err
	}
	for _, p := range plans {
		if p.tmp != "" { // a new file's staged name, kept while journaled
			if d, _, err := s.dirOf(p.t); err == nil {
				_ = d.Remove(path.Base(p.tmp))
			}
			p.tmp = ""
		}
		if p.backup != "" {
			if d, _, err := s.dirOf(p.t); err == nil {
				_ = d.Remove(path.Base(p.backup))
			}
			p.backup = ""
		}
	}
	return nil
}

// rollback restores every file of a failed commit as it was.
func (s *session) rollback(plans []*plan) {
	for i := len(plans) - 1; i >= 0; i-- {
		p := plans[i]
		// Every side file was made in the pinned directory, so it is there.
		d, name, err := s.dirOf(p.t)
		if err == nil && p.renamed {
			if p.backup != "" {
				_ = d.Rename(path.Base(p.backup), name)
				p.backup = ""
			} else if !p.cur.exists {
				_ = d.Remove(name)
			}
		}
		if err == nil && p.backup != "" {
			_ = d.Remove(path.Base(p.backup))
		}
		if err == nil && p.tmp != "" {
			_ = d.Remove(path.Base(p.tmp))
		}
		if p.hist != nil {
			s.fs.dropHistory(p.hist)
		}
	}
	_ = s.syncDirs(plans)
}

// syncDirs fsyncs each directory that had an entry renamed, so the renames
// survive a power loss.
func (s *session) syncDirs(plans []*plan) error {
	if s.fs.failSync != nil {
		if err := s.fs.failSync(); err != nil {
			return osError(err, plans[0].t.given)
		}
	}
	seen := map[string]bool{}
	for _, p := range plans {
		d := path.Dir(p.t.rel)
		if seen[d] {
			continue
		}
		seen[d] = true
		pd, err := s.pinDir(d, p.t.given)
		if err != nil {
			return err
		}
		f, err := pd.Open(".")
		if err != nil {
			return osError(err, s.display(d))
		}
		err = f.Sync()
		f.Close()
		if err != nil && !errors.Is(err, syscall.EINVAL) {
			return osError(err, s.display(d))
		}
	}
	return nil
}

// DiffStats counts the lines a change added and removed.
type DiffStats struct {
	Added   int `json:"added"`
	Removed int `json:"removed"`
}

// Mutation is the report of one file changed by Write, Edit, Insert, Undo or
// Apply. Texts are left out (ContentOmitted) past FS.MaxContent or when the
// content is not text (Binary); the diff stays.
type Mutation struct {
	Path           string       `json:"path"`
	Action         string       `json:"action,omitempty"`  // Apply only: add, update, delete, move
	MoveTo         string       `json:"move_to,omitempty"` // Apply, move only
	Created        bool         `json:"created"`
	Deleted        bool         `json:"deleted,omitempty"`
	Changed        bool         `json:"changed"`
	OriginalFile   string       `json:"original_file"`
	NewFile        string       `json:"new_file"`
	SHA256Before   string       `json:"sha256_before"` // empty when the file did not exist
	SHA256After    string       `json:"sha256_after"`  // empty when the file no longer exists
	Diff           string       `json:"diff"`
	DiffStats      DiffStats    `json:"diff_stats"`
	ContentOmitted bool         `json:"content_omitted,omitempty"`
	Binary         bool         `json:"binary,omitempty"`
	Edits          []EditReport `json:"edits,omitempty"`
}

// report builds the Mutation for a file that went from before to after;
// nil means absent. oldName and newName are the paths for the diff headers.
func (f *FS) report(given, oldName, newName string, before, after []byte, beforeSHA, afterSHA string, existed, exists, knownText bool) *Mutation {
	m := &Mutation{
		Path:    given,
		Created: !existed && exists,
		Deleted: existed && !exists,
		Changed: existed != exists || !bytes.Equal(before, after),
	}
	if existed {
		m.SHA256Before = beforeSHA
	}
	if exists {
		m.SHA256After = afterSHA
	}
	if !existed {
		oldName = "/dev/null"
	}
	if !exists {
		newName = "/dev/null"
	}
	maxContent := f.MaxContent
	if maxContent <= 0 {
		maxContent = DefaultMaxContent
	}
	if knownText || (isText(before) && isText(after)) {
		m.Diff, m.DiffStats.Added, m.DiffStats.Removed = textdiff.Unified(oldName, newName, before, after, diffContext)
		if int64(len(before)) > maxContent || int64(len(after)) > maxContent {
			m.ContentOmitted = true
		} else {
			m.OriginalFile, m.NewFile = string(before), string(after)
		}
	} else {
		m.Binary = true
		m.ContentOmitted = true
		if m.Changed {
			m.Diff = "Binary files " + oldName + " and " + newName + " differ\n"
		}
	}
	return m
}

func isText(b []byte) bool { return !isBinary(b) && validUTF8(b) }

// hashIfBinary reads the head of f: when it shows a binary file, it hashes
// the whole file in one streamed pass and returns its facts (ok); else f is
// rewound for a full read.
func hashIfBinary(f *os.File, fi fs.FileInfo) (current, bool, error) {
	head := make([]byte, binarySniffLen)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF {
		return current{}, false, err
	}
	if !isBinary(head[:n]) {
		_, err := f.Seek(0, io.SeekStart)
		return current{}, false, err
	}
	h := sha256.New()
	h.Write(head[:n])
	rest, err := io.Copy(h, f)
	if err != nil {
		return current{}, false, err
	}
	c := current{exists: true, factsOnly: true, size: int64(n) + rest, mode: fi.Mode(), uid: -1, gid: -1,
		sha: hex.EncodeToString(h.Sum(nil))}
	return c, true, nil
}

// unchanged checks, just before the commit replaces p's file, that it is
// still the file p was planned on: the same inode with the same size and
// modification time, or still absent. The directory lock holds off other
// agentfs processes but not other programs (an editor saving, a formatter):
// one that changed the file since it was read would otherwise lose its
// change to the rename without a word. What it can still miss is a change
// in the moment between this check and the rename.
// sameChange reports whether a and b have the same inode change time
// (true when either is unknown).
func sameChange(a, b fs.FileInfo) bool {
	ca, ok1 := changeTime(a)
	cb, ok2 := changeTime(b)
	return !ok1 || !ok2 || ca == cb
}

func unchanged(d *os.Root, name string, p *plan) error {
	fi, err := d.Lstat(name)
	switch {
	case !p.cur.exists && errors.Is(err, fs.ErrNotExist):
		return nil
	case !p.cur.exists && err == nil:
		return newErr(result.CodeFileChanged, "%s was created by someone else while agentfs was writing it; nothing was written", p.t.given)
	case err != nil:
		return newErr(result.CodeFileChanged, "%s changed while agentfs was writing it (%s); nothing was written", p.t.given, unwrapMessage(err))
	case p.cur.info != nil && (!os.SameFile(fi, p.cur.info) || fi.Size() != p.cur.info.Size() || !fi.ModTime().Equal(p.cur.info.ModTime()) || !sameChange(fi, p.cur.info)):
		return newErr(result.CodeFileChanged, "%s changed while agentfs was writing it; nothing was written", p.t.given).
			With("hint", "read it again and redo the change on what it is now")
	}
	return nil
}
