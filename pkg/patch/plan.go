package patch

import (
	"errors"
	"io/fs"

	"github.com/agentplane/agentplane/pkg/result"
)

// Change is the planned effect of a patch on one file. Committing every
// Change of a plan turns the files as read into the files the patch asks for.
type Change struct {
	// Path is the file changed; for a move, the file moved away.
	Path   string
	Action Action
	// MoveTo is the destination of a move.
	MoveTo string
	// OldContent is the content as read: nil for an add. A committer can
	// compare it with the disk to refuse a file that changed meanwhile.
	OldContent []byte
	// NewContent is the content to write (at MoveTo for a move): nil for a
	// delete.
	NewContent []byte
	// MoveToOldContent is the content a move overwrites at MoveTo, nil when
	// MoveTo did not exist.
	MoveToOldContent []byte
	// Match is how loosely the patch's context had to be matched:
	// "exact", "trailing_whitespace", "whitespace" or "punctuation". A
	// loose match is worth telling the agent about.
	Match string
}

// fileState is one path as the plan sees it: as first read, and as the
// operations so far leave it.
type fileState struct {
	origExists bool
	orig       []byte
	exists     bool
	content    []byte
	loosest    matchLevel // of the hunks that produced content
}

// planner applies operations to an in-memory overlay of the files, so that
// a patch touching one file twice (models do write two Update sections for
// one file) behaves as if applied in sequence, yet nothing is written.
type planner struct {
	read   func(string) ([]byte, error)
	format Format
	files  map[string]*fileState
	order  []string          // paths in the order first touched
	moved  map[string]string // current location → original source of a move
}

// Plan checks every hunk of every file of p against the contents read returns
// and gives back the complete change set, one Change per file touched, in the
// order the patch first touches them. read returns a file's content, or an
// error satisfying errors.Is(err, fs.ErrNotExist) when it is absent; any
// other error (a *result.Error such as is_directory, or an I/O error) stops
// the plan.
//
// Plan is all or nothing: on error it returns no changes. Errors are
// *result.Error: patch_failed (Details "path", "hunk" 1-based, "context"),
// file_not_found, file_exists, or what read returned.
//
// An agent-format Add File over an existing file, and a move onto one,
// replace it (the reference tool does so); an add over an existing file is
// therefore reported as an update. A unified diff creating or renaming onto
// an existing file is refused with file_exists, as git apply does.
func Plan(p *Patch, read func(path string) ([]byte, error)) ([]Change, error) {
	if p == nil || len(p.Files) == 0 {
		return nil, result.Errorf(result.CodePatchParse, "the patch contains no file operations")
	}
	pl := &planner{read: read, format: p.Format, files: map[string]*fileState{}, moved: map[string]string{}}
	for i := range p.Files {
		if err := pl.apply(&p.Files[i]); err != nil {
			return nil, err
		}
	}
	return pl.changes(), nil
}

// state returns the overlay entry for path, reading it on first use.
func (pl *planner) state(path string) (*fileState, error) {
	if st, ok := pl.files[path]; ok {
		return st, nil
	}
	b, err := pl.read(path)
	st := &fileState{}
	switch {
	case err == nil:
		if b == nil {
			b = []byte{}
		}
		st.origExists, st.orig, st.exists, st.content = true, b, true, b
	case errors.Is(err, fs.ErrNotExist):
	default:
		var re *result.Error
		if errors.As(err, &re) {
			return nil, err
		}
		return nil, result.Errorf(result.CodeIOError, "cannot read %s: %v", path, err).With("path", path).Wrap(err)
	}
	pl.files[path] = st
	pl.order = append(pl.order, path)
	return st, nil
}

func notFound(fp *FilePatch) error {
	return result.Errorf(result.CodeFileNotFound, "cannot %s %s: no such file", fp.Action, fp.Path).
		With("path", fp.Path).With("patch_line", fp.Line)
}

func exists(fp *FilePatch, path string) error {
	return result.Errorf(result.CodeFileExists, "cannot %s %s: the file already exists", fp.Action, path).
		With("path", path).With("patch_line", fp.Line)
}

// apply performs one file operation on the overlay.
func (pl *planner) apply(fp *FilePatch) error {
	src, err := pl.state(fp.Path)
	if err != nil {
		return err
	}
	switch fp.Action {
	case ActionAdd:
		if src.exists && !fp.Overwrite {
			return exists(fp, fp.Path)
		}
		b, lv, err := applyHunks(nil, fp, pl.format)
		if err != nil {
			return err
		}
		src.exists, src.content, src.loosest = true, b, lv
		delete(pl.moved, fp.Path)

	case ActionDelete:
		if !src.exists {
			return notFound(fp)
		}
		if len(fp.Hunks) > 0 {
			// A unified diff deleting a file lists its lines; check them,
			// as git apply does, so a stale patch cannot delete new work.
			rest, _, err := applyHunks(src.content, fp, pl.format)
			if err != nil {
				return err
			}
			if len(rest) > 0 {
				return result.Errorf(result.CodePatchFailed, "%s has lines the patch does not delete", fp.Path).
					With("path", fp.Path).With("hunk", len(fp.Hunks)).With("context", []string{}).With("patch_line", fp.Line)
			}
		}
		src.exists, src.content, src.loosest = false, nil, matchExact
		delete(pl.moved, fp.Path)

	case ActionUpdate:
		if !src.exists {
			return notFound(fp)
		}
		b, lv, err := applyHunks(src.content, fp, pl.format)
		if err != nil {
			return err
		}
		src.content, src.loosest = b, max(src.loosest, lv)

	case ActionMove, ActionCopy:
		if !src.exists {
			return notFound(fp)
		}
		b, lv, err := applyHunks(src.content, fp, pl.format)
		if err != nil {
			return err
		}
		lv = max(lv, src.loosest)
		if fp.MoveTo == fp.Path {
			src.content, src.loosest = b, lv
			return nil
		}
		dst, err := pl.state(fp.MoveTo)
		if err != nil {
			return err
		}
		if dst.exists && !fp.Overwrite {
			return exists(fp, fp.MoveTo)
		}
		dst.exists, dst.content, dst.loosest = true, b, lv
		delete(pl.moved, fp.MoveTo)
		if fp.Action == ActionMove {
			src.exists, src.content = false, nil
			origin := fp.Path
			if o, ok := pl.moved[fp.Path]; ok {
				origin = o
				delete(pl.moved, fp.Path)
			}
			pl.moved[fp.MoveTo] = origin
		}

	default:
		return result.Errorf(result.CodePatchParse, "unknown action %q for %s", fp.Action, fp.Path)
	}
	return nil
}

// changes turns the overlay into the change set. A file that moved and was
// not recreated at its source is reported as one move; everything else by
// comparing how it was with how it ends.
func (pl *planner) changes() []Change {
	moveOf := map[string]string{} // source → destination
	isDest := map[string]bool{}
	for dst, src := range pl.moved {
		s, d := pl.files[src], pl.files[dst]
		if s.origExists && !s.exists && d.exists {
			moveOf[src], isDest[dst] = dst, true
		}
	}
	changes := []Change{}
	for _, path := range pl.order {
		st := pl.files[path]
		if dst, ok := moveOf[path]; ok {
			d := pl.files[dst]
			c := Change{Path: path, Action: ActionMove, MoveTo: dst, OldContent: st.orig, NewContent: d.content, Match: d.loosest.String()}
			if d.origExists {
				c.MoveToOldContent = d.orig
			}
			changes = append(changes, c)
			continue
		}
		if isDest[path] {
			continue
		}
		switch {
		case !st.origExists && st.exists:
			changes = append(changes, Change{Path: path, Action: ActionAdd, NewContent: st.content, Match: st.loosest.String()})
		case st.origExists && !st.exists:
			changes = append(changes, Change{Path: path, Action: ActionDelete, OldContent: st.orig, Match: MatchExact})
		case st.origExists && st.exists:
			changes = append(changes, Change{Path: path, Action: ActionUpdate, OldContent: st.orig, NewContent: st.content, Match: st.loosest.String()})
		}
	}
	return changes
}
