package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteFiles writes each path's text (0644), its directories made first
// (0755): the configuration files of a test, for one.
func WriteFiles(t testing.TB, files map[string]string) {
	t.Helper()
	for path, text := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
