package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

// TestGitControl: each way to make git run a program at the user's next
// git command by writing one file in the workspace is a control file, by
// itself (every case alone, so that one rule does not hide another's
// absence), and the rest of the repository and work tree is not. (A
// repository's references are found from the path's own directories: an
// include of a repository elsewhere in the workspace that names a file
// outside its work tree is not.)
func TestGitControl(t *testing.T) {
	ws := t.TempDir()
	home := t.TempDir()
	t.Setenv("HOME", home) // git expands ~ in a config with its HOME
	for name, text := range map[string]string{
		".git/HEAD":                  "ref: refs/heads/main\n",
		".git/config":                "[core]\n\thooksPath = .husky\n[include]\n\tpath = ../extra.gitconfig\n",
		".git/modules/lib/HEAD":      "ref: refs/heads/main\n",
		".git/worktrees/w/HEAD":      "ref: refs/heads/main\n",
		".git/worktrees/w/commondir": "../..\n",
		"remote.git/HEAD":            "ref: refs/heads/main\n",
		"wt/.git":                    "gitdir: ../wtgit\n",
		"wtgit/HEAD":                 "ref: refs/heads/main\n",
		"wtgit/commondir":            "../.git\n",
		"wtgit/config.worktree":      "[include]\n\tpath = ../wt/extra\n",
		"extra.gitconfig":            "[include]\n\tpath = deeper.gitconfig\n",
	} {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{".git/objects", "remote.git/objects", ".git/modules/lib/objects", "lib", "wt/src"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("[core]\n\thooksPath = ~/myhooks\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		want bool
	}{
		{".git/hooks/pre-commit", true},
		{".git/config", true},
		{".git/commondir", true},
		{".git/config.worktree", true},
		{".git/modules/lib/hooks/post-checkout", true},
		{".git/modules/lib/config", true},
		{".git/modules/new/config", true},
		{".git/worktrees/w/config.worktree", true},
		{".git/worktrees/w/commondir", true},
		{"remote.git/hooks/post-receive", true},
		{"remote.git/config", true},
		{"lib/.git", true},
		{".git", true},
		{".GIT/hooks/pre-commit", true},
		{".Git/Config", true},
		{".g\u200cit/hooks/pre-commit", true},
		{".git\ufeff/config", true},
		{".husky/pre-commit", true},
		{"extra.gitconfig", true},
		{"deeper.gitconfig", true},
		{"wt/.git", true},
		{"wtgit/config.worktree", true},
		{"wtgit/commondir", true},
		{"wtgit/hooks/pre-commit", true},
		{"wt/extra", true},
		{".git/info/exclude", false},
		{".git/refs/heads/main", false},
		{"lib/main.go", false},
		{"hooks/readme.txt", false},
		{"lib/config", false},
		{"wt/src/config", false},
		{"remote.git/refs/heads/main", false},
	} {
		if _, got := GitControl(filepath.Join(ws, c.path), home); got != c.want {
			t.Errorf("GitControl(%s) = %v, want %v", c.path, got, c.want)
		}
	}
	for _, p := range []string{".gitconfig", "myhooks/pre-commit"} {
		if _, got := GitControl(filepath.Join(home, p), home); !got {
			t.Errorf("GitControl(~/%s) = false, want true", p)
		}
	}
}
