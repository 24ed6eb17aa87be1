package audit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// failAfter bounds how long a test waits for something that should happen
// at once. It is a guard against hanging, not a synchronisation: every
// step below waits on a channel for the event itself.
const failAfter = 10 * time.Second

// following runs Follow in the background and hands each record it
// reports to the returned channel. Its gate, when set, is called inside
// fn, so a test can hold the follower still while it appends.
type following struct {
	got    chan Record
	done   chan error
	cancel context.CancelFunc
}

func startFollow(t *testing.T, l *Log, since time.Time, gate func(context.Context, Record)) *following {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fo := &following{got: make(chan Record, 1000), done: make(chan error, 1), cancel: cancel}
	go func() {
		fo.done <- l.Follow(ctx, since, func(r Record) error {
			// Never block past cancel: a failing test (say, one that sees
			// duplicates) must end, not hang in its cleanup.
			select {
			case fo.got <- r:
			case <-ctx.Done():
				return ctx.Err()
			}
			if gate != nil {
				gate(ctx, r)
			}
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-fo.done
	})
	return fo
}

// expect receives the next records and checks their handles in order.
func (fo *following) expect(t *testing.T, want ...string) {
	t.Helper()
	for _, h := range want {
		select {
		case r := <-fo.got:
			if r.Handle != h {
				t.Fatalf("got record %q, want %q", r.Handle, h)
			}
		case err := <-fo.done:
			t.Fatalf("Follow returned %v while waiting for %q", err, h)
		case <-time.After(failAfter):
			t.Fatalf("no record %q within %v", h, failAfter)
		}
	}
}

// stop cancels Follow and checks it ends with the context's error.
func (fo *following) stop(t *testing.T) {
	t.Helper()
	fo.cancel()
	select {
	case err := <-fo.done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Follow returned %v, want context.Canceled", err)
		}
		fo.done <- err // for the cleanup
	case <-time.After(failAfter):
		t.Fatal("Follow did not return after cancel")
	}
	if len(fo.got) != 0 {
		t.Errorf("%d unexpected extra records", len(fo.got))
	}
}

func appendN(t *testing.T, l *Log, prefix string, n int) []string {
	t.Helper()
	var hs []string
	for i := range n {
		h := prefix + strconv.Itoa(i)
		mustAppend(t, l, Record{Handle: h, Description: "follow test record"})
		hs = append(hs, h)
	}
	return hs
}

func TestFollowExistingThenNew(t *testing.T) {
	l := newLog(t)
	appendN(t, l, "old", 3)
	fo := startFollow(t, l, time.Time{}, nil)
	fo.expect(t, "old0", "old1", "old2")
	fo.expect(t, appendN(t, l, "new", 5)...)
	fo.stop(t)
}

func TestFollowBeforeTheLogExists(t *testing.T) {
	l := &Log{Path: filepath.Join(t.TempDir(), "not-yet", FileName), MaxBytes: 400, Keep: 20}
	fo := startFollow(t, l, time.Time{}, nil)
	// Nothing exists yet, so there is no "caught up" record to wait for.
	// Whatever Follow has done so far, it armed its watch before looking,
	// so these are seen either as existing or as new, exactly once each.
	fo.expect(t, appendN(t, l, "r", 12)...)
	fo.stop(t)
}

func TestFollowSince(t *testing.T) {
	l := newLog(t)
	mustAppend(t, l, Record{Time: "2020-01-01T00:00:00.000Z", Handle: "ancient"})
	mustAppend(t, l, Record{Time: "2026-11-29T18:00:00.000Z", Handle: "recent"})
	fo := startFollow(t, l, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), nil)
	fo.expect(t, "recent")
	mustAppend(t, l, Record{Time: "2021-01-01T00:00:00.000Z", Handle: "backdated"})
	mustAppend(t, l, Record{Handle: "now"})
	fo.expect(t, "now")
	fo.stop(t)
}

// TestFollowAcrossRotation holds the follower inside its callback while
// the log rotates several times, so that when it wakes the file it was
// reading has been renamed away and newer files have come and gone from
// the current name. It must read the rest of its old file, then every
// file after it, and then keep following the new current file.
func TestFollowAcrossRotation(t *testing.T) {
	l := newLog(t)
	l.MaxBytes, l.Keep = 400, 50 // about two records per file
	mustAppend(t, l, Record{Handle: "pre"})
	release := make(chan struct{})
	fo := startFollow(t, l, time.Time{}, func(ctx context.Context, r Record) {
		if r.Handle == "gate" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
	})
	fo.expect(t, "pre")
	mustAppend(t, l, Record{Handle: "gate"})
	fo.expect(t, "gate") // the follower is now parked in fn
	burst := appendN(t, l, "b", 20)
	if _, err := os.Stat(l.rotated(5)); err != nil {
		t.Fatalf("the burst should have rotated at least five times: %v", err)
	}
	close(release)
	fo.expect(t, burst...)
	// Following goes on in the new current file, and the next record is
	// the next one: nothing around the rotations was repeated.
	fo.expect(t, appendN(t, l, "after", 3)...)
	fo.stop(t)
}

// TestFollowRotationEveryRecord rotates on every append while the
// follower runs freely, so rotations and wake-ups interleave however the
// scheduler likes.
func TestFollowRotationEveryRecord(t *testing.T) {
	l := newLog(t)
	l.MaxBytes, l.Keep = 1, 100
	mustAppend(t, l, Record{Handle: "pre"})
	fo := startFollow(t, l, time.Time{}, nil)
	fo.expect(t, "pre")
	fo.expect(t, appendN(t, l, "r", 60)...)
	fo.stop(t)
}

func TestFollowTornLine(t *testing.T) {
	l := newLog(t)
	mustAppend(t, l, Record{Handle: "a"})
	fo := startFollow(t, l, time.Time{}, nil)
	fo.expect(t, "a")
	// A writer crashed mid-line: the follower must neither report the
	// fragment nor let it swallow the next record.
	f, err := os.OpenFile(l.Path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"time":"2026-11-29T18:00:00.000Z","han`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	mustAppend(t, l, Record{Handle: "b"})
	fo.expect(t, "b")
	fo.stop(t)
}

func TestFollowCallbackError(t *testing.T) {
	l := newLog(t)
	appendN(t, l, "r", 3)
	stop := errors.New("enough")
	n := 0
	err := l.Follow(context.Background(), time.Time{}, func(Record) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Fatalf("Follow = %v after %d records, want %v after 2", err, n, stop)
	}
}
