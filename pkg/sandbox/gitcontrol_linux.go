package sandbox

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Git runs code the repository's metadata names: hooks, and programs the
// config names (core.fsmonitor, core.hooksPath, core.sshCommand, filters,
// diff drivers, aliases, credential helpers). A sandboxed command that
// could change them in any repository of a writable root would run code
// outside the sandbox at the user's next git command there. So, for every
// repository found below the user's writable roots (the workspace and
// --allow-write), these are bound read-only:
//
//   - the git directory's hooks/ (created empty if missing) and config;
//   - config.worktree (read when extensions.worktreeConfig is on; created
//     empty then if missing) and commondir (where a linked worktree's
//     hooks and config live) of every git directory;
//   - the same of a bare repository (HEAD, objects/, refs/: a local
//     remote, whose hooks git push runs);
//   - a .git file (a submodule's or linked worktree's pointer to its git
//     directory), and the git directories it names, submodules' under
//     .git/modules and linked worktrees' under .git/worktrees included;
//   - what those configs point into a writable root: core.hooksPath and
//     include.path / includeIf.*.path files (created empty if missing);
//
// and the git directory and every directory from the writable root down
// to the repository are pinned (bound onto themselves), so that they can
// be neither renamed nor removed: a command cannot move the user's
// repository aside and put a forged .git in its place. The rest of .git
// (objects, refs, the index) stays writable, so git commit works; .git/info
// (exclude, attributes) only selects what the protected config defines.
//
// The search is bounded: gitSearchDepth levels below each root,
// gitSearchDirs directories read and gitSearchTime in all. A repository
// beyond the bound is not protected; the run's report says whether the
// search was complete (sandbox.git.complete). What no bind can stop (a new
// commondir, a git directory under modules/, a .git at a gitlink path) is
// reported at the run's end (gitwatch_linux.go, sandbox.git.planted).

// Variables, so that tests can lower them.
var (
	gitSearchDepth = 10
	gitSearchDirs  = 20000
	gitSearchTime  = 300 * time.Millisecond
)

// gitGuard collects what must be protected.
type gitGuard struct {
	writable []string // every writable root: only what is inside one needs a bind
	skip     map[string]bool
	ro       map[string]bool
	pins     map[string]bool
	gitdirs  map[string]bool
	indexes  map[string]string // a git directory -> its work tree, when known
	watched  []*watchedGitDir  // the git directories in writable roots, as found
	repos    int
	complete bool
}

// gitProtection searches roots (the user's writable roots) for git
// repositories and returns the paths to bind read-only, the directories to
// pin (parents first), how many repositories it found and whether the
// search covered everything. skip are writable roots of agentplane's own
// (the run's TMPDIR, the toolchain cache), not searched.
func gitProtection(roots, writable, skip []string, home string) (ro, pins []string, repos int, complete bool) {
	g := newGitGuard(roots, writable, skip, home)
	ro, pins = g.binds()
	return ro, pins, g.repos, g.complete
}

// newGitGuard runs gitProtection's search and protection.
func newGitGuard(roots, writable, skip []string, home string) *gitGuard {
	g := &gitGuard{writable: writable, skip: map[string]bool{}, ro: map[string]bool{}, pins: map[string]bool{}, gitdirs: map[string]bool{},
		indexes: map[string]string{}, complete: true}
	for _, s := range skip {
		g.skip[s] = true
	}
	deadline := time.Now().Add(gitSearchTime)
	budget := gitSearchDirs
	for _, r := range roots {
		if !g.search(r, &budget, deadline) {
			break
		}
	}
	// The user's global configs, where they lie in a writable root (a
	// missing ~/.gitconfig is created empty, so that the command cannot
	// create it), and their hooksPath and includes.
	for _, f := range globalGitConfigs(home) {
		g.protect(f, filepath.Base(f) == ".gitconfig")
		g.config(f, "", 0)
	}
	return g
}

// binds returns the paths to bind read-only, sorted, and the directories
// to pin, parents first.
func (g *gitGuard) binds() (ro, pins []string) {
	for p := range g.ro {
		ro = append(ro, p)
	}
	for p := range g.pins {
		pins = append(pins, p)
	}
	sort.Strings(ro)
	sort.Slice(pins, func(i, j int) bool {
		return len(pins[i]) < len(pins[j]) || len(pins[i]) == len(pins[j]) && pins[i] < pins[j]
	})
	return ro, pins
}

// search walks root breadth first, without following symlinks, and
// protects every repository it meets. It returns false when the budget ran
// out first; the search is incomplete then, or when a directory lay below
// the depth bound.
func (g *gitGuard) search(root string, budget *int, deadline time.Time) bool {
	type item struct {
		dir   string
		depth int
	}
	queue := []item{{root, 0}}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		if *budget <= 0 || time.Now().After(deadline) {
			g.complete = false
			return false
		}
		*budget--
		entries, err := readDirTypes(it.dir)
		if err != nil {
			continue
		}
		if isBareRepo(entries) {
			// A bare repository (a local remote: git push runs its
			// pre-receive and post-receive hooks).
			g.repos++
			g.pinChain(root, it.dir)
			g.gitdir(it.dir, "", 0)
			continue
		}
		for _, e := range entries {
			path := filepath.Join(it.dir, e.name)
			if e.name == ".git" {
				g.repo(root, it.dir, path, e.typ)
				continue
			}
			if e.typ != fs.ModeDir || g.skip[path] {
				continue
			}
			if it.depth >= gitSearchDepth {
				g.complete = false
				continue
			}
			queue = append(queue, item{path, it.depth + 1})
		}
	}
	return true
}

type dirEntry struct {
	name string
	typ  fs.FileMode
}

var direntBuf = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// readDirTypes lists the subdirectories and .git entries of dir with the
// types getdents reports: no stat per
// entry where the filesystem reports types (an unknown one is looked up
// with lstat), and raw syscalls, since this runs for every directory of
// every writable root on every sandboxed call.
func readDirTypes(dir string) ([]dirEntry, error) {
	var out []dirEntry
	err := scanDir(dir, func(name []byte, typ byte) {
		// Only directories, .git and HEAD (of a bare repository) matter:
		// no string for the rest.
		if typ != unix.DT_DIR && typ != unix.DT_UNKNOWN && string(name) != ".git" && string(name) != "HEAD" {
			return
		}
		nm := string(name)
		var mode fs.FileMode
		switch typ {
		case unix.DT_DIR:
			mode = fs.ModeDir
		case unix.DT_REG:
			mode = 0
		case unix.DT_LNK:
			mode = fs.ModeSymlink
		case unix.DT_UNKNOWN:
			st, err := os.Lstat(filepath.Join(dir, nm))
			if err != nil {
				return
			}
			mode = st.Mode().Type()
		default:
			mode = fs.ModeIrregular
		}
		out = append(out, dirEntry{nm, mode})
	})
	return out, err
}

// scanDir calls fn with the name (valid only during the call) and the
// getdents type of every entry of dir but "." and "..", in the order the
// filesystem returns them: raw syscalls, no allocation per entry, no sort
// and no stat, for the listings made on every sandboxed call (every
// directory of a writable root, the temp dir).
func scanDir(dir string, fn func(name []byte, typ byte)) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	buf := direntBuf.Get().(*[]byte)
	defer direntBuf.Put(buf)
	for {
		n, err := unix.Getdents(fd, *buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n <= 0 {
			return nil
		}
		for b := (*buf)[:n]; len(b) >= 19; {
			// struct linux_dirent64: ino, off, reclen, type, name.
			reclen := int(b[16]) | int(b[17])<<8
			if reclen < 19 || reclen > len(b) {
				break
			}
			typ, name := b[18], b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			if string(name) == "." || string(name) == ".." {
				continue
			}
			fn(name, typ)
		}
	}
}

// repo protects the repository whose work tree is wt (inside root) and
// whose .git entry is dotgit.
func (g *gitGuard) repo(root, wt, dotgit string, typ fs.FileMode) {
	g.repos++
	g.pinChain(root, wt)
	switch typ {
	case fs.ModeDir:
		g.indexes[dotgit] = wt
		g.gitdir(dotgit, wt, 0)
	case 0: // a regular file: "gitdir: PATH"
		g.protect(dotgit, false)
		if gd := readGitdirFile(dotgit); gd != "" {
			g.indexes[gd] = wt
			g.gitdir(gd, wt, 0)
		}
	default:
		// A symlink .git: git follows it. Its target is protected where it
		// lies in a writable root; the link itself, in the work tree, is
		// pinned with its directory.
		if real, err := filepath.EvalSymlinks(dotgit); err == nil {
			if st, err := os.Stat(real); err == nil && st.IsDir() {
				g.indexes[real] = wt
				g.gitdir(real, wt, 0)
			}
		}
	}
}

// isBareRepo reports whether a directory's entries are a git directory's:
// HEAD, objects/ and refs/.
func isBareRepo(entries []dirEntry) bool {
	n := 0
	for _, e := range entries {
		switch {
		case e.name == "HEAD" && e.typ == 0, e.name == "objects" && e.typ == fs.ModeDir, e.name == "refs" && e.typ == fs.ModeDir:
			n++
		}
	}
	return n == 3
}

// pinChain pins every directory from just below root down to wt.
func (g *gitGuard) pinChain(root, wt string) {
	for d := wt; d != root && strings.HasPrefix(d, root+string(filepath.Separator)); d = filepath.Dir(d) {
		g.pins[d] = true
	}
}

// gitdir protects a git directory (a repository's .git, a submodule's
// .git/modules/NAME, a linked worktree's .git/worktrees/NAME). wt is its
// work tree, "" when not known.
func (g *gitGuard) gitdir(dir, wt string, depth int) {
	if g.gitdirs[dir] || depth > 8 {
		return
	}
	g.gitdirs[dir] = true
	if !g.inWritable(dir) {
		return // read-only already, with everything it names inside
	}
	g.pins[dir] = true
	// What the end checks against (gitWatch).
	w := &watchedGitDir{path: dir, depth: depth}
	g.watched = append(g.watched, w)
	commondir := filepath.Join(dir, "commondir")
	config := filepath.Join(dir, "config")
	if w.commondir = exists(commondir); w.commondir {
		// A linked worktree: hooks and config are the common
		// directory's, read with this work tree (a relative
		// core.hooksPath is relative to it).
		g.protect(commondir, false)
		if data, err := os.ReadFile(commondir); err == nil {
			common := resolveFrom(dir, strings.TrimSpace(string(data)))
			g.gitdir(common, "", depth+1)
			config = filepath.Join(common, "config")
		}
	} else {
		hooks := filepath.Join(dir, "hooks")
		if _, err := os.Lstat(hooks); errors.Is(err, fs.ErrNotExist) {
			_ = os.Mkdir(hooks, 0o755)
		}
		g.protect(hooks, false)
		g.protect(filepath.Join(dir, "config"), false)
	}
	worktreeConfig := g.config(config, wt, 0)
	cw := filepath.Join(dir, "config.worktree")
	w.configWorktree = g.protect(cw, worktreeConfig)
	g.config(cw, wt, 0)
	// Submodules' git directories (names may contain slashes) and linked
	// worktrees'.
	modules := filepath.Join(dir, "modules")
	var found map[string]int
	found, w.moduleDirs = listModules(modules, depth)
	w.modules = map[string]bool{}
	for rel, d := range found {
		w.modules[rel] = true
		g.gitdir(filepath.Join(modules, rel), "", d)
	}
	if es, err := readDirTypes(filepath.Join(dir, "worktrees")); err == nil {
		w.worktrees = map[string]bool{}
		for _, e := range es {
			if e.typ == fs.ModeDir {
				w.worktrees[e.name] = true
				wd := filepath.Join(dir, "worktrees", e.name)
				wt := worktreeOf(wd)
				if wt != "" {
					g.indexes[wd] = wt
				}
				g.gitdir(wd, wt, depth+1)
			}
		}
	}
}

// worktreeOf reads a linked worktree's gitdir file (the path of the work
// tree's .git file) and returns the work tree.
func worktreeOf(gitdir string) string {
	data, err := os.ReadFile(filepath.Join(gitdir, "gitdir"))
	if err != nil {
		return ""
	}
	return filepath.Dir(resolveFrom(gitdir, strings.TrimSpace(string(data))))
}

// listModules finds the git directories below the modules/ directory dir
// of a git directory at depth (of nesting, at most 8: the directories
// between modules/ and a git directory, whose name may contain slashes,
// count too). It returns them relative to dir, each with the depth it is
// searched at, and the directories it listed.
func listModules(dir string, depth int) (gitdirs map[string]int, dirs []string) {
	gitdirs = map[string]int{}
	var walk func(rel string, d int)
	walk = func(rel string, d int) {
		if d > 8 {
			return
		}
		full := filepath.Join(dir, rel)
		es, err := readDirTypes(full)
		if err != nil {
			return
		}
		dirs = append(dirs, full)
		for _, e := range es {
			if e.typ != fs.ModeDir {
				continue
			}
			sub := filepath.Join(rel, e.name)
			if exists(filepath.Join(dir, sub, "HEAD")) {
				gitdirs[sub] = d + 1
			} else {
				walk(sub, d+1)
			}
		}
	}
	walk("", depth)
	return gitdirs, dirs
}

// protect adds path to the read-only binds when it lies in a writable
// root; a missing one is created empty when create is set (or when it is
// a hooks directory, done by the caller), else nothing can be bound and
// the command could create it (only for files git reads solely when the
// protected config says so). It reports whether path is bound.
func (g *gitGuard) protect(path string, create bool) bool {
	if !g.inWritable(path) {
		return false
	}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		if !create {
			return false
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return false
		}
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644); err == nil {
			f.Close()
		}
	}
	if _, err := os.Lstat(path); err == nil {
		g.ro[path] = true
		return true
	}
	return false
}

func (g *gitGuard) inWritable(path string) bool {
	for _, w := range g.writable {
		if path == w || strings.HasPrefix(path, w+string(filepath.Separator)) || w == "/" {
			return true
		}
	}
	return false
}

// config protects what a git config file points at in a writable root
// (gitConfigRefs): the core.hooksPath directory (created if missing) and
// the included files (created empty if missing), whose own references it
// follows a few levels. It reports whether extensions.worktreeConfig is on.
func (g *gitGuard) config(path, wt string, depth int) bool {
	if depth > 4 {
		return false
	}
	return gitConfigRefs(path, wt, func(hooksPath bool, p string) {
		if !hooksPath {
			g.protect(p, true)
			g.config(p, wt, depth+1)
			return
		}
		if g.inWritable(p) {
			if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
				_ = os.MkdirAll(p, 0o755)
			}
			g.protect(p, false)
		}
	})
}
