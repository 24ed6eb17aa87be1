package files

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"
)

// snapshot is everything a dry run must leave alone: every file's bytes,
// mode and mtime under the root, and every file of the undo history.
type snapshot map[string]string

func takeSnapshot(t *testing.T, dirs ...string) snapshot {
	t.Helper()
	s := snapshot{}
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			v := fi.Mode().String() + " " + fi.ModTime().Format(time.RFC3339Nano)
			if fi.Mode().IsRegular() {
				b, _ := os.ReadFile(p)
				v += " " + string(b)
			}
			s[p] = v
			return nil
		})
	}
	return s
}

func (s snapshot) diff(o snapshot) []string {
	var out []string
	for k, v := range s {
		if o[k] != v {
			out = append(out, k)
		}
	}
	for k := range o {
		if _, ok := s[k]; !ok {
			out = append(out, k+" (new)")
		}
	}
	sort.Strings(out)
	return out
}

// TestDryRunTouchesNothing: a dry run of every mutating operation returns
// the result the real run returns (texts, diff, hashes, edits), and leaves
// every byte, mode and mtime of the files and the undo history as it was;
// it creates no parent directory, and refuses what the real run refuses.
func TestDryRunTouchesNothing(t *testing.T) {
	ops := []struct {
		name string
		run  func(f *FS) (any, error)
	}{
		{"write", func(f *FS) (any, error) { return f.Write("f.txt", []byte("new\n"), WriteOptions{}) }},
		{"write creating dirs", func(f *FS) (any, error) { return f.Write("a/b/c.txt", []byte("x\n"), WriteOptions{}) }},
		{"append", func(f *FS) (any, error) { return f.Write("f.txt", []byte("more\n"), WriteOptions{Append: true}) }},
		{"edit", func(f *FS) (any, error) { return f.Edit("f.txt", []EditSpec{{Old: "two", New: "2"}}, EditOptions{}) }},
		{"fuzzy edit", func(f *FS) (any, error) {
			return f.Edit("f.txt", []EditSpec{{Old: "  two", New: "  2\n  3"}}, EditOptions{Fuzzy: true})
		}},
		{"insert", func(f *FS) (any, error) { return f.Insert("f.txt", 1, "one and a half", InsertOptions{}) }},
		{"undo", func(f *FS) (any, error) { return f.Undo("f.txt") }},
		{"apply", func(f *FS) (any, error) {
			return f.Apply([]Change{{Action: ActionUpdate, Path: "f.txt", NewContent: []byte("patched\n")},
				{Action: ActionAdd, Path: "n/new.txt", NewContent: []byte("added\n")}}, ApplyOptions{})
		}},
		{"refused edit", func(f *FS) (any, error) { return f.Edit("f.txt", []EditSpec{{Old: "absent", New: "x"}}, EditOptions{}) }},
		{"refused write", func(f *FS) (any, error) {
			return f.Write("f.txt", []byte("x"), WriteOptions{ExpectAbsent: true})
		}},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			// Two identical worlds: one for the dry run, one for the real one.
			setup := func() (*FS, string) {
				fsys, root := newTestFS(t)
				put(t, filepath.Join(root, "f.txt"), "\uFEFFone\n\ttwo\n")
				// A change recorded in history, so undo has something to do.
				if _, err := fsys.Write("f.txt", []byte("\uFEFFone\r\ntwo\r\n"), WriteOptions{}); err != nil {
					t.Fatal(err)
				}
				old := time.Now().Add(-time.Hour)
				_ = os.Chtimes(filepath.Join(root, "f.txt"), old, old)
				return fsys, root
			}
			dry, dryRoot := setup()
			before := takeSnapshot(t, dryRoot, dry.HistoryDir)
			dry.DryRun = true
			got, gotErr := op.run(dry)
			if d := before.diff(takeSnapshot(t, dryRoot, dry.HistoryDir)); len(d) > 0 {
				t.Fatalf("the dry run changed %v", d)
			}
			real, _ := setup()
			want, wantErr := op.run(real)
			if code(gotErr) != code(wantErr) {
				t.Fatalf("dry run error %v, real run %v", gotErr, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("dry run reported\n%+v\nreal run\n%+v", got, want)
			}
		})
	}
}
