package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func gitCmd(t testing.TB, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.email=t@example.com", "-c", "user.name=t", "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// Class 5, nested: every existing repository below a writable root keeps
// its hooks, config and pointers read-only, and cannot be moved aside and
// replaced by a forged one: a repository nested in the workspace, a
// submodule (its .git file and its git directory under .git/modules), a
// linked worktree in an --allow-write root (its .git file, commondir, the
// common config.worktree), a core.hooksPath inside the work tree and an
// included config file. A repository the command creates itself is its
// own; git commit keeps working everywhere.
func TestEscapeNestedGit(t *testing.T) {
	requireSandbox(t)
	requireGit(t)
	parent, ws, _ := dirs(t)
	wt := filepath.Join(parent, "wt")
	gitCmd(t, ws, "init", "-q", ".")
	gitCmd(t, ws, "commit", "-q", "--allow-empty", "-m", "init")
	// A nested repository two levels down, its hooks directory missing,
	// with a relative core.hooksPath and an include.
	inner := filepath.Join(ws, "a", "inner")
	must(t, os.MkdirAll(inner, 0o755))
	gitCmd(t, inner, "init", "-q", ".")
	must(t, os.RemoveAll(filepath.Join(inner, ".git", "hooks")))
	gitCmd(t, inner, "config", "core.hooksPath", ".husky")
	gitCmd(t, inner, "config", "include.path", "../../../shared.gitconfig") // relative to inner/.git
	// A submodule.
	src := filepath.Join(parent, "src")
	must(t, os.Mkdir(src, 0o755))
	gitCmd(t, src, "init", "-q", ".")
	gitCmd(t, src, "commit", "-q", "--allow-empty", "-m", "s")
	gitCmd(t, ws, "submodule", "-q", "add", src, "mods/sm")
	// A linked worktree outside the workspace, writable with --allow-write,
	// and the worktree config extension on.
	gitCmd(t, ws, "config", "extensions.worktreeConfig", "true")
	gitCmd(t, ws, "worktree", "add", "-q", wt)
	// A bare repository used as a local remote: git push runs its hooks.
	gitCmd(t, ws, "init", "-q", "--bare", "remote.git")
	snapshot := func() map[string]string {
		m := map[string]string{}
		for _, f := range []string{".git/config", ".git/modules/mods/sm/config", "remote.git/config", "a/inner/.git/config", "mods/sm/.git", "../wt/.git",
			".git/worktrees/wt/commondir", ".git/config.worktree", "shared.gitconfig"} {
			b, _ := os.ReadFile(filepath.Join(ws, f))
			m[f] = string(b)
		}
		return m
	}
	before := snapshot()
	p := Policy{Mode: ModeWorkspaceWrite, Workspace: ws, AllowWrite: []string{wt}}
	res, prep := sandboxed(t, p, ws, "sh", "-c", `
try() { if (eval "$1") 2>/dev/null; then echo "$2: allowed"; else echo "$2: denied"; fi; }
try 'echo "#!/bin/sh" > .git/hooks/post-commit' top-hook
try 'mv .git .git-aside' top-move
try 'echo "[core] fsmonitor=evil" >> a/inner/.git/config' inner-config
try 'mkdir -p a/inner/.git/hooks && echo x > a/inner/.git/hooks/pre-commit' inner-hook
try 'echo x > a/inner/.husky/pre-commit' inner-hookspath
try 'echo "[core] fsmonitor=evil" >> shared.gitconfig' include
try 'mv a/inner a/inner-aside' inner-move
try 'mv a a-aside' ancestor-move
try 'rm -rf a/inner/.git' inner-remove
try 'echo x > remote.git/hooks/post-receive' bare-hook
try 'echo "[core] fsmonitor=evil" >> remote.git/config' bare-config
try 'echo x > .git/modules/mods/sm/hooks/post-checkout' submodule-hook
try 'echo "[core] fsmonitor=evil" >> .git/modules/mods/sm/config' submodule-config
try 'echo "gitdir: /tmp/forged" > mods/sm/.git' submodule-pointer
try 'rm mods/sm/.git' submodule-pointer-remove
try 'echo "gitdir: /tmp/forged" > ../wt/.git' worktree-pointer
try 'echo /tmp/forged > .git/worktrees/wt/commondir' worktree-commondir
try 'echo "[core] fsmonitor=evil" > .git/config.worktree' worktree-config
try 'git init -q own && echo x > own/.git/hooks/pre-commit && echo "[core] x=y" >> own/.git/config' own-repo
try 'echo x > a/inner/file && git -C a/inner add file && git -C a/inner -c user.email=t@e -c user.name=t commit -qm c' inner-commit
try 'echo x > file && git add file && git -c user.email=t@e -c user.name=t commit -qm c' top-commit
try 'echo x > ../wt/file && git -C ../wt add file && git -C ../wt -c user.email=t@e -c user.name=t commit -qm w' worktree-commit
`)
	o := out(res)
	wantLines(t, o, "top-hook: denied", "top-move: denied", "inner-config: denied", "inner-hook: denied",
		"inner-hookspath: denied", "include: denied", "inner-move: denied", "ancestor-move: denied", "inner-remove: denied",
		"bare-hook: denied", "bare-config: denied", "submodule-hook: denied", "submodule-config: denied", "submodule-pointer: denied", "submodule-pointer-remove: denied",
		"worktree-pointer: denied", "worktree-commondir: denied", "worktree-config: denied",
		"own-repo: allowed", "inner-commit: allowed", "top-commit: allowed", "worktree-commit: allowed")
	after := snapshot()
	for f, b := range before {
		if after[f] != b {
			t.Errorf("%s changed: %q -> %q", f, b, after[f])
		}
	}
	for _, f := range []string{"a/inner/.git/hooks/pre-commit", ".git/hooks/post-commit", "a/inner/.husky/pre-commit", ".git/modules/mods/sm/hooks/post-checkout"} {
		if _, err := os.Stat(filepath.Join(ws, f)); err == nil {
			t.Errorf("%s was planted", f)
		}
	}
	// rm -rf empties what is writable in it (as it could any file of the
	// workspace); the git directory itself, its hooks and config stay.
	if st, err := os.Stat(filepath.Join(ws, "a", "inner", ".git", "hooks")); err != nil || !st.IsDir() {
		t.Errorf("the nested repository's hooks were moved or removed: %v", err)
	}
	g, _ := prep.Report["git"].(map[string]any)
	if g == nil || g["repositories"] != 5 || g["complete"] != true {
		t.Errorf("report git = %v", prep.Report["git"])
	}
	t.Logf("protected: %v", prep.Report["protected"])
	if strings.Contains(o, "allowed") && t.Failed() {
		t.Logf("output:\n%s\nstderr: %s", o, text(res.Stderr))
	}
}

// The search is bounded: a repository past the depth bound or the
// directory budget is not protected, and the report says the search was
// incomplete.
func TestGitSearchBounds(t *testing.T) {
	root := t.TempDir()
	deep := root
	for i := 0; i < 4; i++ {
		deep = filepath.Join(deep, "d")
	}
	must(t, os.MkdirAll(filepath.Join(deep, ".git", "hooks"), 0o755))
	must(t, os.WriteFile(filepath.Join(deep, ".git", "config"), nil, 0o644))
	shallow := filepath.Join(root, "s")
	must(t, os.MkdirAll(filepath.Join(shallow, ".git", "hooks"), 0o755))
	must(t, os.WriteFile(filepath.Join(shallow, ".git", "config"), nil, 0o644))
	cases := []struct {
		name     string
		depth    int
		dirs     int
		repos    int
		complete bool
	}{
		{"unbounded", 10, 1000, 2, true},
		{"depth", 2, 1000, 1, false},
		{"budget", 10, 2, 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, n := gitSearchDepth, gitSearchDirs
			gitSearchDepth, gitSearchDirs = c.depth, c.dirs
			defer func() { gitSearchDepth, gitSearchDirs = d, n }()
			ro, _, repos, complete := gitProtection([]string{root}, []string{root}, nil, "")
			if repos != c.repos || complete != c.complete {
				t.Errorf("repos %d complete %v, want %d %v (ro %v)", repos, complete, c.repos, c.complete, ro)
			}
		})
	}
}

// A repository inside a protected directory (the state directory in a
// --workspace ~) is not searched: a pin there would be a writable mount
// inside the read-only bind.
func TestGitSearchSkipsProtected(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, "state")
	must(t, os.MkdirAll(filepath.Join(state, "jobs", "r", ".git", "hooks"), 0o755))
	_, pins, repos, _ := gitProtection([]string{root}, []string{root}, []string{state}, "")
	for _, p := range pins {
		if strings.HasPrefix(p, state) {
			t.Errorf("pinned %s inside the protected %s", p, state)
		}
	}
	if repos != 0 {
		t.Errorf("found %d repositories inside the protected directory", repos)
	}
}

// BenchmarkGitProtection is the search's cost on this repository (about
// 90 directories): what a sandboxed call in it pays.
func BenchmarkGitProtection(b *testing.B) {
	root, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		gitProtection([]string{root}, []string{root}, nil, "")
	}
}
