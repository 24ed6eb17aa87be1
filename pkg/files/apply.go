package files

import (
	"bytes"
	"io/fs"

	"github.com/agentplane/agentplane/pkg/result"
)

// Actions of a Change.
const (
	ActionAdd    = "add"
	ActionUpdate = "update"
	ActionDelete = "delete"
	ActionMove   = "move"
)

// Change is one file of a change set for Apply.
type Change struct {
	Action string // ActionAdd, ActionUpdate, ActionDelete or ActionMove
	Path   string
	MoveTo string // ActionMove: the new path, which must not exist

	// NewContent is the content after the change, for add and update; for
	// move, nil keeps the content.
	NewContent []byte
	// Transform, when set (update, move), computes the new content from the
	// current one while the file is locked, so a patch's hunks are checked
	// against exactly what gets replaced. It takes precedence over
	// NewContent; its error aborts the whole change set unchanged.
	Transform func(old []byte) ([]byte, error)
	// ExpectSHA256, when set, must be the current content's hash
	// (update, delete, move), else file_changed.
	ExpectSHA256 string
	// Mode is the permission of an added file; 0 means 0644. Updated and
	// moved files keep theirs.
	Mode fs.FileMode
}

// ApplyOptions tunes Apply.
type ApplyOptions struct {
	DryRun bool // check and report everything, write nothing
}

// Apply commits a multi-file change set: every file changes, or none does.
// All files are read and every change computed before anything is written;
// the commit stages every new content first and rolls back renames done
// before a failure (see commit). It returns one Mutation per Change, in
// order; a move is reported once, with Path the old name and MoveTo the new.
func (f *FS) Apply(changes []Change, opt ApplyOptions) (_ []*Mutation, retErr error) {
	if len(changes) == 0 {
		return nil, invalid("no changes given")
	}
	s, err := f.open()
	if err != nil {
		return nil, err
	}
	defer s.close()
	f.Recovered = append(f.Recovered, s.recoverJournals()...)
	defer func() { retErr = f.withRecovered(retErr) }()

	type item struct {
		c        Change
		src, dst target // dst only for moves
	}
	items := make([]item, len(changes))
	var all []target
	seen := map[string]string{}
	claim := func(t target) error {
		if prev, ok := seen[t.rel]; ok {
			return invalid("%s and %s name the same file; a change set may touch each file once", prev, t.given)
		}
		seen[t.rel] = t.given
		return nil
	}
	var creating []target
	for i, c := range changes {
		switch c.Action {
		case ActionAdd, ActionUpdate, ActionDelete, ActionMove:
		default:
			return nil, invalid("change %d: unknown action %q", i, c.Action)
		}
		// A delete or a move takes away the name it is given: a final
		// symlink is not followed, so that the link is what the read
		// below finds (and refuses), never its target taken away in its
		// place while the link stays.
		removes := c.Action == ActionDelete || c.Action == ActionMove
		t, err := s.resolve(c.Path, !removes)
		if err != nil {
			return nil, err
		}
		if t.rel == "." {
			return nil, newErr(result.CodeIsDirectory, "%s is a directory", c.Path)
		}
		if err := s.mayChange(t); err != nil {
			return nil, err
		}
		if err := claim(t); err != nil {
			return nil, err
		}
		items[i] = item{c: c, src: t}
		all = append(all, t)
		if c.Action == ActionAdd {
			creating = append(creating, t)
		}
		if c.Action == ActionMove {
			if c.MoveTo == "" {
				return nil, invalid("change %d: move without a destination", i)
			}
			d, err := s.resolve(c.MoveTo, true)
			if err != nil {
				return nil, err
			}
			if d.rel == "." {
				return nil, newErr(result.CodeIsDirectory, "%s is a directory", c.MoveTo)
			}
			if err := s.mayChange(d); err != nil {
				return nil, err
			}
			if err := claim(d); err != nil {
				return nil, err
			}
			items[i].dst = d
			all = append(all, d)
			creating = append(creating, d)
		}
	}

	dryRun := opt.DryRun || f.DryRun
	if !dryRun {
		dirs, err := s.prepareDirs(creating, false)
		if err != nil {
			s.removeDirs(dirs)
			return nil, err
		}
		s.madeDirs = dirs
		unlock, err := s.lockDirs(all)
		if err != nil {
			s.removeDirs(dirs)
			return nil, err
		}
		defer unlock()
		defer func() {
			if retErr != nil {
				s.removeDirs(dirs)
			}
		}()
	}

	var plans []*plan
	reports := make([]*Mutation, len(items))
	for i, it := range items {
		c := it.c
		cur, err := s.readCurrent(it.src)
		if err != nil {
			return nil, err
		}
		if c.Action == ActionAdd {
			if cur.exists {
				return nil, newErr(result.CodeFileExists, "%s already exists", c.Path)
			}
		} else {
			if !cur.exists {
				return nil, newErr(result.CodeFileNotFound, "%s does not exist", c.Path)
			}
			if err := checkExpect(c.Path, cur, c.ExpectSHA256); err != nil {
				return nil, err
			}
		}
		data := c.NewContent
		if c.Action == ActionMove && data == nil && c.Transform == nil {
			data = cur.content
		}
		if c.Transform != nil && c.Action != ActionDelete {
			data, err = c.Transform(cur.content)
			if err != nil {
				return nil, err
			}
		}
		switch c.Action {
		case ActionAdd, ActionUpdate:
			p := &plan{t: it.src, cur: cur, data: data, mode: c.Mode}
			if c.Action == ActionUpdate {
				p.mode = 0
			}
			p.unchanged = cur.exists && bytes.Equal(cur.content, data)
			if !p.unchanged {
				plans = append(plans, p)
			}
			reports[i] = f.reportPlan(p, c.Path, c.Path)
		case ActionDelete:
			p := &plan{t: it.src, cur: cur, remove: true}
			plans = append(plans, p)
			reports[i] = f.reportPlan(p, c.Path, c.Path)
		case ActionMove:
			dcur, err := s.readCurrent(it.dst)
			if err != nil {
				return nil, err
			}
			if dcur.exists {
				return nil, newErr(result.CodeFileExists, "%s already exists", c.MoveTo)
			}
			from := &plan{t: it.src, cur: cur, remove: true}
			to := &plan{t: it.dst, cur: dcur, data: data, mode: cur.mode.Perm()}
			plans = append(plans, from, to)
			m := f.report(c.Path, c.Path, c.MoveTo, cur.content, data, cur.sha, to.newSHA(), true, true, false)
			m.MoveTo = c.MoveTo
			m.Changed = true
			reports[i] = m
		}
		reports[i].Action = c.Action
	}
	if dryRun {
		return reports, nil
	}
	if err := s.commit(plans, true); err != nil {
		return nil, err
	}
	for _, p := range plans {
		if p.hist != nil {
			f.pruneHistory(p.hist.dir)
		}
	}
	return reports, nil
}
