package run

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCwd(t *testing.T) {
	wd := t.TempDir()
	if real, err := filepath.EvalSymlinks(wd); err == nil {
		wd = real // os.Getwd reports the resolved directory
	}
	t.Chdir(wd)
	for _, tc := range []struct{ dir, want string }{
		{"", wd},
		{".", wd},
		{"src", filepath.Join(wd, "src")},
		{"a/../b/", filepath.Join(wd, "b")},
		{"../up", filepath.Join(filepath.Dir(wd), "up")},
		{"/abs/./x/..", "/abs"},
		{"/", "/"},
	} {
		got, ok := Cwd(tc.dir)
		if got != tc.want || !ok {
			t.Errorf("Cwd(%q) = %q, %v; want %q, true", tc.dir, got, ok, tc.want)
		}
	}
}

// TestCwdRemoved: a working directory removed under the process resolves
// against "/" and says so, rather than failing the call or naming a
// directory that is gone; an absolute dir does not need it.
func TestCwdRemoved(t *testing.T) {
	gone := filepath.Join(t.TempDir(), "gone")
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(gone)
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Getwd(); err == nil {
		t.Skip("os.Getwd still answers for a removed directory here")
	}
	for _, tc := range []struct {
		dir, want string
		ok        bool
	}{
		{"", "/", false},
		{"rel", "/rel", false},
		{"/abs", "/abs", true},
	} {
		if got, ok := Cwd(tc.dir); got != tc.want || ok != tc.ok {
			t.Errorf("Cwd(%q) = %q, %v; want %q, %v", tc.dir, got, ok, tc.want, tc.ok)
		}
	}
}
