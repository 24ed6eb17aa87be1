package sandbox

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// gitRepo makes a repository with one commit in dir.
func gitRepo(t testing.TB, dir string) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	gitCmd(t, dir, "init", "-q", ".")
	must(t, os.WriteFile(filepath.Join(dir, "f"), []byte("f\n"), 0o644))
	gitCmd(t, dir, "add", "f")
	gitCmd(t, dir, "commit", "-q", "-m", "init")
}

// gitOut runs git in dir and returns its output.
func gitOut(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, b)
	}
	return strings.TrimSpace(string(b))
}

// plantedBy runs script sandboxed in ws (workspace-write) and returns the
// end report's git.planted and git.complete.
func plantedBy(t *testing.T, ws, script string) ([]string, bool, string) {
	t.Helper()
	p := Policy{Mode: ModeWorkspaceWrite, Workspace: ws}
	res, prep := sandboxed(t, p, ws, "sh", "-c", "export GIT_CONFIG_NOSYSTEM=1\n"+script)
	g, _ := prep.EndReport()["git"].(map[string]any)
	if g == nil {
		t.Fatalf("no git report: %v", prep.Report)
	}
	planted, _ := g["planted"].([]string)
	complete, _ := g["complete"].(bool)
	if _, ok := prep.Report["git"].(map[string]any)["planted"]; ok {
		t.Errorf("EndReport changed Report")
	}
	return planted, complete, out(res) + text(res.Stderr)
}

const gitID = "-c user.email=t@e -c user.name=t"

// Each form of git metadata a command can plant for the user's next git
// command, and that no bind stops, is reported at the run's end; an entry
// whose times were set back (touch -d) too, since no command can set back
// the change time. The gitlink form is real: the user's plain git status
// in the superproject runs the forged git directory's core.fsmonitor.
func TestGitPlanted(t *testing.T) {
	requireSandbox(t)
	requireGit(t)
	cases := []struct {
		name, script string
		want         []string
	}{
		{"commondir", `mkdir forged && echo "$PWD/forged" > .git/commondir`, []string{".git/commondir"}},
		{"config.worktree", `printf '[core]\n\tfsmonitor = x\n' > .git/config.worktree`, []string{".git/config.worktree"}},
		{"modules", `mkdir -p .git/modules/lib/objects .git/modules/lib/refs && echo 'ref: refs/heads/main' > .git/modules/lib/HEAD`, []string{".git/modules/lib"}},
		{"modules nested name", `mkdir -p .git/modules/a/b/objects && echo 'ref: refs/heads/main' > .git/modules/a/b/HEAD`, []string{".git/modules/a/b"}},
		{"worktrees", `mkdir -p .git/worktrees/w && echo x > .git/worktrees/w/HEAD`, []string{".git/worktrees/w"}},
		{"old times", `mkdir -p .git/worktrees/w && touch -d 2001-01-01 .git/worktrees/w .git/worktrees .git`, []string{".git/worktrees/w"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, ws, _ := dirs(t)
			gitRepo(t, ws)
			planted, complete, o := plantedBy(t, ws, c.script)
			var want []string
			for _, w := range c.want {
				want = append(want, filepath.Join(ws, w))
			}
			if !reflect.DeepEqual(planted, want) || !complete {
				t.Errorf("planted %v complete %v, want %v (output %s)", planted, complete, want, o)
			}
		})
	}
	t.Run("root .git", func(t *testing.T) {
		parent, ws, _ := dirs(t)
		gitRepo(t, parent) // the workspace lies in a repository
		planted, complete, o := plantedBy(t, ws, `git init -q`)
		if want := []string{filepath.Join(ws, ".git")}; !reflect.DeepEqual(planted, want) || !complete {
			t.Errorf("planted %v complete %v, want %v (output %s)", planted, complete, want, o)
		}
	})
	t.Run("gitlink through a new symlink", func(t *testing.T) {
		// A repository made before the run (by an earlier run, say), which
		// a new symlink at a gitlink path makes the user's git recurse
		// into: its .git is old.
		_, ws, _ := dirs(t)
		gitRepo(t, ws)
		gitRepo(t, filepath.Join(ws, "evil"))
		planted, complete, o := plantedBy(t, ws, `git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),a/sub && mkdir a && ln -s ../evil a/sub`)
		if want := []string{filepath.Join(ws, "a/sub")}; !reflect.DeepEqual(planted, want) || !complete {
			t.Errorf("planted %v complete %v, want %v (output %s)", planted, complete, want, o)
		}
	})
	t.Run("gitlink of the enclosing repository", func(t *testing.T) {
		parent, ws, _ := dirs(t)
		gitRepo(t, parent)
		hash := gitOut(t, parent, "rev-parse", "HEAD")
		gitCmd(t, parent, "update-index", "--add", "--cacheinfo", "160000,"+hash+",ws/sub")
		planted, complete, o := plantedBy(t, ws, `mkdir sub && echo "gitdir: /forged" > sub/.git`)
		if want := []string{filepath.Join(ws, "sub/.git")}; !reflect.DeepEqual(planted, want) || !complete {
			t.Errorf("planted %v complete %v, want %v (output %s)", planted, complete, want, o)
		}
	})
	for _, version := range []string{"2", "3", "4"} {
		t.Run("gitlink index v"+version, func(t *testing.T) {
			parent, ws, _ := dirs(t)
			gitRepo(t, ws)
			gitCmd(t, ws, "update-index", "--index-version", version)
			marker := filepath.Join(parent, "ran")
			planted, complete, o := plantedBy(t, ws, `
H=$(git rev-parse HEAD)
git update-index --add --cacheinfo 160000,$H,deep/sub || exit 1
mkdir -p deep/sub
git init -q --bare forged
echo "$PWD/.git/objects" > forged/objects/info/alternates
git --git-dir=forged update-ref HEAD $H && git --git-dir=forged read-tree $H
git -C forged config core.bare false
git -C forged config core.worktree "$PWD/deep/sub"
git -C forged config core.fsmonitor "touch `+marker+`; false"
echo "gitdir: $PWD/forged" > deep/sub/.git
touch -d 2001-01-01 deep/sub/.git
`)
			want := []string{filepath.Join(ws, "deep/sub/.git")}
			if !reflect.DeepEqual(planted, want) || !complete {
				t.Fatalf("planted %v complete %v, want %v (output %s)", planted, complete, want, o)
			}
			// What the report is for: the user's plain git status.
			cmd := exec.Command("git", "status", "--short")
			cmd.Dir = ws
			cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+parent)
			b, _ := cmd.CombinedOutput()
			if _, err := os.Stat(marker); err != nil {
				t.Errorf("the user's git status did not run the forged fsmonitor (%s): the attack the report is for is not real here", b)
			}
		})
	}
}

// Ordinary work reports nothing, or exactly what it made: a commit
// nothing; git submodule add of a local repository its submodule's git
// directory and .git file (the user's git follows them; the report says
// so, it does not refuse).
func TestGitPlantedOrdinary(t *testing.T) {
	requireSandbox(t)
	requireGit(t)
	parent, ws, _ := dirs(t)
	gitRepo(t, ws)
	src := filepath.Join(parent, "src")
	gitRepo(t, src)
	// An existing submodule, whose pointer and git directory are the
	// user's.
	gitCmd(t, ws, "submodule", "-q", "add", src, "old")
	gitCmd(t, ws, "commit", "-q", "-m", "old")
	planted, complete, o := plantedBy(t, ws, `echo x >> f && git add f && git `+gitID+` commit -qm c && git status --short && echo ok`)
	if len(planted) != 0 || !complete || !strings.Contains(o, "ok\n") {
		t.Errorf("a commit: planted %v complete %v (output %s)", planted, complete, o)
	}
	if n := gitOut(t, ws, "rev-list", "--count", "HEAD"); n != "3" {
		t.Errorf("the commit did not land: %s commits", n)
	}
	planted, complete, o = plantedBy(t, ws, `git -c protocol.file.allow=always submodule add -q `+src+` mods/new && echo added; git status --short`)
	want := []string{filepath.Join(ws, ".git/modules/mods/new"), filepath.Join(ws, "mods/new/.git")}
	if !reflect.DeepEqual(planted, want) || !complete || !strings.Contains(o, "added\n") {
		t.Errorf("submodule add: planted %v complete %v, want %v (output %s)", planted, complete, want, o)
	}
}

// A session's sandbox (one Prepared, many calls) reports at each end what
// was planted since the previous one.
func TestGitPlantedEachCall(t *testing.T) {
	requireSandbox(t)
	requireGit(t)
	_, ws, _ := dirs(t)
	gitRepo(t, ws)
	p := Policy{Mode: ModeWorkspaceWrite, Workspace: ws}
	prep, err := Prepare(p, self(t))
	if err != nil {
		t.Fatal(err)
	}
	defer prep.Cleanup()
	report := func() any {
		g, _ := prep.EndReport()["git"].(map[string]any)
		return g["planted"]
	}
	must(t, os.MkdirAll(filepath.Join(ws, ".git/worktrees/a"), 0o755))
	if got := report(); !reflect.DeepEqual(got, []string{filepath.Join(ws, ".git/worktrees/a")}) {
		t.Errorf("first end: %v", got)
	}
	if got := report(); got != nil {
		t.Errorf("second end, nothing new: %v", got)
	}
	must(t, os.MkdirAll(filepath.Join(ws, ".git/worktrees/b"), 0o755))
	if got := report(); !reflect.DeepEqual(got, []string{filepath.Join(ws, ".git/worktrees/b")}) {
		t.Errorf("third end: %v", got)
	}
}

// An index too large or corrupt is skipped, said by complete false; a
// corrupt one never panics the parser.
func TestGitPlantedBadIndex(t *testing.T) {
	requireSandbox(t)
	requireGit(t)
	_, ws, _ := dirs(t)
	gitRepo(t, ws)
	planted, complete, o := plantedBy(t, ws, `printf 'DIRC\0\0\0\2\177\377\377\377' > .git/index && head -c 100 /dev/zero >> .git/index`)
	if len(planted) != 0 || complete {
		t.Errorf("corrupt index: planted %v complete %v (output %s)", planted, complete, o)
	}
	max := maxIndexBytes
	maxIndexBytes = 1 << 10
	defer func() { maxIndexBytes = max }()
	_, ws, _ = dirs(t)
	gitRepo(t, ws)
	planted, complete, o = plantedBy(t, ws, `for i in $(seq 50); do echo $i > f$i; done; git add . && git `+gitID+` commit -qm big`)
	if len(planted) != 0 || complete {
		t.Errorf("index over the bound: planted %v complete %v (output %s)", planted, complete, o)
	}
}

// parseIndex reads git's own indexes, versions 2 to 4 (v4's names
// prefix-compressed), extended flags, and a split index's link; cut or
// forged ones are errors, never panics.
func TestParseIndex(t *testing.T) {
	requireGit(t)
	dir := t.TempDir()
	gitRepo(t, dir)
	hash := gitOut(t, dir, "rev-parse", "HEAD")
	for _, p := range []string{"a/one", "a/two", "b", "a/one-more/deep/x" + strings.Repeat("y", 5000)} {
		gitCmd(t, dir, "update-index", "--add", "--cacheinfo", "160000,"+hash+","+p)
	}
	gitCmd(t, dir, "update-index", "--skip-worktree", "f") // an extended flag
	want := []string{"a/one", "a/one-more/deep/x" + strings.Repeat("y", 5000), "a/two", "b"}
	index := filepath.Join(dir, ".git", "index")
	for _, v := range []string{"2", "3", "4"} {
		gitCmd(t, dir, "update-index", "--index-version", v)
		data, err := os.ReadFile(index)
		must(t, err)
		if got := binary.BigEndian.Uint32(data[4:]); got != uint32(v[0]-'0') && !(v == "2" && got == 3) {
			t.Fatalf("index version %d, want %s", got, v)
		}
		links, shared, err := parseIndex(data, 20)
		if err != nil || !reflect.DeepEqual(links, want) || shared != "" {
			t.Errorf("v%s: %q %q %v", v, links, shared, err)
		}
		for n := 0; n < len(data); n += 1 + n/7 {
			_, _, _ = parseIndex(data[:n], 20) // cut short
			cp := bytes.Clone(data)
			cp[n] ^= 0xff
			_, _, _ = parseIndex(cp, 20) // flipped
		}
	}
	gitCmd(t, dir, "update-index", "--index-version", "2")
	gitCmd(t, dir, "update-index", "--split-index")
	gitCmd(t, dir, "update-index", "--add", "--cacheinfo", "160000,"+hash+",c")
	var st unix.Stat_t
	must(t, unix.Stat(index, &st))
	links, err := readGitlinks(filepath.Join(dir, ".git"), index, &st)
	if err != nil || !slices.Contains(links, "c") || !slices.Contains(links, "a/one") {
		t.Errorf("split index (%d bytes): %q %v", st.Size, links, err)
	}
	if data, _ := os.ReadFile(index); bytes.Contains(data, []byte("a/one")) {
		t.Errorf("the split index still holds the old entries: not a split index")
	}
}

// BenchmarkGitWatch is what the check adds to a sandboxed call that
// touched no git metadata, in a repository of 500 files in 50 directories
// with a submodule (two git directories, two indexes, one gitlink): the
// record at the start (watch) and the check at the end, the indexes'
// gitlinks from the cache.
func BenchmarkGitWatch(b *testing.B) {
	requireGit(b)
	t := b
	parent := b.TempDir()
	root := filepath.Join(parent, "ws")
	for d := 0; d < 50; d++ {
		dir := filepath.Join(root, "d"+strconv.Itoa(d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := 0; f < 10; f++ {
			if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(f)), []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	gitRepo(t, root)
	src := filepath.Join(parent, "src")
	gitRepo(t, src)
	gitCmd(t, root, "submodule", "-q", "add", src, "sm")
	gitCmd(t, root, "add", ".")
	gitCmd(t, root, "commit", "-q", "-m", "all")
	cache := filepath.Join(b.TempDir(), gitlinkCache)
	// What an earlier call cached (an index is kept once it is older than
	// the margin).
	fresh := map[string][]string{}
	for _, gd := range []string{".git", ".git/modules/sm"} {
		ix := filepath.Join(root, gd, "index")
		var st unix.Stat_t
		must(b, unix.Stat(ix, &st))
		links, err := readGitlinks(filepath.Join(root, gd), ix, &st)
		must(b, err)
		fresh[indexKey(ix, &st)] = links
	}
	writeGitlinkCache(cache, fresh)
	g := newGitGuard([]string{root}, []string{root}, nil, "")
	since := coarseNow()
	since.Sec += 60 // the setup long before the start
	w := g.watch([]string{root}, since, cache)
	if links, ok := w.gitlinks(); !ok || len(links) != 1 || len(w.indexes) != 2 {
		b.Fatalf("gitlinks %v %v, indexes %v", links, ok, w.indexes)
	}
	b.Run("watch", func(b *testing.B) {
		for b.Loop() {
			g.watch([]string{root}, since, cache)
		}
	})
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			w := g.watch([]string{root}, since, cache)
			b.StartTimer()
			if planted, ok := w.check(); !ok || len(planted) > 0 {
				b.Fatal(planted, ok)
			}
		}
	})
}

// The gitlink listings are read from the cache while an index's key (its
// inode, size and times) holds, and from the index once it changed; an
// index written within the margin is not kept; a cache cut short is no
// answer.
func TestGitlinkCache(t *testing.T) {
	requireGit(t)
	root := filepath.Join(t.TempDir(), "ws")
	gitRepo(t, root)
	hash := gitOut(t, root, "rev-parse", "HEAD")
	gitCmd(t, root, "update-index", "--add", "--cacheinfo", "160000,"+hash+",real")
	cache := filepath.Join(t.TempDir(), gitlinkCache)
	links := func() []string {
		t.Helper()
		g := newGitGuard([]string{root}, []string{root}, nil, "")
		l, ok := g.watch([]string{root}, coarseNow(), cache).gitlinks()
		if !ok {
			t.Fatal("incomplete")
		}
		var out []string
		for _, p := range l {
			out = append(out, strings.TrimPrefix(p.path, root+"/"))
		}
		return out
	}
	if got := links(); !reflect.DeepEqual(got, []string{"real"}) {
		t.Fatalf("gitlinks %v", got)
	}
	if _, err := os.Stat(cache); err == nil {
		t.Errorf("an index written just now was cached")
	}
	index := filepath.Join(root, ".git", "index")
	var st unix.Stat_t
	must(t, unix.Stat(index, &st))
	writeGitlinkCache(cache, map[string][]string{indexKey(index, &st): {"from-cache"}})
	if got := links(); !reflect.DeepEqual(got, []string{"from-cache"}) {
		t.Errorf("with the cache: %v", got)
	}
	// Rewritten in place, its times set back: the change time moved.
	data, err := os.ReadFile(index)
	must(t, err)
	must(t, os.WriteFile(index, data, 0o644))
	must(t, os.Chtimes(index, time.Unix(st.Atim.Unix()), time.Unix(st.Mtim.Unix())))
	if got := links(); !reflect.DeepEqual(got, []string{"real"}) {
		t.Errorf("after a rewrite: %v", got)
	}
	must(t, unix.Stat(index, &st))
	writeGitlinkCache(cache, map[string][]string{indexKey(index, &st): {"from-cache"}})
	b, err := os.ReadFile(cache)
	must(t, err)
	must(t, os.WriteFile(cache, b[:len(b)-4], 0o600))
	if got := links(); !reflect.DeepEqual(got, []string{"real"}) {
		t.Errorf("with a cache cut short: %v", got)
	}
}

// TestGitlinkCacheSharedIndex: under split-index the gitlinks of an index
// are those of its shared index too (sharedindex.ID, named by the index),
// and the cache was keyed by the index file alone. A command rewrote the
// shared index in place (its name kept, the trailing id patched back,
// which git does not verify on a read) with a gitlink added, and planted
// that gitlink's .git: the index was unchanged, its listing came from the
// cache without the new gitlink, and git status, which reads it, recursed
// into a .git the report never named. A listing of a split index holds
// only while the shared index's key does.
func TestGitlinkCacheSharedIndex(t *testing.T) {
	requireGit(t)
	parent := t.TempDir()
	root := filepath.Join(parent, "ws")
	gitRepo(t, root)
	hash := gitOut(t, root, "rev-parse", "HEAD")
	gitCmd(t, root, "update-index", "--split-index")
	index := filepath.Join(root, ".git", "index")
	shared, _ := filepath.Glob(filepath.Join(root, ".git", "sharedindex.*"))
	if len(shared) != 1 {
		t.Fatalf("shared indexes %v", shared)
	}
	// What an earlier call's check cached (the index long unchanged).
	cache := filepath.Join(t.TempDir(), gitlinkCache)
	var st unix.Stat_t
	must(t, unix.Stat(index, &st))
	links, err := readGitlinks(filepath.Join(root, ".git"), index, &st)
	must(t, err)
	writeGitlinkCache(cache, map[string][]string{indexKey(index, &st): links})

	// The forged shared index: the same entries and a gitlink, from a
	// copy of the repository, under the old one's name and id.
	forged := filepath.Join(parent, "forged")
	if out, err := exec.Command("cp", "-a", root, forged).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	gitCmd(t, forged, "-c", "splitIndex.maxPercentChange=0", "update-index", "--add", "--cacheinfo", "160000,"+hash+",sub")
	id := strings.TrimPrefix(filepath.Base(shared[0]), "sharedindex.")
	var newShared string
	for _, s := range must1(t, filepath.Glob)(filepath.Join(forged, ".git", "sharedindex.*")) {
		if !strings.HasSuffix(s, id) {
			newShared = s
		}
	}
	data, err := os.ReadFile(newShared)
	must(t, err)
	raw, err := hex.DecodeString(id)
	must(t, err)
	copy(data[len(data)-len(raw):], raw)

	since := coarseNow()
	g := newGitGuard([]string{root}, []string{root}, nil, "")
	w := g.watch([]string{root}, since, cache)
	// The command's part: the shared index rewritten in place, the
	// gitlink's .git planted.
	must(t, os.Chmod(shared[0], 0o644))
	must(t, os.WriteFile(shared[0], data, 0o644))
	must(t, os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "sub", ".git"), []byte("gitdir: ../forged/.git\n"), 0o644))
	if out := gitOut(t, root, "ls-files", "-s", "sub"); !strings.HasPrefix(out, "160000 ") {
		t.Fatalf("git does not take the forged shared index's gitlink: %q", out)
	}
	planted, ok := w.check()
	if !ok || !slices.Contains(planted, filepath.Join(root, "sub", ".git")) {
		t.Errorf("planted %q (complete %v): the gitlink of the rewritten shared index is not reported", planted, ok)
	}
}

// must1 wraps a function of one argument that may fail.
func must1[A, R any](t testing.TB, f func(A) (R, error)) func(A) R {
	return func(a A) R {
		t.Helper()
		r, err := f(a)
		must(t, err)
		return r
	}
}

// TestGitWatchGitlinkAddedLater: the planting split over two runs (a
// job's restarts, a session's calls): the first writes sub/.git naming a
// forged git directory where the index has no gitlink (a nested
// repository of its own, not reported), or a symlink on the way to one;
// the second adds the gitlink to the index (git update-index --cacheinfo).
// Each .git was older than the second run, so its change time said
// nothing, and git status in the superproject then recursed into it. A
// gitlink the index did not have at the start is reported with the .git
// at its path, whatever its age.
func TestGitWatchGitlinkAddedLater(t *testing.T) {
	requireGit(t)
	parent := t.TempDir()
	root := filepath.Join(parent, "ws")
	gitRepo(t, root)
	hash := gitOut(t, root, "rev-parse", "HEAD")
	gitCmd(t, root, "update-index", "--add", "--cacheinfo", "160000,"+hash+",real")
	must(t, os.MkdirAll(filepath.Join(root, "real"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "real", ".git"), []byte("gitdir: ../.git/modules/real\n"), 0o644))
	tickAfter(t, filepath.Join(root, "real", ".git"))
	mid := coarseNow()
	// The first run's part.
	must(t, os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "sub", ".git"), []byte("gitdir: ../forged\n"), 0o644))
	must(t, os.MkdirAll(filepath.Join(root, "elsewhere", "in"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "elsewhere", "in", ".git"), []byte("gitdir: ../../forged\n"), 0o644))
	must(t, os.Symlink("elsewhere", filepath.Join(root, "link")))

	since := coarseNow()
	since.Sec += 60 // all of that long before the second run
	cache := filepath.Join(t.TempDir(), gitlinkCache)
	g := newGitGuard([]string{root}, []string{root}, nil, "")
	w := g.watch([]string{root}, since, cache)
	// The check begins in the tick the first run's part was written in
	// (their change times read as after it; a multigrain file system
	// stamps later than the coarse clock).
	w.clock = func() unix.Timespec { return mid }
	// The second run's part.
	gitCmd(t, root, "update-index", "--add", "--cacheinfo", "160000,"+hash+",sub")
	gitCmd(t, root, "update-index", "--add", "--cacheinfo", "160000,"+hash+",link/in")
	planted, ok := w.check()
	want := []string{filepath.Join(root, "link", "in", ".git"), filepath.Join(root, "sub", ".git")}
	if !ok || !reflect.DeepEqual(planted, want) {
		t.Errorf("planted %q (complete %v), want %q", planted, ok, want)
	}
	// Reported once: the next check knows them, though they read as
	// changed since the first check began.
	if planted, _ := w.check(); len(planted) > 0 {
		t.Errorf("reported again: %q", planted)
	}
	// Still reported again once rewritten.
	must(t, os.WriteFile(filepath.Join(root, "sub", ".git"), []byte("gitdir: ../forged/.git\n"), 0o644))
	if planted, _ := w.check(); !slices.Equal(planted, []string{filepath.Join(root, "sub", ".git")}) {
		t.Errorf("planted %q after a rewrite, want sub/.git", planted)
	}
}

// tickAfter waits for the coarse clock to pass path's change time.
func tickAfter(t *testing.T, path string) {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Lstat(path, &st))
	for now := coarseNow(); !(now.Sec > st.Ctim.Sec || now.Sec == st.Ctim.Sec && now.Nsec > st.Ctim.Nsec); now = coarseNow() {
		time.Sleep(time.Millisecond)
	}
}

// requireGit skips a test (or benchmark) on a machine without git.
func requireGit(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		tb.Skip("needs git")
	}
}
