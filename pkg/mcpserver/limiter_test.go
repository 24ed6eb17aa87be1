package mcpserver

import (
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/state"
)

func ev(seq int64, handle, typ string) state.Event {
	return state.Event{Seq: seq, Handle: handle, Type: typ}
}

func types(ns []notice) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Event.Handle+":"+n.Event.Type)
	}
	return out
}

func TestLimiterFirstAtOnceThenCoalesced(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := newLimiter(time.Second, 20)
	if got := types(l.offer(ev(1, "a", "started"), t0)); len(got) != 1 || got[0] != "a:started" {
		t.Fatalf("first event: %v", got)
	}
	// A flapping job: ten events within the interval become one notice,
	// the latest state, due when the interval has passed.
	for i := int64(2); i <= 11; i++ {
		typ := "failed"
		if i%2 == 0 {
			typ = "restarted"
		}
		if got := l.offer(ev(i, "a", typ), t0.Add(time.Duration(i)*10*time.Millisecond)); got != nil {
			t.Fatalf("event %d sent at once: %v", i, types(got))
		}
	}
	next, ok := l.next()
	if !ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("next = %v %v", next, ok)
	}
	if got := l.flush(t0.Add(999 * time.Millisecond)); got != nil {
		t.Fatalf("flushed early: %v", types(got))
	}
	got := l.flush(t0.Add(time.Second))
	if len(got) != 1 || got[0].Event.Seq != 11 || got[0].Event.Type != "failed" || got[0].Coalesced != 9 {
		t.Fatalf("coalesced notice: %+v", got)
	}
	if _, ok := l.next(); ok {
		t.Fatal("something still pending")
	}
	// Another job is not held back by the first.
	if got := l.offer(ev(12, "b", "started"), t0.Add(time.Second+time.Millisecond)); len(got) != 1 {
		t.Fatalf("second job: %v", types(got))
	}
}

func TestLimiterGlobalBurst(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := newLimiter(time.Second, 3)
	var sent []string
	for i, h := range []string{"a", "b", "c", "d", "e"} {
		sent = append(sent, types(l.offer(ev(int64(i+1), h, "started"), t0))...)
	}
	if len(sent) != 3 {
		t.Fatalf("sent %v, want 3 within the burst", sent)
	}
	next, ok := l.next()
	if !ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("next = %v %v: the rest wait for the window to reopen", next, ok)
	}
	got := types(l.flush(t0.Add(time.Second)))
	if len(got) != 2 || got[0] != "d:started" || got[1] != "e:started" {
		t.Fatalf("after the window: %v", got)
	}
}

func TestLimiterDrain(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := newLimiter(time.Second, 20)
	l.offer(ev(1, "a", "started"), t0)
	l.offer(ev(2, "a", "ready"), t0)
	l.offer(ev(3, "a", "exited"), t0)
	got := l.drain()
	if len(got) != 1 || got[0].Event.Type != "exited" || got[0].Coalesced != 1 {
		t.Fatalf("drain: %+v", got)
	}
	if _, ok := l.next(); ok {
		t.Fatal("drain left something pending")
	}
}
