package agentfs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/files"
	"github.com/agentplane/agentplane/pkg/patch"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/textdiff"
)

// PatchOptions are the flags of agentfs patch.
type PatchOptions struct {
	*CommonOptions
	DryRun    bool
	Strip     int
	PatchFile string
	Patch     string

	hasPatch bool
}

// NewCmdPatch builds agentfs patch. runF replaces patchRun in tests.
func NewCmdPatch(env *clikit.Env, common *CommonOptions, runF func(*PatchOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &PatchOptions{CommonOptions: common, Strip: -1}
	cmd := &cobra.Command{
		Use:   "patch [--dry-run] [--strip N] (< PATCH | --patch-file FILE | --patch TEXT)",
		Short: "Apply a unified diff or a *** Begin Patch patch, all files or none",
		Long: "Apply a patch in the unified diff format of git diff and diff -u, or the *** Begin Patch " +
			"format code agents emit (Add File, Delete File, Update File, Move to). Every hunk of every " +
			"file is checked before anything is written, and the files change all together or not at " +
			"all; a file that changes between the check and the write is refused with file_changed. " +
			"Paths are relative to the current directory (and confined by --root and --deny). " +
			"--dry-run reports the same result without writing.",
		Args: cobra.NoArgs,
		Annotations: map[string]string{
			clikit.AnnotTool:    "agentfs_patch",
			clikit.AnnotToolDoc: "Apply a patch given inline as patch: a unified diff (as git diff and diff print it) or the *** Begin Patch format (Add File, Delete File, Update File, Move to). Every hunk of every file is checked before anything is written, and the files change all together or not at all. Paths are relative to the current directory. dry_run returns the same result without writing.",
			clikit.AnnotHints:   clikit.Hints{Destructive: true}.String(),
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.DryRun, "dry-run", false, "check and report everything, write nothing")
	f.IntVar(&o.Strip, "strip", -1, "remove `N` leading path components from unified diff names, as patch's strip level does (default: 1 for git's a/ b/ names, else 0)")
	f.StringVar(&o.PatchFile, "patch-file", "", "read the patch from `FILE` instead of stdin")
	clikit.MarkFlags(f, clikit.LocalFile, "patch-file")
	f.StringVar(&o.Patch, "patch", "", "the patch `TEXT` itself (the request key for a tool call)")
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		if err := o.refuseFileKeys(cmd, env); err != nil {
			return nil, err
		}
		o.hasPatch = clikit.FlagChanged(cmd, "patch")
		if o.hasPatch && o.PatchFile != "" {
			return nil, result.Errorf(result.CodeUsage, "give either --patch or --patch-file, not both")
		}
		if o.Strip < -1 {
			return nil, result.Errorf(result.CodeUsage, "--strip must not be negative")
		}
		if runF != nil {
			return runF(o)
		}
		return patchRun(env, o)
	})
	return cmd
}

func patchRun(env *clikit.Env, o *PatchOptions) (*clikit.Outcome, error) {
	data := []byte(o.Patch)
	if !o.hasPatch {
		var err error
		if data, err = textInput(env, o.PatchFile, "patch (give it on stdin, --patch-file or --patch)"); err != nil {
			return nil, err
		}
	}
	p, err := patch.Parse(data, o.Strip)
	if err != nil {
		return nil, err
	}
	fsys, err := o.engine(env, !o.DryRun)
	if err != nil {
		return nil, err
	}
	planned, err := patch.Plan(p, func(path string) ([]byte, error) { return readForPatch(fsys, path) })
	if err != nil {
		return nil, err
	}
	changes, overwrites := commitChanges(planned)
	muts, err := fsys.Apply(changes, files.ApplyOptions{DryRun: o.DryRun})
	if err != nil {
		return nil, err
	}
	list := make([]*result.Object, 0, len(planned))
	next := 0
	for _, c := range planned {
		m := muts[next]
		next++
		if overwrites[c.Path] {
			m = o.moveOverReport(c, muts[next-1], muts[next])
			next++
		}
		entry := o.mutationFields(result.New(), m)
		if overwrites[c.Path] {
			entry.Set("overwrote", true)
		}
		if c.Match != "" && c.Match != patch.MatchExact {
			entry.Set("match", c.Match)
		}
		list = append(list, entry)
	}
	obj := result.New().Set("success", true).Set("format", p.Format.String()).Set("dry_run", o.DryRun).Set("files", list)
	return done(env, o.putBack(obj)), nil
}

// readForPatch gives patch.Plan a file's exact bytes through the engine,
// so that the plan is confined by --root and --deny and refuses binary and
// oversized files exactly as edit does. The engine's Read leaves out a
// UTF-8 BOM; it is put back and the whole is checked against the file's
// sha256, so a file that changed while being read is never planned from a
// mix of two versions.
//
// The whole file is asked for: a read without MaxBytes stops at
// files.DefaultReadMax, and a plan made from that part failed the check
// against the whole file's sha256 as a file that changed.
func readForPatch(fsys *files.FS, path string) ([]byte, error) {
	r, err := fsys.Read(path, files.ReadOptions{MaxBytes: math.MaxInt})
	if err != nil {
		if re := result.AsError(err); re.Code == result.CodeFileNotFound {
			return nil, fmt.Errorf("%w: %w", fs.ErrNotExist, err)
		}
		return nil, err
	}
	if r.Binary {
		return nil, result.Errorf(result.CodeBinaryFile, "%s is not UTF-8 text; patch only changes text files", path).With("path", path)
	}
	raw := []byte(r.Content)
	if r.BOM {
		raw = append([]byte("\uFEFF"), raw...)
	}
	if sha(raw) != r.SHA256 {
		return nil, result.Errorf(result.CodeFileChanged, "%s changed while it was being read", path).With("path", path)
	}
	return raw, nil
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// commitChanges turns a plan into the engine's change set. Each change
// expects the file to be exactly as planned (file_changed otherwise). A
// move onto an existing file, which the agent format allows, becomes an
// update of the destination and a delete of the source, in that order;
// overwrites names those moves by their source.
func commitChanges(planned []patch.Change) ([]files.Change, map[string]bool) {
	var out []files.Change
	overwrites := map[string]bool{}
	for _, c := range planned {
		switch c.Action {
		case patch.ActionAdd:
			out = append(out, files.Change{Action: files.ActionAdd, Path: c.Path, NewContent: nonNil(c.NewContent)})
		case patch.ActionUpdate:
			out = append(out, files.Change{Action: files.ActionUpdate, Path: c.Path, NewContent: nonNil(c.NewContent), ExpectSHA256: sha(c.OldContent)})
		case patch.ActionDelete:
			out = append(out, files.Change{Action: files.ActionDelete, Path: c.Path, ExpectSHA256: sha(c.OldContent)})
		case patch.ActionMove:
			if c.MoveToOldContent != nil {
				overwrites[c.Path] = true
				out = append(out,
					files.Change{Action: files.ActionUpdate, Path: c.MoveTo, NewContent: nonNil(c.NewContent), ExpectSHA256: sha(c.MoveToOldContent)},
					files.Change{Action: files.ActionDelete, Path: c.Path, ExpectSHA256: sha(c.OldContent)})
				continue
			}
			out = append(out, files.Change{Action: files.ActionMove, Path: c.Path, MoveTo: c.MoveTo, NewContent: nonNil(c.NewContent), ExpectSHA256: sha(c.OldContent)})
		}
	}
	return out, overwrites
}

// nonNil keeps an empty new content from meaning "keep the content" to the
// engine's move.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// moveOverReport reports a move onto an existing file as one move, from
// the source's content to the new one, like a plain move.
func (o *PatchOptions) moveOverReport(c patch.Change, dst, src *files.Mutation) *files.Mutation {
	m := &files.Mutation{
		Path: c.Path, Action: files.ActionMove, MoveTo: c.MoveTo, Changed: true,
		SHA256Before: src.SHA256Before, SHA256After: dst.SHA256After,
	}
	m.Diff, m.DiffStats.Added, m.DiffStats.Removed = textdiff.Unified(c.Path, c.MoveTo, c.OldContent, c.NewContent, 3)
	limit := o.MaxContent
	if limit <= 0 {
		limit = files.DefaultMaxContent
	}
	if int64(len(c.OldContent)) > limit || int64(len(c.NewContent)) > limit {
		m.ContentOmitted = true
	} else {
		m.OriginalFile, m.NewFile = string(c.OldContent), string(c.NewContent)
	}
	return m
}
