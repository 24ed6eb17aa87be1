package patch

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

// memTree is a directory tree in memory: slash paths to contents. It stands
// in for the disk and for pkg/files' commit in these tests.
type memTree map[string][]byte

// read behaves like the CLI's reader: absent files satisfy fs.ErrNotExist,
// a path that is a directory (a prefix of a file) is is_directory.
func (t memTree) read(p string) ([]byte, error) {
	if b, ok := t[p]; ok {
		return append([]byte{}, b...), nil
	}
	for k := range t {
		if strings.HasPrefix(k, p+"/") {
			return nil, result.Errorf("is_directory", "%s is a directory", p)
		}
	}
	return nil, fmt.Errorf("open %s: %w", p, fs.ErrNotExist)
}

// commit applies changes, checking the preconditions a real committer
// checks, so a plan that lies about OldContent fails the test.
func (t memTree) commit(changes []Change) error {
	for _, c := range changes {
		cur, ok := t[c.Path]
		switch c.Action {
		case ActionAdd:
			if ok {
				return fmt.Errorf("add %s: exists", c.Path)
			}
			t[c.Path] = c.NewContent
		case ActionUpdate:
			if !ok || !bytes.Equal(cur, c.OldContent) {
				return fmt.Errorf("update %s: stale or missing", c.Path)
			}
			t[c.Path] = c.NewContent
		case ActionDelete:
			if !ok || !bytes.Equal(cur, c.OldContent) {
				return fmt.Errorf("delete %s: stale or missing", c.Path)
			}
			delete(t, c.Path)
		case ActionMove:
			if !ok || !bytes.Equal(cur, c.OldContent) {
				return fmt.Errorf("move %s: stale or missing", c.Path)
			}
			dst, dok := t[c.MoveTo]
			if dok != (c.MoveToOldContent != nil) || (dok && !bytes.Equal(dst, c.MoveToOldContent)) {
				return fmt.Errorf("move to %s: destination state differs from plan", c.MoveTo)
			}
			delete(t, c.Path)
			t[c.MoveTo] = c.NewContent
		default:
			return fmt.Errorf("unknown action %q", c.Action)
		}
	}
	return nil
}

func (t memTree) clone() memTree {
	c := memTree{}
	for k, v := range t {
		c[k] = append([]byte{}, v...)
	}
	return c
}

// loadTree reads a directory into a memTree; a missing directory is empty.
func loadTree(tb testing.TB, dir string) memTree {
	tb.Helper()
	t := memTree{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		t[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		tb.Fatal(err)
	}
	return t
}

// diffTrees describes how got differs from want, or "" when equal.
func diffTrees(got, want memTree) string {
	var keys []string
	seen := map[string]bool{}
	for k := range got {
		keys, seen[k] = append(keys, k), true
	}
	for k := range want {
		if !seen[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case !gok:
			fmt.Fprintf(&b, "missing %s (want %q)\n", k, w)
		case !wok:
			fmt.Fprintf(&b, "unexpected %s = %q\n", k, g)
		case !bytes.Equal(g, w):
			fmt.Fprintf(&b, "%s = %q, want %q\n", k, g, w)
		}
	}
	return b.String()
}
