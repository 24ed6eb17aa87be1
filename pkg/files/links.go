package files

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentplane/agentplane/pkg/result"
)

// maxLinkScan bounds the walk of the root that looks for the other names
// of a hard-linked file: past it the names count as not shown.
const maxLinkScan = 200000

// errScanDone ends the walk early.
var errScanDone = errors.New("scan done")

// checkLinks enforces the hard-link rule on the file just opened for t
// (f is that open file and fi its own stat, so no name swapped in since is
// consulted): under a root or a deny rule, a regular file with more than
// one name is read or changed only when every other name of it is shown
// to be inside the root and outside every deny rule. A hard link is the
// same file under another name, so the rules that govern paths would
// otherwise be crossed by a name an attacker made: a link inside the root
// to a denied file (or to one outside the root) would read and edit it.
// The other names are looked for by walking the root (bounded by
// maxLinkScan) for the same device and inode; without a root (deny rules
// alone) the whole file system would have to be walked, so such a file is
// refused outright. The refusal is path_denied, with the link count.
//
// A name not found by the walk may be another agentfs's own, made for a
// commit under the directory's lock (the backup side file, or the undo
// history's link to the inode it replaces, outside the root): a session
// that does not hold that lock waits once for it (awaitWriters) and counts
// again.
//
// The count is trusted only when it held for the whole walk: a name may
// come or go meanwhile (another agentfs's commit links the file it
// replaces to a backup side file and removes it after the rename), so
// when the open file's count differs after the walk, the walk is made
// again with the new count, up to linkScanTries times; a count still
// moving then is refused like one that could not be shown.
func (s *session) checkLinks(t target, f *os.File, fi fs.FileInfo) error {
	waited := false
	for try := 1; ; try++ {
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || uint64(st.Nlink) <= 1 || !s.confined && len(s.fs.Deny) == 0 {
			return nil
		}
		nlink := uint64(st.Nlink)
		refuse := func(why string, a ...any) error {
			return newErr(result.CodePathDenied, "%s has %d hard links: "+why, append([]any{t.given, nlink}, a...)...).
				With("hard_links", nlink)
		}
		if !s.confined {
			return refuse("without --root, agentfs cannot show that the other names are not denied")
		}
		if s.fs.beforeLinkScan != nil {
			s.fs.beforeLinkScan()
		}
		found, deniedName, rule, err := s.scanLinks(st, s.ownHistory(t))
		switch {
		case err != nil:
			return osError(err, t.given)
		case deniedName != "":
			return refuse("another name of it, %s, is denied by the rule %s", s.display(deniedName), rule)
		}
		// The file's own undo histories outside the root (the call's,
		// and those of the other state directories a call could mean,
		// which a read, opening none, knows only so): an entry's saved
		// content linked to the inode (one whose change was cut off
		// before its rename, so the file still is that content) is
		// agentfs's own name of it, not another file's.
		base := filepath.Base(s.fs.historyDir(t.abs))
		for _, h := range s.histories {
			if _, inRoot := within(s.rootReal, h); !inRoot {
				found += historyLinks(filepath.Join(h, base), st)
			}
		}
		after, err := f.Stat()
		if err != nil {
			return osError(err, t.given)
		}
		if a, ok := after.Sys().(*syscall.Stat_t); ok && uint64(a.Nlink) != nlink && try < linkScanTries {
			fi = after
			continue
		}
		if found < nlink && !waited {
			// The name not found may be another agentfs's own, made
			// for a commit under the directory's lock: the backup side
			// file, or the undo history's link to the inode it replaces,
			// which lives in the state directory, outside the root. An
			// unlocked read waits for that commit to end and counts
			// again; a name that stays is refused below.
			waited = true
			if s.awaitWriters(path.Dir(t.rel), t.given) {
				settled, err := f.Stat()
				if err != nil {
					return osError(err, t.given)
				}
				if linkCount(settled) != linkCount(after) {
					fi = settled
					try--
					continue
				}
			}
		}
		if found < nlink {
			return refuse("%d of its names are outside the root or could not be found in it", nlink-found)
		}
		return nil
	}
}

// ownHistory is the undo history directory of t's file, symlinks resolved
// as inHistory sees it, or "" without history.
func (s *session) ownHistory(t target) string {
	if s.history == "" {
		return ""
	}
	return filepath.Join(s.history, filepath.Base(s.fs.historyDir(t.abs)))
}

// historyLinks counts the saved contents in the history directory dir
// that are the inode st describes.
func historyLinks(dir string, st *syscall.Stat_t) uint64 {
	des, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, de := range des {
		if !strings.HasSuffix(de.Name(), ".data") || !de.Type().IsRegular() {
			continue
		}
		var o syscall.Stat_t
		if syscall.Lstat(filepath.Join(dir, de.Name()), &o) == nil && o.Dev == st.Dev && o.Ino == st.Ino {
			n++
		}
	}
	return n
}

// linkScanTries bounds the walks of checkLinks while the link count moves.
const linkScanTries = 4

// scanLinks walks the root for the names of the inode st describes: how
// many it found, and the first that is denied with its rule.
//
// A name in own, the undo history of the file being checked, is counted
// and not denied: it is the link an agentfs committing that file makes to
// the inode it replaces, which still holds the file's own content.
func (s *session) scanLinks(st *syscall.Stat_t, own string) (found uint64, deniedName, rule string, err error) {
	nlink := uint64(st.Nlink)
	seen := 0
	err = fs.WalkDir(s.root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable directory: its names stay unshown
		}
		if seen++; seen > maxLinkScan {
			return errScanDone
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		o, ok := info.Sys().(*syscall.Stat_t)
		if !ok || o.Dev != st.Dev || o.Ino != st.Ino {
			return nil
		}
		found++
		_, mine := within(own, filepath.Join(s.rootReal, filepath.FromSlash(name)))
		if g, deny := s.denied(name); deny && !(own != "" && mine) {
			deniedName, rule = name, g
			return errScanDone
		}
		if found >= nlink {
			return errScanDone
		}
		return nil
	})
	if errors.Is(err, errScanDone) {
		err = nil
	}
	return found, deniedName, rule, err
}

// linkCount is fi's number of names, 0 when unknown.
func linkCount(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 0
}
