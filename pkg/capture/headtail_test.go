package capture

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// reference is the obviously correct model: keep the whole stream, cut at the end.
func reference(stream []byte, limit int, keep Keep) Captured {
	limit = max(limit, 0)
	var headCap, tailCap int
	switch keep {
	case KeepStart:
		headCap = limit
	case KeepEnd:
		tailCap = limit
	default:
		headCap = limit / 5
		tailCap = limit - headCap
	}
	head := stream[:min(headCap, len(stream))]
	rest := stream[len(head):]
	tail := rest[max(0, len(rest)-tailCap):]
	return Captured{
		Head:    head,
		Tail:    tail,
		Omitted: int64(len(stream) - len(head) - len(tail)),
		Total:   int64(len(stream)),
	}
}

func checkCaptured(t *testing.T, got, want Captured) {
	t.Helper()
	if !bytes.Equal(got.Head, want.Head) {
		t.Errorf("head = %q, want %q", got.Head, want.Head)
	}
	if !bytes.Equal(got.Tail, want.Tail) {
		t.Errorf("tail = %q, want %q", got.Tail, want.Tail)
	}
	if got.Omitted != want.Omitted || got.Total != want.Total {
		t.Errorf("omitted, total = %d, %d; want %d, %d", got.Omitted, got.Total, want.Omitted, want.Total)
	}
}

func TestHeadTail(t *testing.T) {
	digits := "0123456789abcdefghijklmnopqrstuvwxyz"
	tests := []struct {
		name   string
		limit  int
		keep   Keep
		writes []string
		head   string
		tail   string
		omit   int64
	}{
		{"empty", 10, KeepBoth, nil, "", "", 0},
		{"fits", 10, KeepBoth, []string{"hello"}, "he", "llo", 0},
		{"exactly max", 10, KeepBoth, []string{digits[:10]}, "01", "23456789", 0},
		{"one over", 10, KeepBoth, []string{digits[:11]}, "01", "3456789a", 1},
		{"both", 10, KeepBoth, []string{digits}, "01", "stuvwxyz", 26},
		{"straddle head/tail", 10, KeepBoth, []string{"0", "123", "45"}, "01", "2345", 0},
		{"straddle then wrap", 10, KeepBoth, []string{"0", "12345678", "9abcd"}, "01", "6789abcd", 4},
		{"many small writes", 10, KeepBoth, strings.Split(digits, ""), "01", "stuvwxyz", 26},
		{"write exactly tail size", 10, KeepBoth, []string{"01", "abcdefgh", "ABCDEFGH"}, "01", "ABCDEFGH", 8},
		{"huge write after ring wrapped", 10, KeepBoth, []string{"01abc", "defgh", "ijk", digits}, "01", "stuvwxyz", 39},
		{"start", 4, KeepStart, []string{"ab", "cd", "ef"}, "abcd", "", 2},
		{"start exact", 4, KeepStart, []string{"abcd"}, "abcd", "", 0},
		{"end", 4, KeepEnd, []string{"ab", "cd", "ef"}, "", "cdef", 2},
		{"end one write", 4, KeepEnd, []string{"abcdef"}, "", "cdef", 2},
		{"end exact", 4, KeepEnd, []string{"abcd"}, "", "abcd", 0},
		{"zero max counts only", 0, KeepBoth, []string{"abc", "de"}, "", "", 5},
		{"negative max", -3, KeepEnd, []string{"abc"}, "", "", 3},
		{"max below five keeps tail only", 4, KeepBoth, []string{"abcdef"}, "", "cdef", 2},
		{"empty writes", 10, KeepBoth, []string{"", "", "x", ""}, "x", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHeadTail(tt.limit, tt.keep)
			var total int64
			for _, w := range tt.writes {
				n, err := h.Write([]byte(w))
				if n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
				total += int64(len(w))
			}
			checkCaptured(t, h.Snapshot(), Captured{[]byte(tt.head), []byte(tt.tail), tt.omit, total})
			if h.Total() != total {
				t.Errorf("Total() = %d, want %d", h.Total(), total)
			}
			if h.Truncated() != (tt.omit > 0) {
				t.Errorf("Truncated() = %v, want %v", h.Truncated(), tt.omit > 0)
			}
		})
	}
}

// TestHeadTailMatchesReference drives HeadTail with random write sizes, some
// far larger than the limit, and compares every intermediate snapshot with
// the keep-everything model.
func TestHeadTailMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		limit := rng.IntN(200)
		keep := Keep(rng.IntN(3))
		h := NewHeadTail(limit, keep)
		var stream []byte
		for w := range rng.IntN(40) {
			var size int
			switch rng.IntN(4) {
			case 0:
				size = rng.IntN(3)
			case 1:
				size = rng.IntN(limit + 1)
			default:
				size = rng.IntN(3*limit + 2)
			}
			p := make([]byte, size)
			for i := range p {
				p[i] = byte(rng.IntN(256))
			}
			stream = append(stream, p...)
			h.Write(p)
			got, want := h.Snapshot(), reference(stream, limit, keep)
			if !bytes.Equal(got.Head, want.Head) || !bytes.Equal(got.Tail, want.Tail) ||
				got.Omitted != want.Omitted || got.Total != want.Total {
				t.Fatalf("iter %d (limit %d, keep %v) after write %d of %d bytes:\n got %+v\nwant %+v",
					iter, limit, keep, w, size, got, want)
			}
		}
	}
}

// TestHeadTailSnapshotIsACopy guards against a snapshot aliasing the ring,
// which later writes would silently change.
func TestHeadTailSnapshotIsACopy(t *testing.T) {
	h := NewHeadTail(10, KeepBoth)
	io.WriteString(h, "0123456789")
	s := h.Snapshot()
	io.WriteString(h, "abcdefghijklmnop")
	checkCaptured(t, s, Captured{[]byte("01"), []byte("23456789"), 0, 10})
}

// TestHeadTailMemoryBounded writes far more than the limit in huge writes and
// checks that the buffers never grew past it.
func TestHeadTailMemoryBounded(t *testing.T) {
	const limit = 1000
	h := NewHeadTail(limit, KeepBoth)
	big := bytes.Repeat([]byte("x"), 1<<20)
	for range 16 {
		h.Write(big)
	}
	if cap(h.head) > limit/5 || cap(h.tail) > limit-limit/5 {
		t.Fatalf("cap(head), cap(tail) = %d, %d; limit %d", cap(h.head), cap(h.tail), limit)
	}
	if h.Total() != 16<<20 {
		t.Fatalf("Total() = %d", h.Total())
	}
}

// TestHeadTailNoReadFrom: io.Copy must go through Write, or the cap is bypassed.
func TestHeadTailNoReadFrom(t *testing.T) {
	var w io.Writer = NewHeadTail(10, KeepBoth)
	if _, ok := w.(io.ReaderFrom); ok {
		t.Fatal("HeadTail implements io.ReaderFrom")
	}
}

// TestHeadTailConcurrent is for the race detector, and checks that
// concurrent stdout/stderr-style writers lose no count.
func TestHeadTailConcurrent(t *testing.T) {
	h := NewHeadTail(100, KeepBoth)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			p := bytes.Repeat([]byte{byte('a' + g)}, 37)
			for range 1000 {
				h.Write(p)
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			s := h.Snapshot()
			if int64(len(s.Head)+len(s.Tail))+s.Omitted != s.Total {
				t.Errorf("inconsistent snapshot %d+%d+%d != %d", len(s.Head), len(s.Tail), s.Omitted, s.Total)
				return
			}
		}
	})
	wg.Wait()
	if h.Total() != 4*37*1000 {
		t.Fatalf("Total() = %d", h.Total())
	}
}

func TestParseKeep(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Keep
		err  bool
	}{
		{"start", KeepStart, false},
		{"end", KeepEnd, false},
		{"both", KeepBoth, false},
		{"", KeepBoth, false},
		{"middle", KeepBoth, true},
		{"Start", KeepBoth, true},
	} {
		got, err := ParseKeep(tt.in)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("ParseKeep(%q) = %v, %v", tt.in, got, err)
		}
		if err == nil && tt.in != "" && got.String() != tt.in {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
	if s := fmt.Sprint(Keep(7)); s != "Keep(7)" {
		t.Errorf("Keep(7) prints %q", s)
	}
}
