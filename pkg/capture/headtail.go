// Package capture keeps a bounded part of a command's output stream and turns
// it into text a model can read.
//
// A command may write gigabytes; an agent wants the beginning (how it started,
// the first error) and the end (the summary, the last error). HeadTail keeps
// both in O(limit) memory however much is written, and Render cleans the kept
// bytes (ANSI escapes, carriage-return redraws, invalid UTF-8) and joins them
// with an "omitted" marker.
package capture

import (
	"fmt"
	"sync"
)

// Keep says which part of an over-long stream HeadTail keeps.
type Keep int

const (
	// KeepBoth keeps the first fifth and the last four fifths of the limit:
	// the end of a stream usually carries the verdict, so it gets more room.
	KeepBoth Keep = iota
	// KeepStart keeps only the first limit bytes.
	KeepStart
	// KeepEnd keeps only the last limit bytes.
	KeepEnd
)

// String returns the flag spelling of k ("both", "start" or "end").
func (k Keep) String() string {
	switch k {
	case KeepBoth:
		return "both"
	case KeepStart:
		return "start"
	case KeepEnd:
		return "end"
	}
	return fmt.Sprintf("Keep(%d)", int(k))
}

// ParseKeep parses the --keep flag value "start", "end" or "both". The empty
// string means the default, KeepBoth, so an absent request key needs no
// special case in callers.
func ParseKeep(s string) (Keep, error) {
	switch s {
	case "both", "":
		return KeepBoth, nil
	case "start":
		return KeepStart, nil
	case "end":
		return KeepEnd, nil
	}
	return KeepBoth, fmt.Errorf("invalid keep value %q: want start, end or both", s)
}

// minAlloc is the first allocation for the head or tail, so that tiny outputs
// do not pay for a large limit and large outputs do not regrow from a few bytes.
const minAlloc = 4096

// HeadTail is an io.Writer that keeps at most a limit of bytes of a stream:
// the first headCap bytes and the last tailCap bytes, which add up to the
// limit as Keep decides. It counts every byte written. It deliberately has no ReadFrom method, so io.Copy
// cannot bypass the cap. It is safe for concurrent Write and Snapshot.
type HeadTail struct {
	mu      sync.Mutex
	headCap int
	tailCap int
	head    []byte // grows to headCap, then never changes
	// tail grows to tailCap; once full it is a ring whose oldest byte is at
	// tail[pos], so steady-state writes are one or two memcpys and no allocation.
	tail  []byte
	pos   int
	total int64
}

// NewHeadTail returns a HeadTail that keeps at most limit bytes, split as
// keep says. A limit of zero or less keeps nothing but still counts bytes.
func NewHeadTail(limit int, keep Keep) *HeadTail {
	limit = max(limit, 0)
	h := &HeadTail{}
	switch keep {
	case KeepStart:
		h.headCap = limit
	case KeepEnd:
		h.tailCap = limit
	default:
		h.headCap = limit / 5
		h.tailCap = limit - h.headCap
	}
	return h
}

// Write keeps what the limits allow and counts the rest. It never fails and
// never short-writes, so a command's output pipe is always drained at full
// speed whatever the limit.
func (h *HeadTail) Write(p []byte) (int, error) {
	n := len(p)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total += int64(n)
	if room := h.headCap - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = appendCapped(h.head, p[:k], h.headCap)
		p = p[k:]
	}
	if len(p) == 0 || h.tailCap == 0 {
		return n, nil
	}
	if len(p) >= h.tailCap {
		// Everything already in the ring would be overwritten: copy only the
		// last tailCap bytes of p, which keeps a huge write O(tailCap).
		if cap(h.tail) < h.tailCap {
			h.tail = make([]byte, h.tailCap)
		}
		h.tail = h.tail[:h.tailCap]
		copy(h.tail, p[len(p)-h.tailCap:])
		h.pos = 0
		return n, nil
	}
	if room := h.tailCap - len(h.tail); room > 0 {
		k := min(room, len(p))
		h.tail = appendCapped(h.tail, p[:k], h.tailCap)
		p = p[k:]
		if len(p) == 0 {
			return n, nil
		}
		// The ring just became full and its oldest byte is tail[0]: pos is 0.
	}
	k := copy(h.tail[h.pos:], p)
	copy(h.tail, p[k:])
	h.pos = (h.pos + len(p)) % h.tailCap
	return n, nil
}

// appendCapped appends p to dst, growing it geometrically but never beyond
// limit (the caller guarantees len(dst)+len(p) <= limit), so the buffers stay
// within the promised O(max) memory instead of append's doubling overshoot.
func appendCapped(dst, p []byte, limit int) []byte {
	need := len(dst) + len(p)
	if need > cap(dst) {
		c := min(max(2*cap(dst), need, minAlloc), limit)
		grown := make([]byte, len(dst), c)
		copy(grown, dst)
		dst = grown
	}
	return append(dst, p...)
}

// Total returns the number of bytes written overall, kept or not.
func (h *HeadTail) Total() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// Truncated reports whether some written bytes were not kept.
func (h *HeadTail) Truncated() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.omitted() > 0
}

func (h *HeadTail) omitted() int64 {
	return h.total - int64(len(h.head)) - int64(len(h.tail))
}

// Snapshot copies the kept bytes. It may be called while writes continue; the
// copy is consistent with the writes completed before it.
func (h *HeadTail) Snapshot() Captured {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := Captured{
		Head:    append([]byte(nil), h.head...),
		Omitted: h.omitted(),
		Total:   h.total,
	}
	if len(h.tail) > 0 {
		c.Tail = make([]byte, 0, len(h.tail))
		c.Tail = append(c.Tail, h.tail[h.pos:]...)
		c.Tail = append(c.Tail, h.tail[:h.pos]...)
	}
	return c
}

// Captured is a copy of what a HeadTail kept. The stream was Head, then
// Omitted bytes that were dropped, then Tail; Total is the stream's length.
// When Omitted is zero, Head followed by Tail is the whole stream and the split
// between them means nothing.
type Captured struct {
	Head    []byte
	Tail    []byte
	Omitted int64
	Total   int64
}

// Truncated reports whether bytes were dropped between Head and Tail.
func (c Captured) Truncated() bool { return c.Omitted > 0 }
