package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&fs.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}, result.CodeNoSpace},
		{fmt.Errorf("wrapped: %w", syscall.EDQUOT), result.CodeNoSpace},
		{&fs.PathError{Op: "open", Path: "x", Err: syscall.EROFS}, result.CodeStateReadOnly},
		{corrupt("status.json", errors.New("bad")), result.CodeStateCorrupt},
		{fs.ErrNotExist, ""},
		{nil, ""},
	} {
		got := ""
		if e := Classify(tc.err); e != nil {
			got = e.Code
		}
		if got != tc.want {
			t.Errorf("Classify(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestReadJSONCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.json")
	if err := os.WriteFile(path, []byte("\x00{"), 0o600); err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := ReadJSON(path, &v); !IsCorrupt(err) {
		t.Fatalf("garbage: %v", err)
	}
	if err := ReadJSON(path+".missing", &v); !errors.Is(err, fs.ErrNotExist) || IsCorrupt(err) {
		t.Fatalf("missing: %v", err)
	}
}

// TestNextIDRepairing: a garbage counter fails NextID with state_corrupt,
// and NextIDRepairing goes on after the floor.
func TestNextIDRepairing(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := d.NextID("job"); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(d.Join("ids", "job"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.NextID("job"); !IsCorrupt(err) {
		t.Fatalf("NextID on a garbage counter: %v", err)
	}
	n, err := d.NextIDRepairing("job", func() uint64 { return 7 })
	if err != nil || n != 8 {
		t.Fatalf("repaired: %d, %v", n, err)
	}
	if n, err := d.NextID("job"); err != nil || n != 9 {
		t.Fatalf("after the repair: %d, %v", n, err)
	}
}

// TestRemoveTemps removes the temp files of the named bases only.
func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{".status.json.tmp123", ".status.json.tmp", ".other.json.tmp9", "status.json", ".status.json.lock"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	RemoveTemps(dir, "status.json")
	ents, _ := os.ReadDir(dir)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	sort.Strings(left)
	if fmt.Sprint(left) != "[.other.json.tmp9 .status.json.lock status.json]" {
		t.Fatalf("left %v", left)
	}
}

// TestLockSharedReadOnly takes a shared lock on a lock file that cannot
// be opened for writing (mode 0400; as root, a file on a read-only
// mount is what stops the write, see the jobs tests).
func TestLockSharedReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	if err := os.WriteFile(path, nil, 0o400); err != nil {
		t.Fatal(err)
	}
	unlock, err := LockShared(path)
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	// A missing lock file is created, read-only.
	unlock, err = LockShared(path + ".new")
	if err != nil {
		t.Fatal(err)
	}
	unlock()
}
