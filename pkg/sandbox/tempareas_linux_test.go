package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// waitFor polls cond with a generous bound.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 60s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Class: other runs' private temp dirs. Run A keeps a file in its TMPDIR
// and waits; run B, concurrent, tries to read it, list the temp area and
// plant a file in A's TMPDIR. The file is there on the host all along (so
// the attack would work without the cover).
func TestEscapeOtherRunsTemp(t *testing.T) {
	requireSandbox(t)
	for _, c := range []struct {
		name string
		p    func(ws string) Policy
	}{
		{"workspace-write", func(ws string) Policy { return Policy{Mode: ModeWorkspaceWrite, Workspace: ws} }},
		{"read-only", func(ws string) Policy { return Policy{Mode: ModeReadOnly} }},
		{"limits only", func(ws string) Policy { return Policy{Nofile: 256} }},
		{"workspace contains the temp area", func(ws string) Policy {
			return Policy{Mode: ModeWorkspaceWrite, Workspace: os.TempDir()}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, ws, _ := dirs(t)
			ready, release := filepath.Join(ws, "ready"), filepath.Join(ws, "release")
			done := make(chan string, 1)
			go func() {
				defer close(done)
				// Waits (bounded) for the release file the test writes.
				res, _ := sandboxed(t, Policy{Mode: ModeWorkspaceWrite, Workspace: ws}, ws, "sh", "-c", `
echo TOPSECRET > "$TMPDIR/secret"
echo "$TMPDIR" > ready.tmp && mv ready.tmp ready
i=0; while [ ! -e release ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
cat "$TMPDIR/planted" 2>/dev/null || echo not-planted`)
				done <- out(res)
			}()
			var aTmp string
			waitFor(t, func() bool {
				b, err := os.ReadFile(ready)
				aTmp = strings.TrimSpace(string(b))
				return err == nil && aTmp != ""
			})
			if b, err := os.ReadFile(filepath.Join(aTmp, "secret")); err != nil || !strings.Contains(string(b), "TOPSECRET") {
				t.Fatalf("control: run A's secret is not on the host: %q %v", b, err)
			}
			area := filepath.Dir(filepath.Dir(aTmp))
			res, _ := sandboxed(t, c.p(ws), "/", "sh", "-c", `
A="$1"
cat "$A/secret" 2>/dev/null || echo read: denied
ls "$(dirname "$A")" 2>/dev/null | grep -q . && echo list-run: allowed || echo list-run: denied
ls -A "$2" 2>/dev/null | grep -v "^$(basename "$(dirname "$TMPDIR")")\$" | grep -q . && echo list-area: other runs || echo list-area: only mine
echo x > "$A/planted" 2>/dev/null && echo plant: allowed || echo plant: denied
echo mine > "$TMPDIR/f" && cat "$TMPDIR/f"`, "sh", aTmp, area)
			must(t, os.WriteFile(release, nil, 0o644))
			o := out(res)
			if strings.Contains(o, "TOPSECRET") {
				t.Errorf("run B read run A's temp file:\n%s", o)
			}
			wantLines(t, o, "read: denied", "list-run: denied", "list-area: only mine", "plant: denied", "mine")
			if a := <-done; !strings.Contains(a, "not-planted") {
				t.Errorf("run A saw a planted file: %q", a)
			}
		})
	}
}

// Other uids' areas are found in a TMPDIR below a symlink too, and only
// directories of the numeric uid they name count.
func TestTempAreasOtherUIDs(t *testing.T) {
	requireRoot(t)
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	must(t, os.Symlink(real, link))
	t.Setenv("TMPDIR", link)
	other := filepath.Join(real, areaPrefix+"4242")
	must(t, os.Mkdir(other, 0o711))
	must(t, os.Chown(other, 4242, 4242))
	must(t, os.Mkdir(filepath.Join(real, areaPrefix+"4343"), 0o711)) // root's
	must(t, os.Mkdir(filepath.Join(real, areaPrefix+"x"), 0o711))
	must(t, os.WriteFile(filepath.Join(real, areaPrefix+"77"), nil, 0o600))
	must(t, os.Symlink(other, filepath.Join(real, areaPrefix+"78")))
	_, areas, err := tempAreas("")
	must(t, err)
	var found []string
	for _, a := range areas {
		if filepath.Dir(a) == real {
			found = append(found, filepath.Base(a))
		}
	}
	own := areaPrefix + strconv.Itoa(os.Geteuid())
	if !slices.Equal(found, []string{own, areaPrefix + "4242"}) {
		t.Errorf("areas in the temp dir: %v, want [%s %s4242]", found, own, areaPrefix)
	}
}

// The listing of the temp dir is reused only while the directory's time
// says nothing changed, and is not kept when the directory changed within
// areaCacheMargin before it (a change in the same clock tick would leave
// the time as it was). Setting the time back, which only root can, is
// the only way past it: the test does that to see the cache used.
func TestTempAreasCache(t *testing.T) {
	requireRoot(t)
	real := t.TempDir()
	t.Setenv("TMPDIR", real)
	found := func() []string {
		t.Helper()
		_, areas, err := tempAreas("")
		must(t, err)
		var out []string
		for _, a := range areas {
			if filepath.Dir(a) == real && a != filepath.Join(real, areaPrefix+strconv.Itoa(os.Geteuid())) {
				out = append(out, filepath.Base(a))
			}
		}
		slices.Sort(out)
		return out
	}
	plant := func(uid string, mtime time.Time) {
		t.Helper()
		must(t, os.Mkdir(filepath.Join(real, areaPrefix+uid), 0o711))
		id, _ := strconv.Atoi(uid)
		must(t, os.Chown(filepath.Join(real, areaPrefix+uid), id, id))
		if !mtime.IsZero() {
			must(t, os.Chtimes(real, mtime, mtime))
		}
	}
	// Changed just now: listed, not kept; a change in the same tick is
	// seen by the next call.
	plant("4201", time.Time{})
	st, err := os.Stat(real)
	must(t, err)
	recent := st.ModTime()
	if got := found(); !slices.Equal(got, []string{areaPrefix + "4201"}) {
		t.Fatalf("areas %v", got)
	}
	plant("4202", recent)
	if got := found(); !slices.Equal(got, []string{areaPrefix + "4201", areaPrefix + "4202"}) {
		t.Fatalf("a change in the same tick as the last listing was missed: %v", got)
	}
	// Quiet for long enough: the listing is kept and reused.
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	must(t, os.Chtimes(real, past, past))
	if got := found(); len(got) != 2 {
		t.Fatalf("areas %v", got)
	}
	plant("4203", past) // behind the cache's back
	if got := found(); len(got) != 2 {
		t.Fatalf("the cached listing was not used: %v", got)
	}
	// Any change of the directory is seen.
	plant("4204", time.Time{})
	want := []string{areaPrefix + "4201", areaPrefix + "4202", areaPrefix + "4203", areaPrefix + "4204"}
	if got := found(); !slices.Equal(got, want) {
		t.Fatalf("areas after a change %v, want %v", got, want)
	}
	must(t, os.Remove(filepath.Join(real, areaPrefix+"4201")))
	if got := found(); !slices.Equal(got, want[1:]) {
		t.Fatalf("areas after a removal %v, want %v", got, want[1:])
	}
	// A cache file cut short, holding a path or kept under the rules
	// before the owners were checked (no version) is no answer.
	must(t, os.Chtimes(real, past, past))
	var ust unix.Stat_t
	must(t, unix.Stat(real, &ust))
	key := fmt.Sprintf("%s %d %d %d %d", areaCacheVersion, ust.Dev, ust.Ino, ust.Mtim.Sec, ust.Mtim.Nsec)
	cache := filepath.Join(real, areaPrefix+strconv.Itoa(os.Geteuid()), areaCache)
	oldKey := strings.TrimPrefix(key, areaCacheVersion+" ")
	for _, bad := range []string{"", key + "\n" + areaPrefix + "4202\n", key + "\n" + areaPrefix + "1/../../etc\nend\n", key + "\nend", oldKey + "\n" + areaPrefix + "4202\nend\n"} {
		must(t, os.WriteFile(cache, []byte(bad), 0o600))
		if got := found(); !slices.Equal(got, want[1:]) {
			t.Fatalf("cache %q: areas %v", bad, got)
		}
	}
	// The control: a well-formed cache with that key is believed.
	must(t, os.WriteFile(cache, []byte(key+"\n"+areaPrefix+"4202\nend\n"), 0o600))
	if got := found(); !slices.Equal(got, want[1:2]) {
		t.Fatalf("a well-formed cache was not used: %v", got)
	}
}
