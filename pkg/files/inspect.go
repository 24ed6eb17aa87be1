package files

import (
	"fmt"
	"io/fs"
	"path"
	"sort"

	"github.com/agentplane/agentplane/pkg/result"
)

// StatResult describes one path. A symlink is described itself (Kind
// "symlink", LinkTarget); SHA256 and TotalLines are given for regular files
// within MaxFileSize.
type StatResult struct {
	Path       string `json:"path"`
	Kind       string `json:"kind"` // file, directory, symlink, fifo, socket, device, other
	Size       int64  `json:"size"`
	Mode       string `json:"mode"` // octal permission bits, "0644"
	ModTime    string `json:"mod_time"`
	LinkTarget string `json:"link_target,omitempty"`
	SHA256     string `json:"sha256,omitempty"`
	TotalLines int    `json:"total_lines,omitempty"`
	Binary     bool   `json:"binary,omitempty"`
}

// Stat describes path without following a final symlink.
func (f *FS) Stat(p string) (*StatResult, error) {
	s, err := f.open()
	if err != nil {
		return nil, err
	}
	defer s.close()
	t, err := s.resolve(p, false)
	if err != nil {
		return nil, err
	}
	d, name, err := s.dirOf(t)
	if err != nil {
		return nil, err
	}
	fi, err := d.Lstat(name)
	if err != nil {
		return nil, osError(err, p)
	}
	r := &StatResult{
		Path:    p,
		Kind:    kindOf(fi.Mode()),
		Size:    fi.Size(),
		Mode:    modeString(fi.Mode()),
		ModTime: fi.ModTime().UTC().Format(timeFormat),
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		r.LinkTarget, _ = d.Readlink(name)
	case fi.Mode().IsRegular() && s.checkSize(t, fi.Size()) == nil:
		cur, err := s.readFacts(t, nil)
		if err != nil {
			return nil, err
		}
		r.SHA256 = cur.sha
		if st := cur.streamed; st != nil && st.text {
			r.TotalLines = st.lines
		} else if !cur.factsOnly && st == nil && isText(cur.content) {
			r.TotalLines = countLines(cur.content)
		} else {
			r.Binary = true
		}
	}
	return r, nil
}

// timeFormat is RFC 3339 UTC with milliseconds, the contract's timestamp.
const timeFormat = "2006-01-02T15:04:05.000Z"

func modeString(m fs.FileMode) string {
	bits := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		bits |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		bits |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		bits |= 0o1000
	}
	return fmt.Sprintf("%04o", bits)
}

// ListOptions tunes List.
type ListOptions struct {
	Depth      int    // levels to descend; 0 or 1 lists only the directory's entries
	Glob       string // keep entries whose path (relative to the directory) matches; see MatchGlob
	MaxEntries int    // stop after this many entries (Truncated); 0 means 10000
}

// DefaultMaxEntries bounds a listing, so a careless list of a huge tree
// cannot produce an unbounded result.
const DefaultMaxEntries = 10000

// Entry is one item of a listing.
type Entry struct {
	Path       string `json:"path"` // relative to the listed directory, slash-separated
	Kind       string `json:"kind"`
	Size       int64  `json:"size"`
	Mode       string `json:"mode"`
	ModTime    string `json:"mod_time"`
	LinkTarget string `json:"link_target,omitempty"`
}

// ListResult is a directory listing in lexical order, depth first.
type ListResult struct {
	Path      string  `json:"path"`
	Entries   []Entry `json:"entries"`
	Truncated bool    `json:"truncated"`
}

// List lists a directory to the given depth. Symlinks are listed, not
// followed; denied paths are left out and not descended into.
func (f *FS) List(dir string, opt ListOptions) (*ListResult, error) {
	s, err := f.open()
	if err != nil {
		return nil, err
	}
	defer s.close()
	t, err := s.resolve(dir, true)
	if err != nil {
		return nil, err
	}
	d, name, err := s.dirOf(t)
	if err != nil {
		return nil, err
	}
	fi, err := d.Lstat(name)
	if err != nil {
		return nil, osError(err, dir)
	}
	if !fi.IsDir() {
		return nil, newErr(result.CodeNotRegularFile, "%s is not a directory", dir)
	}
	depth := max(opt.Depth, 1)
	limit := opt.MaxEntries
	if limit <= 0 {
		limit = DefaultMaxEntries
	}
	r := &ListResult{Path: dir, Entries: []Entry{}}
	var walk func(rel, shown string, level int) error
	walk = func(rel, shown string, level int) error {
		pd, err := s.pinDir(rel, dir)
		if err != nil {
			return err
		}
		d, err := pd.Open(".")
		if err != nil {
			return osError(err, dir)
		}
		des, err := d.ReadDir(-1)
		d.Close()
		if err != nil {
			return osError(err, dir)
		}
		sortDirEntries(des)
		for _, de := range des {
			childRel := path.Join(rel, de.Name())
			if _, deny := s.denied(childRel); deny {
				continue
			}
			childShown := path.Join(shown, de.Name())
			info, err := de.Info()
			if err != nil {
				continue // removed while listing
			}
			if opt.Glob == "" || MatchGlob(opt.Glob, childShown) {
				if len(r.Entries) >= limit {
					r.Truncated = true
					return nil
				}
				e := Entry{
					Path:    childShown,
					Kind:    kindOf(info.Mode()),
					Size:    info.Size(),
					Mode:    modeString(info.Mode()),
					ModTime: info.ModTime().UTC().Format(timeFormat),
				}
				if info.Mode()&fs.ModeSymlink != 0 {
					e.LinkTarget, _ = pd.Readlink(de.Name())
				}
				r.Entries = append(r.Entries, e)
			}
			if de.IsDir() && level < depth {
				if err := walk(childRel, childShown, level+1); err != nil {
					return err
				}
				if r.Truncated {
					return nil
				}
			}
		}
		return nil
	}
	if err := walk(t.rel, "", 1); err != nil {
		return nil, err
	}
	return r, nil
}

func sortDirEntries(des []fs.DirEntry) {
	// ReadDir on a File does not sort; a stable order makes results
	// reproducible.
	sort.Slice(des, func(i, j int) bool { return des[i].Name() < des[j].Name() })
}
