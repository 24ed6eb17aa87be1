package files

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

// newTestFS returns an FS confined to a fresh directory, with history in
// another, and the root's path.
func newTestFS(t testing.TB) (*FS, string) {
	t.Helper()
	root := t.TempDir()
	return &FS{Root: root, Dir: root, HistoryDir: t.TempDir()}, root
}

func put(t testing.TB, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func get(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func code(err error) string {
	if err == nil {
		return ""
	}
	var e *result.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return "untyped: " + err.Error()
}

func details(err error) map[string]any {
	var e *result.Error
	if errors.As(err, &e) {
		return e.Details
	}
	return nil
}

// entriesOf lists a directory tree, so tests can assert that nothing (no
// temp or backup file) was left behind.
func entriesOf(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func noSideFiles(t testing.TB, dir string) {
	t.Helper()
	for _, e := range entriesOf(t, dir) {
		if strings.Contains(e, ".agentfs-") {
			t.Fatalf("left behind: %s", e)
		}
	}
}
