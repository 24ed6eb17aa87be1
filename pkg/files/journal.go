package files

import (
	"encoding/json"
	"errors"
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
}

// journalEntry is one file of the change set.
type journalEntry struct {
	Dir     string `json:"dir"` // the file's directory, absolute
	Dev     uint64 `json:"dev"` // and its identity, checked before anything is put back
	Ino     uint64 `json:"ino"`
	Name    string `json:"name"`
	Tmp     string `json:"tmp,omitempty"`    // the staged new content ("" for a removal)
	Backup  string `json:"backup,omitempty"` // the original's side name ("" when the file is new)
	Existed bool   `json:"existed"`
	NewSHA  string `json:"new_sha256,omitempty"` // the new content's hash ("" for a removal)
}

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
		}
		j.Entries = append(j.Entries, e)
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
// whose owners are gone. It runs before a change takes any lock of its
// own, and takes each change set's directory locks in order. A call under
// a rule (a root, deny rules, hidden paths, the lock's floor) puts back
// only a change set whose every file it may change itself, and leaves the
// others to a call that may.
func (s *session) recoverJournals() {
	if s.fs.HistoryDir == "" || s.fs.DryRun {
		return
	}
	dir := filepath.Join(s.fs.HistoryDir, journalDir)
	names, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, de := range names {
		name := de.Name()
		if !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
			continue
		}
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var j journal
		if json.Unmarshal(b, &j) != nil || len(strings.Split(j.Owner, "-")) != 3 || !s.ownerGone(j.Owner) || !s.mayPutBack(j) {
			continue
		}
		s.putBack(p, j)
	}
}

// mayPutBack reports whether this call's rules let it change every file
// of j and its side files.
func (s *session) mayPutBack(j journal) bool {
	for _, e := range j.Entries {
		for _, name := range []string{e.Name, e.Tmp, e.Backup} {
			if name == "" {
				continue
			}
			abs := filepath.Join(e.Dir, name)
			rel, ok := within(s.rootReal, abs)
			if !ok {
				return false
			}
			if _, deny := s.denied(filepath.ToSlash(rel)); deny {
				return false
			}
			if s.fs.MayChange != nil && s.fs.MayChange(abs) != nil {
				return false
			}
		}
	}
	return true
}

// putBack rolls back the change set of the journal at p (j), under the
// locks of its directories, and removes the journal.
func (s *session) putBack(p string, j journal) {
	var dirs []string
	for _, e := range j.Entries {
		if !slices.Contains(dirs, e.Dir) {
			dirs = append(dirs, e.Dir)
		}
	}
	slices.Sort(dirs)
	open := map[string]*os.Root{}
	defer func() {
		for _, r := range open {
			r.Close()
		}
	}()
	for _, d := range dirs {
		r, err := os.OpenRoot(d)
		if err != nil {
			continue // gone: nothing of it to put back
		}
		f, err := r.Open(".")
		if err != nil {
			r.Close()
			continue
		}
		defer f.Close() // drops the flock
		if flock(f) != nil {
			r.Close()
			return
		}
		open[d] = r
	}
	if _, err := os.Stat(p); err != nil {
		return // another agentfs put it back meanwhile
	}
	for i := len(j.Entries) - 1; i >= 0; i-- {
		e := j.Entries[i]
		r := open[e.Dir]
		if r == nil {
			continue
		}
		if fi, err := r.Stat("."); err != nil || !sameDir(fi, e) {
			continue // another directory at that path now: not ours to change
		}
		putBackOne(r, e)
		faultpoint.Hit("agentfs.putback")
	}
	for _, r := range open {
		if d, err := r.Open("."); err == nil {
			_ = d.Sync()
			d.Close()
		}
	}
	_ = dropJournal(p)
}

func sameDir(fi fs.FileInfo, e journalEntry) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Dev) == e.Dev && st.Ino == e.Ino
}

// putBackOne puts one file of a cut-off change set back as it was, where
// it is still what the change set made of it: a file someone changed
// since is left as it is (and a backup of its original stays beside it).
func putBackOne(r *os.Root, e journalEntry) {
	cur, curErr := r.Lstat(e.Name)
	ours := func() bool { // the file is the change set's new content
		if e.NewSHA == "" {
			return errors.Is(curErr, fs.ErrNotExist) // a removal: the name is gone
		}
		if curErr != nil || !cur.Mode().IsRegular() {
			return false
		}
		b, err := r.ReadFile(e.Name)
		return err == nil && sha(b) == e.NewSHA
	}
	if e.Backup != "" {
		if bak, err := r.Lstat(e.Backup); err == nil {
			switch {
			case curErr == nil && os.SameFile(bak, cur):
				// The backup link was made, the rename was not: the file
				// is the original still.
				_ = r.Remove(e.Backup)
			case ours():
				_ = r.Rename(e.Backup, e.Name)
			}
		}
	} else if !e.Existed && e.Tmp != "" {
		if _, err := r.Lstat(e.Tmp); errors.Is(err, fs.ErrNotExist) && ours() {
			_ = r.Remove(e.Name) // created by the change set
		}
	}
	if e.Tmp != "" {
		_ = r.Remove(e.Tmp)
	}
}
