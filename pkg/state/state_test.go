package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/result"
)

// helperEnv selects a helper mode of the test binary, so tests can run
// real concurrent processes against one state directory.
const helperEnv = "STATE_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "open":
		d, err := Open(os.Getenv("STATE_TEST_DIR"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Stdout.WriteString(d.Mint("job", "1"))
		os.Exit(0)
	case "append":
		d, err := Open(os.Getenv("STATE_TEST_DIR"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		n, _ := strconv.Atoi(os.Getenv("STATE_TEST_N"))
		for i := 0; i < n; i++ {
			if _, err := d.AppendEvent(Event{Type: "started", Handle: os.Getenv("STATE_TEST_TAG")}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		os.Exit(0)
	}
	os.Exit(2)
}

func helper(t *testing.T, mode, dir string, extra ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "STATE_TEST_DIR="+dir)
	cmd.Env = append(cmd.Env, extra...)
	return cmd
}

func TestDefaultDir(t *testing.T) {
	env := func(m map[string]string) func(string) string {
		return func(k string) string { return m[k] }
	}
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"AGENTPLANE_STATE_DIR": "/s", "XDG_STATE_HOME": "/x"}, "/s"},
		{map[string]string{"XDG_STATE_HOME": "/x"}, "/x/agentplane"},
		{map[string]string{"XDG_STATE_HOME": "relative"}, "/home/u/.local/state/agentplane"},
		{nil, "/home/u/.local/state/agentplane"},
	}
	for _, c := range cases {
		if got := DefaultDir(env(c.env), "/home/u"); got != c.want {
			t.Errorf("DefaultDir(%v) = %q, want %q", c.env, got, c.want)
		}
	}
	// Without an absolute HOME (cron, env -i), the user database's home:
	// before, ".local/state/agentplane" below the working directory, which
	// in /tmp another user can make first.
	u, err := user.LookupId(strconv.Itoa(os.Geteuid()))
	if err != nil || !filepath.IsAbs(u.HomeDir) {
		t.Skipf("no home in the user database: %v", err)
	}
	for _, home := range []string{"", ".", "tmp/home"} {
		if got, want := DefaultDir(env(nil), home), filepath.Join(u.HomeDir, ".local", "state", "agentplane"); got != want {
			t.Errorf("DefaultDir with HOME=%q = %q, want %q", home, got, want)
		}
	}
}

func TestOpenCreatesPrivateDirAndKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v, %v", fi.Mode(), err)
	}
	ki, err := os.Stat(filepath.Join(dir, keyFile))
	if err != nil || ki.Mode().Perm() != 0o600 || ki.Size() != keySize {
		t.Fatalf("key %v %d, %v", ki.Mode(), ki.Size(), err)
	}
	d2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(d.key, d2.key) {
		t.Fatal("reopening changed the key")
	}
}

// TestOpenRefusesPlantedDir: a state directory that others can write to
// (a world-writable one someone made in /tmp), or a key file someone else
// can read, is not this user's environment: whoever planted it could read
// the key and forge handles, or plant files in it. Open refuses.
func TestOpenRefusesPlantedDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "st")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Fatalf("a world-writable state directory: %v", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, keyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("a key others can read: %v", err)
	}
}

func TestConcurrentFirstOpenGoroutines(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "st")
	keys := make([][]byte, 20)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			d, err := Open(dir)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = d.key
		})
	}
	wg.Wait()
	for i := range keys {
		if !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("opener %d got a different key", i)
		}
	}
	assertNoTemps(t, dir)
}

func TestConcurrentFirstOpenProcesses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "st")
	cmds := make([]*exec.Cmd, 20)
	outs := make([]bytes.Buffer, 20)
	for i := range cmds {
		cmds[i] = helper(t, "open", dir)
		cmds[i].Stdout = &outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
	}
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := d.Mint("job", "1")
	for i := range outs {
		if outs[i].String() != want {
			t.Fatalf("process %d minted %q with a different key than %q", i, outs[i].String(), want)
		}
	}
	assertNoTemps(t, dir)
}

func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != keyFile {
			t.Errorf("unexpected file %s left in state dir", e.Name())
		}
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	for i := 0; i < 3; i++ {
		if err := WriteJSONAtomic(p, map[string]int{"n": i}, 0o600); err != nil {
			t.Fatal(err)
		}
		var v map[string]int
		if err := ReadJSON(p, &v); err != nil || v["n"] != i {
			t.Fatalf("read back %v, %v", v, err)
		}
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("temp files left: %v", ents)
	}
	if err := WriteFileAtomic(filepath.Join(dir, "missing", "x"), nil, 0o600); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

// TestWriteFileAtomicReadersSeeWholeFiles has readers race a writer that
// alternates two different contents; every read must be one of them.
func TestWriteFileAtomicReadersSeeWholeFiles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	a, b := bytes.Repeat([]byte("a"), 100000), bytes.Repeat([]byte("b"), 50000)
	if err := WriteFileAtomic(p, a, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			got, err := os.ReadFile(p)
			if err != nil || !(bytes.Equal(got, a) || bytes.Equal(got, b)) {
				t.Errorf("reader saw %d bytes, %v", len(got), err)
				return
			}
		}
	})
	for i := 0; i < 30; i++ {
		data := a
		if i%2 == 0 {
			data = b
		}
		if err := WriteFileAtomic(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	wg.Wait()
}

func TestLockExcludes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	unlock, err := Lock(p)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	go func() {
		u, err := LockShared(p)
		if err == nil {
			u()
		}
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("shared lock granted while exclusive held")
	case <-time.After(50 * time.Millisecond):
		// Absence of an event can only be observed over some time; this
		// does not synchronise anything, it bounds the check.
	}
	unlock()
	<-got
	u1, err := LockShared(p)
	if err != nil {
		t.Fatal(err)
	}
	u2, err := LockShared(p)
	if err != nil {
		t.Fatal(err)
	}
	u1()
	u2()
}

func TestNextIDConcurrentUnique(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Go(func() {
			for j := 0; j < 5; j++ {
				n, err := d.NextID("job")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[n] {
					t.Errorf("id %d allocated twice", n)
				}
				seen[n] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if last, _ := d.LastID("job"); last != 100 || len(seen) != 100 {
		t.Fatalf("last id %d, %d distinct", last, len(seen))
	}
	if _, err := d.NextID("../x"); err == nil {
		t.Fatal("path-like kind accepted")
	}
}

func TestHandles(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// An id no random handle can hold by chance (a short one like "42"
	// turns up in about 3% of handles, which made this test flaky).
	const jobID = "job-id-4217"
	h := d.Mint("job", jobID)
	if id, err := d.Parse("job", h); err != nil || id != jobID {
		t.Fatalf("round trip: %q, %v", id, err)
	}
	if bytes.Contains([]byte(h), []byte(jobID)) || bytes.Contains([]byte(h), []byte("4217")) {
		t.Errorf("handle %s shows its id", h)
	}
	if _, err := d.Parse("ses", h); !isInvalid(err) {
		t.Errorf("job handle accepted as session: %v", err)
	}
	if _, err := other.Parse("job", h); !isInvalid(err) {
		t.Errorf("other environment accepted the handle: %v", err)
	}
	for i := len("job_"); i < len(h); i++ {
		for _, c := range handleAlphabet {
			if byte(c) == h[i] {
				continue
			}
			alt := h[:i] + string(c) + h[i+1:]
			if _, err := d.Parse("job", alt); !isInvalid(err) {
				t.Fatalf("altered handle %s accepted: %v", alt, err)
			}
		}
	}
	for _, bad := range []string{"", "job_", "job", "job_x", h + "a", h[:len(h)-1], "JOB" + h[3:]} {
		if _, err := d.Parse("job", bad); !isInvalid(err) {
			t.Errorf("Parse(%q): %v", bad, err)
		}
	}
}

func isInvalid(err error) bool {
	var e *result.Error
	return errors.As(err, &e) && e.Code == result.CodeInvalidHandle
}

func FuzzParseHandle(f *testing.F) {
	d, err := Open(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(d.Mint("job", "1"))
	f.Add(d.Mint("ses", "123456"))
	f.Add("job_aaaa")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := d.Parse("job", s)
		if err != nil {
			if !isInvalid(err) {
				t.Fatalf("error without invalid_handle code: %v", err)
			}
			return
		}
		// Only handles this environment minted may parse, and then they
		// must be exactly the canonical handle of their id.
		if d.Mint("job", id) != s {
			t.Fatalf("%q parsed to id %q but that id's handle is %q", s, id, d.Mint("job", id))
		}
	})
}

func TestEventsSeqMonotonicAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	const procs, each = 20, 10
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmds[i] = helper(t, "append", dir, "STATE_TEST_N="+strconv.Itoa(each), "STATE_TEST_TAG=p"+strconv.Itoa(i))
		var errb bytes.Buffer
		cmds[i].Stderr = &errb
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("appender %d: %v %s", i, err, c.Stderr)
		}
	}
	d, _ := Open(dir)
	evs, err := d.ReadEvents(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != procs*each {
		t.Fatalf("%d events, want %d", len(evs), procs*each)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
	mine, _ := d.ReadEvents(150, func(e Event) bool { return e.Handle == "p3" })
	for _, e := range mine {
		if e.Seq <= 150 || e.Handle != "p3" {
			t.Fatalf("filter let through %+v", e)
		}
	}
}

func TestEventsTornTail(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := d.AppendEvent(Event{Type: "started"}); err != nil {
			t.Fatal(err)
		}
	}
	// A crash in the middle of a write leaves a partial line.
	f, err := os.OpenFile(d.Join(eventsFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"seq":4,"time":"2026-`)
	f.Close()
	evs, err := d.ReadEvents(0, nil)
	if err != nil || len(evs) != 3 {
		t.Fatalf("readers saw %d events, %v", len(evs), err)
	}
	e, err := d.AppendEvent(Event{Type: "exited"})
	if err != nil || e.Seq != 4 {
		t.Fatalf("append after torn tail: %+v, %v", e, err)
	}
	evs, _ = d.ReadEvents(0, nil)
	if len(evs) != 4 || evs[3].Type != "exited" || evs[3].Seq != 4 {
		t.Fatalf("after repair: %+v", evs)
	}
	// A corrupt complete line is skipped, not fatal, and seq continues.
	f, _ = os.OpenFile(d.Join(eventsFile), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("garbage\n")
	f.Close()
	e, err = d.AppendEvent(Event{Type: "ready"})
	if err != nil || e.Seq != 5 {
		t.Fatalf("append after garbage: %+v, %v", e, err)
	}
	if evs, _ = d.ReadEvents(4, nil); len(evs) != 1 || evs[0].Type != "ready" {
		t.Fatalf("since 4: %+v", evs)
	}
}

func TestWaitEventsWakesOnAppend(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan []Event, 1)
	go func() {
		evs, err := d.WaitEvents(ctx, 0, nil)
		if err != nil {
			t.Error(err)
		}
		got <- evs
	}()
	if _, err := d.AppendEvent(Event{Type: "started"}); err != nil {
		t.Fatal(err)
	}
	if evs := <-got; len(evs) != 1 {
		t.Fatalf("woke with %v", evs)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, err := d.WaitEvents(short, 1, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no new event: %v", err)
	}
}

// TestWatchNamesSeesItsDirectoryGoAway: a watched directory removed or moved
// away signals the watcher (whatever names it filters on), so a waiter
// re-checks and finds the job gone instead of waiting for an event that
// can no longer come.
func TestWatchNamesSeesItsDirectoryGoAway(t *testing.T) {
	for _, how := range []string{"move", "remove"} {
		t.Run(how, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "job")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ch, err := WatchNames(ctx, []string{"status.json"}, dir)
			if err != nil {
				t.Fatal(err)
			}
			if how == "move" {
				err = os.Rename(dir, filepath.Join(base, "elsewhere"))
			} else {
				err = os.Remove(dir)
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-ch:
			case <-ctx.Done():
				t.Fatal("no signal when the watched directory went away")
			}
		})
	}
}

// TestPlantedFIFO: a FIFO planted in place of a state file would block a
// reader's open forever (no writer comes); it is a damaged state file.
func TestPlantedFIFO(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := syscallMkfifo(d.Join("events.jsonl")); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	done := make(chan error, 1)
	go func() { _, err := d.ReadEvents(0, nil); done <- err }()
	select {
	case err := <-done:
		if !IsCorrupt(err) {
			t.Fatalf("events from a FIFO: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("reading the events blocked on a planted FIFO")
	}
}
