package jobs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/result"
)

func TestLogCapKeepsNewest(t *testing.T) {
	st := newStore(t)
	// seq 1 20000 writes 108894 bytes; the cap keeps the newest part.
	s := start(t, st, Spec{Argv: []string{"seq", "1", "20000"}, LogLimit: 10000})
	f := waitFor(t, st, ForExit, s.Handle)
	var full strings.Builder
	for i := 1; i <= 20000; i++ {
		full.WriteString(strconv.Itoa(i) + "\n")
	}
	want := full.String()
	if f.StdoutBytes != int64(len(want)) {
		t.Fatalf("stdout_bytes %d, want %d", f.StdoutBytes, len(want))
	}
	c, err := st.ReadLog(s.Handle, Stdout, 0, ReadOptions{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if c.DroppedBytes == 0 || c.Offset != c.DroppedBytes || c.NextOffset != int64(len(want)) || !c.EOF {
		t.Fatalf("chunk %+v", c)
	}
	if len(c.Data) > 10000 || string(c.Data) != want[c.Offset:] {
		t.Fatalf("kept %d bytes that are not the newest", len(c.Data))
	}
	c2, _ := st.ReadLog(s.Handle, Stdout, int64(len(want))-6, ReadOptions{MaxBytes: 100})
	if string(c2.Data) != "20000\n" || c2.DroppedBytes != 0 {
		t.Fatalf("read at the end: %+v %q", c2, c2.Data)
	}
	tail, _ := st.Tail(s.Handle, Stdout, 2, ReadOptions{MaxBytes: 0})
	if string(tail.Data) != "19999\n20000\n" || tail.Offset != int64(len(want))-12 {
		t.Fatalf("tail %+v %q", tail, tail.Data)
	}
}

func TestSinceLastCursor(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Shell: "echo one; echo two >&2"})
	waitFor(t, st, ForExit, s.Handle)
	c, err := st.ReadSince(s.Handle, Stdout, "default", ReadOptions{MaxBytes: 0})
	if err != nil || string(c.Data) != "one\n" {
		t.Fatalf("first read %q, %v", c.Data, err)
	}
	c, _ = st.ReadSince(s.Handle, Stdout, "default", ReadOptions{MaxBytes: 0})
	if len(c.Data) != 0 || c.Offset != 4 || !c.EOF {
		t.Fatalf("second read %+v %q", c, c.Data)
	}
	c, _ = st.ReadSince(s.Handle, Stderr, "default", ReadOptions{MaxBytes: 0})
	if string(c.Data) != "two\n" {
		t.Fatalf("stderr read %q", c.Data)
	}
	c, _ = st.ReadSince(s.Handle, Stdout, "other", ReadOptions{MaxBytes: 2})
	if string(c.Data) != "on" {
		t.Fatalf("other reader %q", c.Data)
	}
	c, _ = st.ReadSince(s.Handle, Stdout, "other", ReadOptions{MaxBytes: 0})
	if string(c.Data) != "e\n" {
		t.Fatalf("other reader continued %q", c.Data)
	}
	if _, err := st.ReadSince(s.Handle, Stdout, "../x", ReadOptions{MaxBytes: 0}); code(err) != result.CodeInvalidRequest {
		t.Fatalf("bad reader: %v", err)
	}
}

// TestReadLogWhileTrimming reads a capped log while the job writes it;
// every read must be a consistent piece of the stream.
func TestReadLogWhileTrimming(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"seq", "1", "300000"}, LogLimit: 4096})
	var full strings.Builder
	for i := 1; i <= 300000; i++ {
		full.WriteString(strconv.Itoa(i) + "\n")
	}
	want := full.String()
	check := func(c LogChunk) {
		if string(c.Data) != want[c.Offset:c.NextOffset] {
			t.Fatalf("read at %d..%d does not match the stream", c.Offset, c.NextOffset)
		}
	}
	var off int64
	for {
		got, _ := st.Status(s.Handle)
		c, err := st.ReadLog(s.Handle, Stdout, off, ReadOptions{MaxBytes: 1000})
		if err != nil {
			t.Fatal(err)
		}
		check(c)
		off = c.NextOffset
		if got.Ended() && c.EOF {
			break
		}
	}
	if off != int64(len(want)) {
		t.Fatalf("ended at %d, want %d", off, len(want))
	}
}

// TestFollowWithWatch follows a log the way `logs --follow` does: arm the
// watch, read, and read again after each signal until the job has ended.
func TestFollowWithWatch(t *testing.T) {
	st := newStore(t)
	cwd := t.TempDir()
	// The job waits for a file the test creates, so the test controls when
	// the second line appears.
	s := start(t, st, Spec{Shell: "echo first; while [ ! -f go ]; do sleep 0.01; done; echo second", Cwd: cwd})
	ctx := ctxT(t, 30*time.Second)
	changed, err := st.Watch(ctx, s.Handle)
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	var off int64
	created := false
	for {
		c, err := st.ReadLog(s.Handle, Stdout, off, ReadOptions{MaxBytes: 0})
		if err != nil {
			t.Fatal(err)
		}
		got.Write(c.Data)
		off = c.NextOffset
		if !created && strings.Contains(got.String(), "first\n") {
			created = true
			if err := os.WriteFile(filepath.Join(cwd, "go"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		stt, _ := st.Status(s.Handle)
		if stt.Ended() {
			c, _ := st.ReadLog(s.Handle, Stdout, off, ReadOptions{MaxBytes: 0})
			got.Write(c.Data)
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("no change seen; have %q", got.String())
		}
	}
	if got.String() != "first\nsecond\n" {
		t.Fatalf("followed %q", got.String())
	}
}
