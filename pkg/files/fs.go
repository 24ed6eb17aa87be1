// Package files is the agentfs engine: reads, atomic writes, edits, inserts,
// multi-file change sets and undo, each reporting the file before and after.
//
// Every operation goes through an os.Root, so confinement to FS.Root is
// enforced by the kernel-facing lookups at the moment of the operation, not
// by a string check followed by a later open. Without a Root the engine
// uses an os.Root at "/" so that the code path is the same.
//
// Symbolic links are resolved by the engine itself, one component at a time
// through the os.Root (which keeps every lookup inside it), so that a write
// through a link replaces the link's target and never the link, and so that
// an absolute link pointing inside the root still works (os.Root alone
// refuses every absolute link). The path so checked (root, deny rules) is
// never looked up by name again: its directory is opened once without
// following any symlink and every step happens in it (pin.go), so a
// directory swapped for a symlink after the check, even one to a denied
// place inside the root, is refused rather than followed.
//
// Concurrency: a mutation holds an exclusive flock on the directory that
// contains each file it changes, from before it reads the file until after
// the rename. A directory's inode is stable across the renames that replace
// files in it, unlike the file's own inode, and locking it leaves nothing
// behind in the workspace. Two agentfs processes changing files in the same
// directory therefore take turns: each reads what the other wrote, so no
// update is lost, and an --expect-sha256 check made under the lock is exact.
// The lock is advisory: a program that is not agentfs is not held back by
// it; ExpectSHA256 is what protects against those, and the commit checks,
// just before each rename, that the file is still the one it read (same
// inode, size and modification time, or still absent), failing with
// file_changed rather than renaming over another program's change.
//
// Atomicity: new content goes to a temp file beside the target, is synced,
// and renamed over it; the directory is synced after. A failed operation,
// including a multi-file Apply failing part-way, restores every file from
// hard-link backups kept beside them. A crash (kill -9, power loss) can
// leave a hidden ".NAME.agentfs-*.tmp" or ".bak" file behind but never a
// half-written target; only a crash inside the rename phase of a multi-file Apply can
// leave that change set partly applied, with the originals still beside the
// files as ".NAME.agentfs-*.bak". Side files carry their maker's pid, start
// time and boot, and the next operation that locks the directory removes
// the temp files whose maker is provably gone (and backups that are only a
// second link to the file itself); a differing backup is kept.
//
// Text: files are UTF-8. A NUL byte in the first 8 KiB (or a UTF-16 byte
// order mark) makes a file binary_file for text operations; other invalid
// UTF-8 is invalid_encoding. Read reports both as binary. Edits keep a
// UTF-8 BOM, the file's line ending (new text is converted to it) and a
// missing final newline.
//
// Undo history (FS.HistoryDir) records, before each change, the previous
// content (or its absence) and the hash of what agentfs wrote, keyed by the
// file's resolved absolute path. It keeps at most HistoryVersions versions
// (default 20) and HistoryBytes of saved content (default 256 MiB) per
// file, dropping the oldest first but always keeping the newest. Files from
// 64 KiB up are saved as a hard link to the replaced inode when the history
// is on the same file system and nothing else has the file open or another
// name for it (Linux: a write lease is granted), so a large edit costs no
// extra copy.
package files

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/agentplane/agentplane/pkg/result"
)

// DefaultMaxContent is the size past which a mutation result leaves out the
// whole texts before and after (the diff stays).
const DefaultMaxContent = 1 << 20

// Default bounds of the undo history kept for each file.
const (
	DefaultHistoryVersions = 20
	DefaultHistoryBytes    = 256 << 20
)

// maxSymlinks bounds link resolution, like the kernel's ELOOP limit.
const maxSymlinks = 40

// FS is the configuration of the engine. The zero value works: no root, no
// deny list, no size limit, no undo history. An FS holds no open resources
// and is safe for concurrent use.
type FS struct {
	// Root confines every path: it must resolve, symlinks followed, inside
	// this directory. Empty means no confinement.
	Root string
	// Dir is the directory relative paths start from; empty means the
	// process's working directory.
	Dir string
	// Deny lists doublestar globs (see MatchGlob) of paths that may not be
	// read or written. They are matched against the path relative to Root
	// (or the absolute path without Root), both as given and as resolved,
	// and against each parent directory.
	Deny []string
	// MaxFileSize refuses files larger than this many bytes for reading and
	// text operations (file_too_large); 0 means no limit.
	MaxFileSize int64
	// MaxContent is the size past which a mutation result leaves out the
	// whole texts (ContentOmitted); 0 means DefaultMaxContent.
	MaxContent int64
	// HistoryDir is where undo history lives; empty disables history and
	// Undo reports nothing_to_undo.
	HistoryDir string
	// Histories are more undo histories (of other state directories, or
	// HistoryDir's own where a read leaves it empty) that, like
	// HistoryDir, no operation may read or change while a rule is in
	// force (see inHistory).
	Histories []string
	// HistoryVersions and HistoryBytes bound the history of one file: the
	// oldest versions go first when either is exceeded (the newest version
	// is always kept). 0 means the defaults.
	HistoryVersions int
	HistoryBytes    int64
	// MayChange, when set, is asked about every file a change (Write,
	// Edit, Insert, Undo, Apply, a move's both names) would write, create
	// or remove, by its absolute path with symlinks resolved, before
	// anything is touched; an error refuses the change. The change then
	// goes through directories opened without following a symlink from
	// the root (pinDir), so what was asked about is what is changed. (The
	// sandbox lock's writable roots: a program outside the sandbox holds
	// itself to them.)
	MayChange func(path string) error
	// Hidden are absolute paths (symlinks resolved) that may be neither
	// read nor changed, nor anything beneath them: refused as path_denied,
	// like a deny rule.
	Hidden []string
	// DryRun makes Write, Edit, Insert, Undo and Apply check everything
	// and report the same result, texts, diff and hashes, without touching
	// the file, its directory or the undo history: a preview for approval.
	DryRun bool

	// Recovered are the files a change put back as they were, before it
	// did its own: files of a change set whose process was killed between
	// its renames (see journal.go), which the caller may report.
	Recovered []string

	// afterStage, when set, runs after every temp file of a change set is
	// written and synced and before the first rename; an error from it
	// aborts the change as a crash at that point would. Tests only.
	afterStage func() error
	// afterHistory, when set, runs once the change set's history entries
	// are recorded and before the first rename; an error from it aborts
	// the change. Tests only.
	afterHistory func() error
	// failSync, when set, runs before each sync of a commit's directories
	// and fails it with its error. Tests only.
	failSync func() error
	// afterRename, when set, runs after the i-th rename of a commit; an
	// error makes the commit roll back. Tests only.
	afterRename func(i int) error
	// beforeLinkScan, when set, runs before each walk of the root that
	// looks for a hard-linked file's other names. Tests only.
	beforeLinkScan func()
	// beforeAwait, when set, runs when a read waits for another agentfs's
	// commit in the directory to end (see awaitWriters). Tests only.
	beforeAwait func()
	// afterHistoryData, when set, runs after a history entry's saved
	// content is written and before its description. Tests only.
	afterHistoryData func()
}

// session is one operation's view of the file system: an open os.Root and
// the two spellings of the root's absolute path.
type session struct {
	fs         *FS
	root       *os.Root
	rootAbs    string   // the root as configured, made absolute and clean
	rootReal   string   // the same with symlinks resolved
	madeDirs   []string // the directories this change made for new files (relative), parents first
	confined   bool
	base       string              // absolute directory relative paths start from
	ownerTag   string              // see owner
	pinned     map[string]*os.Root // see pinDir
	locked     map[string]bool     // directories (relative to the root) this session holds the lock of
	history    string              // HistoryDir made absolute, symlinks resolved where it exists; see inHistory
	histories  []string            // the same for HistoryDir and Histories
	hiddenReal []string            // FS.Hidden, each as realPath makes it
}

func (f *FS) open() (*session, error) {
	s := &session{fs: f, rootAbs: "/", rootReal: "/"}
	if f.Root != "" {
		abs, err := filepath.Abs(f.Root)
		if err != nil {
			return nil, newErr(result.CodeIOError, "root %s: %v", f.Root, err)
		}
		s.rootAbs = abs
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return nil, osError(err, f.Root)
		}
		s.rootReal = real
		s.confined = true
	}
	r, err := os.OpenRoot(s.rootReal)
	if err != nil {
		return nil, osError(err, s.rootReal)
	}
	s.root = r
	for i, h := range append([]string{f.HistoryDir}, f.Histories...) {
		if h == "" {
			continue
		}
		real := realPath(h)
		if i == 0 {
			s.history = real
		}
		s.histories = append(s.histories, real)
	}
	for _, h := range f.Hidden {
		s.hiddenReal = append(s.hiddenReal, realPath(h))
	}
	s.base = f.Dir
	if s.base == "" {
		wd, err := os.Getwd()
		if err != nil {
			r.Close()
			return nil, newErr(result.CodeIOError, "working directory: %v", err)
		}
		s.base = wd
	} else if !filepath.IsAbs(s.base) {
		abs, err := filepath.Abs(s.base)
		if err != nil {
			r.Close()
			return nil, newErr(result.CodeIOError, "dir %s: %v", s.base, err)
		}
		s.base = abs
	}
	return s, nil
}

func (s *session) close() {
	s.closePinned()
	s.root.Close()
}

// target is a path the caller named, resolved for one operation.
type target struct {
	given string // as the caller wrote it, for messages and results
	rel   string // slash-separated, relative to the root, no symlinks; "." is the root
	abs   string // absolute path on disk, for history keys
}

// within returns name relative to dir when name is dir or below it.
func within(dir, name string) (string, bool) {
	if dir == "/" {
		return strings.TrimPrefix(name, "/"), true
	}
	if name == dir {
		return "", true
	}
	if strings.HasPrefix(name, dir+"/") {
		return name[len(dir)+1:], true
	}
	return "", false
}

// relToRoot maps an absolute, clean path to a path relative to the root,
// accepting either spelling of the root.
func (s *session) relToRoot(abs string) (string, bool) {
	if r, ok := within(s.rootAbs, abs); ok {
		return r, true
	}
	return within(s.rootReal, abs)
}

// resolve maps a caller's path to a target. With followFinal false the last
// component is not followed when it is a symlink (for stat, list and the
// parent walk of a file that does not exist yet).
func (s *session) resolve(p string, followFinal bool) (target, error) {
	if p == "" {
		return target{}, invalid("empty path")
	}
	if strings.IndexByte(p, 0) >= 0 {
		// The kernel would end the name at the NUL: what ran would not be
		// what was asked (or checked against the deny rules).
		return target{}, invalid("%s: a path cannot contain a NUL byte", clipPath(strings.ReplaceAll(p, "\x00", `\0`)))
	}
	abs := p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(s.base, abs)
	}
	abs = filepath.Clean(abs)
	lexical, ok := s.relToRoot(abs)
	if !ok {
		return target{}, newErr(result.CodeOutsideRoot, "%s is outside the root %s", p, s.fs.Root)
	}
	if err := s.checkDeny(p, lexical); err != nil {
		return target{}, err
	}

	var resolved []string
	pending := splitPath(lexical)
	links := 0
	for len(pending) > 0 {
		comp := pending[0]
		pending = pending[1:]
		switch comp {
		case "", ".":
			continue
		case "..":
			if len(resolved) == 0 {
				return target{}, newErr(result.CodeOutsideRoot, "%s resolves outside the root", p)
			}
			resolved = resolved[:len(resolved)-1]
			continue
		}
		cand := path.Join(append(append([]string{}, resolved...), comp)...)
		if len(pending) == 0 && !followFinal {
			resolved = append(resolved, comp)
			break
		}
		fi, err := s.root.Lstat(cand)
		if err != nil {
			if os.IsNotExist(err) {
				// Nothing below a missing component can be a link, and
				// the kernel would not walk ".." out of it either.
				for _, c := range pending {
					if c == ".." {
						return target{}, newErr(result.CodeFileNotFound, "%s does not exist", p)
					}
				}
				resolved = append(resolved, comp)
				resolved = append(resolved, pending...)
				pending = nil
				break
			}
			return target{}, osError(err, p)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = append(resolved, comp)
			continue
		}
		links++
		if links > maxSymlinks {
			return target{}, newErr(result.CodeIOError, "%s: too many levels of symbolic links", p)
		}
		dest, err := s.root.Readlink(cand)
		if errors.Is(err, syscall.EINVAL) {
			// No longer a symlink: it was swapped since the Lstat. Look
			// at it again (links bounds how often).
			pending = append([]string{comp}, pending...)
			continue
		}
		if err != nil {
			return target{}, osError(err, p)
		}
		if filepath.IsAbs(dest) {
			r, ok := s.relToRoot(filepath.Clean(dest))
			if !ok {
				return target{}, newErr(result.CodeOutsideRoot, "%s is a symlink to %s, outside the root", p, dest)
			}
			resolved = nil
			dest = r
		}
		pending = append(splitPath(filepath.ToSlash(dest)), pending...)
	}
	rel := path.Join(resolved...)
	if rel == "" {
		rel = "."
	}
	if rel != lexical {
		if err := s.checkDeny(p, rel); err != nil {
			return target{}, err
		}
	}
	return target{given: p, rel: rel, abs: filepath.Join(s.rootReal, filepath.FromSlash(rel))}, nil
}

// denied reports whether rel (relative to the root) or one of its parents
// matches a deny glob. Without confinement the globs see the absolute path.
// A side file (an agentfs temp or backup name, see sideName) holds its
// file's content, old or new, so it is denied when its file is: a backup
// of ".env" left by a killed commit is as secret as ".env". A side name
// whose file's name was cut to maxSideBase could be any file's that begins
// so; with deny rules it is refused.
func (s *session) denied(rel string) (string, bool) {
	// A side name of a side name (a temp file of a backup) is its
	// file's too, however deep.
	for {
		if g, ok := s.deniedName(rel); ok {
			return g, true
		}
		base, cut, ok := sideOwner(path.Base(rel))
		if !ok {
			return "", false
		}
		if cut {
			if len(s.fs.Deny) > 0 {
				return s.fs.Deny[0], true
			}
			if len(s.hiddenReal) > 0 {
				return s.hiddenReal[0], true
			}
		}
		rel = path.Join(path.Dir(rel), base)
	}
}

// sideOwner returns the name of the file a side name belongs to, and
// whether that name was cut. Unlike parseSideName it accepts any name of
// the side files' shape, signed or not: refusing a look-alike costs
// nothing, and missing a real one leaks its file.
func sideOwner(name string) (base string, cut, ok bool) {
	i := strings.LastIndex(name, sideMark)
	if !strings.HasPrefix(name, ".") || i < 1 {
		return "", false, false
	}
	if !strings.HasSuffix(name, ".tmp") && !strings.HasSuffix(name, ".bak") {
		return "", false, false
	}
	base = name[1:i]
	return base, len(base) >= maxSideBase, true
}

// deniedName is denied for rel itself, its parents included.
func (s *session) deniedName(rel string) (string, bool) {
	if h, ok := s.inHistory(rel); ok {
		return h, true
	}
	if h, ok := s.hidden(rel); ok {
		return h, true
	}
	if len(s.fs.Deny) == 0 {
		return "", false
	}
	name := rel
	if !s.confined {
		name = "/" + strings.TrimPrefix(rel, "/")
	}
	for name != "" && name != "." && name != "/" {
		for _, g := range s.fs.Deny {
			if MatchGlob(g, name) {
				return g, true
			}
		}
		name = path.Dir(name)
	}
	return "", false
}

// inHistory reports whether rel (relative to the root) is inside the undo
// history, while any rule is in force (a root, a deny or hidden path).
// The history is agentfs's own state, not content to operate on: it holds
// the earlier content of every file agentfs changed, denied ones included
// (changed before a rule named them, or by an agentfs without the rule),
// and an entry written through agentfs would forge what undo restores.
func (s *session) inHistory(rel string) (string, bool) {
	if !s.confined && len(s.fs.Deny) == 0 && len(s.fs.Hidden) == 0 {
		return "", false
	}
	return s.beneath(s.histories, rel)
}

// hidden reports whether rel (relative to the root) is one of the Hidden
// paths or beneath one.
func (s *session) hidden(rel string) (string, bool) {
	return s.beneath(s.hiddenReal, rel)
}

// beneath returns the first of dirs (resolved, see realPath) that rel
// (relative to the root) is or lies beneath.
func (s *session) beneath(dirs []string, rel string) (string, bool) {
	if len(dirs) == 0 {
		return "", false
	}
	abs := filepath.Join(s.rootReal, filepath.FromSlash(rel))
	for _, d := range dirs {
		if _, ok := within(d, abs); ok {
			return d, true
		}
	}
	return "", false
}

// realPath is p made absolute with the symbolic links of its longest
// existing part resolved, the rest joined as named: the path by which a
// target that resolves to it is compared (targets are resolved, see
// resolve), also while its last parts do not exist yet (a history still
// to be made under a linked directory).
func realPath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	rest := ""
	for dir := abs; ; dir = filepath.Dir(dir) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		}
		if dir == filepath.Dir(dir) {
			return abs
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// mayChange asks FS.MayChange about the file of t.
func (s *session) mayChange(t target) error {
	if s.fs.MayChange == nil {
		return nil
	}
	return s.fs.MayChange(t.abs)
}

func (s *session) checkDeny(given, rel string) error {
	g, ok := s.denied(rel)
	switch {
	case !ok:
		return nil
	case slices.Contains(s.histories, g):
		return newErr(result.CodePathDenied, "%s is inside agentfs's undo history %s, which no operation reads or changes under a rule (undo restores from it)", given, g).With("rule", g)
	}
	return newErr(result.CodePathDenied, "%s is denied by the rule %s", given, g).With("rule", g)
}

// checkSize refuses a file over MaxFileSize.
func (s *session) checkSize(t target, size int64) *result.Error {
	if max := s.fs.MaxFileSize; max > 0 && size > max {
		return newErr(result.CodeFileTooLarge, "%s is %d bytes, over the limit of %d", t.given, size, max).
			With("size", size).With("limit", max)
	}
	return nil
}

// display is the path reported in messages for a resolved name relative to
// the root.
func (s *session) display(rel string) string {
	if s.confined {
		return rel
	}
	return "/" + strings.TrimPrefix(rel, "/")
}
