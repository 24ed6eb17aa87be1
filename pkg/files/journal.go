package files

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/agentplane/agentplane/internal/faultpoint"
)

// A change set of several files is committed by one rename per file, and
// a process killed between two of them (SIGKILL, a power loss) would
// leave some files changed and the others not. Before its first rename
// such a commit writes a journal, in the undo history's directory, that
// names every file's directory, side files and new content; it removes
// the journal (durably) once every rename is durable, before anything
// else. A journal whose owner is gone names a change set cut off in its
// rename phase: the next change made with that undo history puts every
// file of it back as it was (recoverJournals), all or nothing as the
// commit promised. The undo history entries of those files are stale then
// (each file is as it was before the change), and go at the next undo.

// journalDir is where the change sets being committed keep their
// journals.
const journalDir = ".journal"

// journal is what a commit of several files records before its renames.
type journal struct {
	Owner   string         `json:"owner"`
	Entries []journalEntry `json:"entries"`
	// Dirs are the directories the change set made for its new files,
	// absolute, parents first: put back, they go again (when empty).
	Dirs []string `json:"dirs,omitempty"`
}

// journalEntry is one file of the change set.
type journalEntry struct {
	Dir     string `json:"dir"` // the file's directory, absolute, its links resolved
	Dev     uint64 `json:"dev"` // and its identity, checked before anything is put back
	Ino     uint64 `json:"ino"`
	Name    string `json:"name"`
	Tmp     string `json:"tmp,omitempty"`     // the staged new content ("" for a removal)
	TmpDev  uint64 `json:"tmp_dev,omitempty"` // and its inode: the file, once renamed
	TmpIno  uint64 `json:"tmp_ino,omitempty"`
	Backup  string `json:"backup,omitempty"` // the original's side name ("" when the file is new)
	Existed bool   `json:"existed"`
	NewSHA  string `json:"new_sha256,omitempty"` // the new content's hash ("" for a removal)
}

// maxJournal bounds a journal's size as read back.
const maxJournal = 4 << 20

// writeJournal records plans before their renames and returns the
// journal's path ("" when there is no undo history to keep it in, or one
// file only, whose single rename is all or nothing already).
func (s *session) writeJournal(plans []*plan) (string, error) {
	if len(plans) < 2 || s.fs.HistoryDir == "" || s.fs.DryRun {
		return "", nil
	}
	j := journal{Owner: s.owner()}
	for _, p := range plans {
		d, name, err := s.dirOf(p.t)
		if err != nil {
			return "", err
		}
		fi, err := d.Stat(".")
		if err != nil {
			return "", osError(err, p.t.given)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return "", nil // no identities to check against: no journal
		}
		e := journalEntry{Dir: filepath.Dir(p.t.abs), Dev: uint64(st.Dev), Ino: st.Ino, Name: name, Existed: p.cur.exists}
		if p.bakName != "" {
			e.Backup = path.Base(p.bakName)
		}
		if !p.remove {
			e.Tmp, e.NewSHA = path.Base(p.tmp), p.newSHA()
			if fi, err := d.Lstat(e.Tmp); err == nil {
				if ts, ok := fi.Sys().(*syscall.Stat_t); ok {
					e.TmpDev, e.TmpIno = uint64(ts.Dev), ts.Ino
				}
			}
		}
		j.Entries = append(j.Entries, e)
	}
	for _, d := range s.madeDirs {
		j.Dirs = append(j.Dirs, filepath.Join(s.rootReal, filepath.FromSlash(d)))
	}
	b, err := json.Marshal(j)
	if err != nil {
		return "", historyError(err)
	}
	dir := filepath.Join(s.fs.HistoryDir, journalDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", historyError(err)
	}
	p := filepath.Join(dir, s.owner()+"-"+randomSuffix()+".json")
	if err := writeAtomic(dir, p, b); err != nil {
		return "", historyError(err)
	}
	return p, nil
}

// dropJournal removes a journal once its change set needs no putting
// back (every rename durable, or rolled back), and makes the removal
// durable: a journal found after a power loss would put back a change
// set that was whole.
func dropJournal(p string) error {
	if p == "" {
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return historyError(err)
	}
	return syncDir(filepath.Dir(p))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return historyError(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return historyError(err)
	}
	return nil
}

// recoverJournals puts back the change sets that killed agentfs processes
// cut off in their rename phase, from the journals in the undo history
// whose owners are gone, and returns the files it put back. It runs before
// a change takes any lock of its own, and takes each change set's
// directory locks in order. A call under a rule (a root, deny rules,
// hidden paths, the lock's floor) puts back only a change set whose every
// file it may change itself, and leaves the others to a call that may.
func (s *session) recoverJournals() []string {
	if s.fs.HistoryDir == "" || s.fs.DryRun {
		return nil
	}
	dir := filepath.Join(s.fs.HistoryDir, journalDir)
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, de := range names {
		name := de.Name()
		if !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") || !de.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, name)
		j, ok := readJournal(p)
		if !ok || !s.ownerGone(j.Owner) || !s.mayPutBack(j) {
			continue
		}
		out = append(out, s.putBack(p, j)...)
	}
	return out
}

// readJournal reads the journal at p: a regular file of bounded size
// (anything else in the directory, a FIFO, a link to a device, is not
// one), whose every side name is one its owner signed for that file.
func readJournal(p string) (journal, bool) {
	var j journal
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return j, false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() > maxJournal {
		return j, false
	}
	b, err := io.ReadAll(io.LimitReader(f, maxJournal+1))
	if err != nil || len(b) > maxJournal || json.Unmarshal(b, &j) != nil || len(strings.Split(j.Owner, "-")) != 3 || len(j.Entries) == 0 {
		return j, false
	}
	signed := func(side, file, kind string) bool {
		if side == "" {
			return true
		}
		base, owner, k, ok := parseSideName(side)
		want := file
		if len(want) > maxSideBase {
			want = want[:maxSideBase]
		}
		return ok && k == kind && owner == j.Owner && base == want && !strings.Contains(side, "/")
	}
	for _, e := range j.Entries {
		if e.Name == "" || strings.Contains(e.Name, "/") || !filepath.IsAbs(e.Dir) || !signed(e.Tmp, e.Name, "tmp") || !signed(e.Backup, e.Name, "bak") {
			return j, false
		}
	}
	return j, true
}

// rel is abs relative to the session's root, or false outside it.
func (s *session) rel(abs string) (string, bool) {
	r, ok := within(s.rootReal, abs)
	if !ok {
		return "", false
	}
	if r == "" {
		r = "."
	}
	return r, true
}

// mayPutBack reports whether this call's rules let it change every file
// of j (its side files are agentfs's own, made by the commit).
func (s *session) mayPutBack(j journal) bool {
	for _, e := range j.Entries {
		rel, ok := s.rel(filepath.Join(e.Dir, e.Name))
		if !ok {
			return false
		}
		if _, deny := s.denied(filepath.ToSlash(rel)); deny {
			return false
		}
		if s.fs.MayChange != nil && s.fs.MayChange(filepath.Join(e.Dir, e.Name)) != nil {
			return false
		}
	}
	return true
}

// putBack rolls back the change set of the journal at p (j), under the
// locks of its directories, and removes the journal; it returns the files
// it put back. Every directory is opened as the session opens any (no
// symbolic link followed on the way) and must be the one the journal
// recorded: if one is gone or another now, nothing is put back and the
// journal stays (a directory renamed away and back, or its files put back
// by hand, are the user's to finish).
func (s *session) putBack(p string, j journal) []string {
	var dirs []string
	for _, e := range j.Entries {
		if !slices.Contains(dirs, e.Dir) {
			dirs = append(dirs, e.Dir)
		}
	}
	slices.Sort(dirs)
	open := map[string]*os.Root{}
	for _, d := range dirs {
		rel, ok := s.rel(d)
		if !ok {
			return nil
		}
		r, err := s.pinDir(filepath.ToSlash(rel), d)
		if err != nil {
			return nil
		}
		f, err := r.Open(".")
		if err != nil {
			return nil
		}
		defer f.Close() // drops the flock
		if flock(f) != nil {
			return nil
		}
		open[d] = r
	}
	for _, e := range j.Entries {
		if fi, err := open[e.Dir].Stat("."); err != nil || !sameDir(fi, e) {
			return nil
		}
	}
	if _, err := os.Lstat(p); err != nil {
		return nil // another agentfs put it back meanwhile
	}
	var done []string
	for i := len(j.Entries) - 1; i >= 0; i-- {
		e := j.Entries[i]
		if putBackOne(open[e.Dir], e) {
			done = append(done, filepath.Join(e.Dir, e.Name))
		}
		faultpoint.Hit("agentfs.putback")
	}
	for i := len(j.Dirs) - 1; i >= 0; i-- {
		if rel, ok := s.rel(filepath.Dir(j.Dirs[i])); ok {
			if parent, err := s.pinDir(filepath.ToSlash(rel), j.Dirs[i]); err == nil {
				_ = parent.Remove(filepath.Base(j.Dirs[i])) // only an empty one goes
			}
		}
	}
	for _, r := range open {
		if d, err := r.Open("."); err == nil {
			_ = d.Sync()
			d.Close()
		}
	}
	_ = dropJournal(p)
	return done
}

func sameDir(fi fs.FileInfo, e journalEntry) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Dev) == e.Dev && st.Ino == e.Ino
}

func sameInode(fi fs.FileInfo, dev, ino uint64) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && ino != 0 && uint64(st.Dev) == dev && st.Ino == ino
}

// putBackOne puts one file of a cut-off change set back as it was, where
// it provably is still what the change set made of it, and reports
// whether it did: the file at its name is the staged inode with the new
// content, or (a new file) the same inode as the staged file, which a
// new file's commit links rather than renames until the journal goes. A
// file someone changed, or made, since is left as it is (and a backup of
// the original stays beside it).
func putBackOne(r *os.Root, e journalEntry) bool {
	cur, curErr := r.Lstat(e.Name)
	ours := func() bool {
		if e.NewSHA == "" {
			return errors.Is(curErr, fs.ErrNotExist) // a removal: the name is gone
		}
		if curErr != nil || !cur.Mode().IsRegular() || !sameInode(cur, e.TmpDev, e.TmpIno) {
			return false
		}
		b, err := r.ReadFile(e.Name)
		return err == nil && sha(b) == e.NewSHA
	}
	put := false
	switch {
	case e.Backup != "":
		if bak, err := r.Lstat(e.Backup); err == nil {
			switch {
			case curErr == nil && os.SameFile(bak, cur):
				// The backup link was made, the rename was not: the file
				// is the original still.
				_ = r.Remove(e.Backup)
			case ours():
				put = r.Rename(e.Backup, e.Name) == nil
			}
		}
	case !e.Existed && e.Tmp != "":
		if tmp, err := r.Lstat(e.Tmp); err == nil && curErr == nil && os.SameFile(tmp, cur) && ours() {
			put = r.Remove(e.Name) == nil // made by the change set
		}
	}
	if e.Tmp != "" {
		_ = r.Remove(e.Tmp)
	}
	return put
}
