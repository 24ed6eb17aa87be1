package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// The sweep of leftovers runs at most once per sweepEvery, and nothing
// planted in the shared temp dir can switch it off.
func TestSweepDue(t *testing.T) {
	stampOf := func(dir string) string { return filepath.Join(dir, sweepStamp+strconv.Itoa(os.Getuid())) }
	old := time.Now().Add(-2 * sweepEvery)
	tests := []struct {
		name  string
		plant func(t *testing.T, stamp string)
		first bool // sweepDue's first answer
	}{
		{"no stamp", func(*testing.T, string) {}, true},
		{"fresh stamp", func(t *testing.T, stamp string) { must(t, os.WriteFile(stamp, nil, 0o600)) }, false},
		{"old stamp", func(t *testing.T, stamp string) {
			must(t, os.WriteFile(stamp, nil, 0o600))
			must(t, os.Chtimes(stamp, old, old))
		}, true},
		{"stamp from the future", func(t *testing.T, stamp string) {
			must(t, os.WriteFile(stamp, nil, 0o600))
			future := time.Now().Add(time.Hour)
			must(t, os.Chtimes(stamp, future, future))
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.plant(t, stampOf(dir))
			if got := sweepDue(dir); got != tc.first {
				t.Fatalf("first sweepDue = %v, want %v", got, tc.first)
			}
			// Whatever the first answer, the stamp now says "just swept".
			if sweepDue(dir) {
				t.Fatal("a second call within sweepEvery sweeps again")
			}
		})
	}
}

// A symlink or a hard link planted as the stamp neither suppresses the
// sweep nor gets its target's times changed; a stamp of another user never
// suppresses it.
func TestSweepDuePlanted(t *testing.T) {
	dir := t.TempDir()
	stamp := filepath.Join(dir, sweepStamp+strconv.Itoa(os.Getuid()))
	target := filepath.Join(t.TempDir(), "victim")
	must(t, os.WriteFile(target, nil, 0o600))
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	must(t, os.Chtimes(target, old, old))
	must(t, os.Symlink(target, stamp))
	for i := 0; i < 3; i++ {
		if !sweepDue(dir) {
			t.Fatalf("call %d: a symlinked stamp suppressed the sweep", i)
		}
	}
	if st, err := os.Stat(target); err != nil || !st.ModTime().Equal(old) {
		t.Fatalf("the symlink's target was touched: %v %v", st.ModTime(), err)
	}
	// A second name of another file of the user's (a hard link): its
	// times are not set through the stamp, and it never suppresses a
	// sweep, old or fresh.
	must(t, os.Remove(stamp))
	must(t, os.Link(target, stamp))
	for i := 0; i < 3; i++ {
		if !sweepDue(dir) {
			t.Fatalf("call %d: a hard-linked stamp suppressed the sweep", i)
		}
	}
	if st, err := os.Stat(target); err != nil || !st.ModTime().Equal(old) {
		t.Fatalf("the hard link's other name was touched: %v %v", st.ModTime(), err)
	}
	now := time.Now()
	must(t, os.Chtimes(target, now, now))
	if !sweepDue(dir) {
		t.Fatal("a hard link to a file changed just now suppressed the sweep")
	}
	if os.Getuid() != 0 {
		return
	}
	must(t, os.Remove(stamp))
	must(t, os.WriteFile(stamp, nil, 0o600))
	must(t, os.Chown(stamp, 65534, 65534))
	for i := 0; i < 2; i++ {
		if !sweepDue(dir) {
			t.Fatalf("call %d: another user's stamp suppressed the sweep", i)
		}
	}
}
