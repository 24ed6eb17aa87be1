package mcpserver

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/agentplane/agentplane/pkg/mcpserver/internal/mcpstdio"
	"github.com/agentplane/agentplane/pkg/state"
)

// EventLogger is the logger name of job notifications.
const EventLogger = "agentjob"

// followEvents forwards the environment's job lifecycle events, from the
// moment the server started, to the client as logging notifications,
// through the rate limiter, and to the calls that subscribed to them.
func (s *Server) followEvents(ctx context.Context, conn *mcpstdio.Conn) {
	d, err := state.Open(s.cfg.StateDir)
	if err != nil {
		s.logf("no job notifications: %v", err)
		return
	}
	// Only what happens while the server runs: history is what
	// agentjob_events is for.
	var since int64
	if evs, err := d.ReadEvents(0, nil); err == nil && len(evs) > 0 {
		since = evs[len(evs)-1].Seq
	}
	events := make(chan state.Event, 64)
	go func() {
		defer close(events)
		for {
			evs, err := d.WaitEvents(ctx, since, nil)
			if err != nil {
				if ctx.Err() == nil {
					s.logf("job notifications stopped: %v", err)
				}
				return
			}
			for _, e := range evs {
				since = e.Seq
				select {
				case events <- e:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	runLimited(ctx, events, newLimiter(s.cfg.EventInterval, s.cfg.EventBurst), func(n notice) {
		level := "info"
		switch n.Event.Type {
		case "failed", "timeout", "lost":
			level = "warning"
		}
		conn.Log(level, EventLogger, n.data())
	})
}

// runLimited passes events through lim to send until in closes or ctx
// ends, waking up when a coalesced event falls due.
func runLimited(ctx context.Context, in <-chan state.Event, lim *limiter, send func(notice)) {
	var mu sync.Mutex
	runLimitedLocked(ctx, in, lim, &mu, nil, send)
}

// runLimitedLocked is runLimited with lim guarded by mu, for a caller that
// drains lim itself at the end; seen, if set, is called under mu with each
// event taken in.
func runLimitedLocked(ctx context.Context, in <-chan state.Event, lim *limiter, mu *sync.Mutex, seen func(state.Event), send func(notice)) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	armed := false
	for {
		var due <-chan time.Time
		if armed {
			due = timer.C
		}
		var out []notice
		select {
		case <-ctx.Done():
			return
		case e, ok := <-in:
			if !ok {
				return
			}
			mu.Lock()
			if seen != nil {
				seen(e)
			}
			out = lim.offer(e, time.Now())
			mu.Unlock()
		case <-due:
			armed = false
			mu.Lock()
			out = lim.flush(time.Now())
			mu.Unlock()
		}
		for _, n := range out {
			send(n)
		}
		mu.Lock()
		next, ok := lim.next()
		mu.Unlock()
		if ok {
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(time.Until(next))
			armed = true
		}
	}
}

// notice is one notification: the latest event of a job and how many
// earlier ones it stands for.
type notice struct {
	Event     state.Event
	Coalesced int
}

func (n notice) data() map[string]any {
	e := n.Event
	m := map[string]any{"type": "job_" + e.Type, "seq": e.Seq, "time": e.Time, "handle": e.Handle, "event": e.Type}
	if e.Name != "" {
		m["name"] = e.Name
	}
	if e.ExitCode != nil {
		m["exit_code"] = *e.ExitCode
	}
	if e.Signal != "" {
		m["signal"] = e.Signal
	}
	if e.Reason != "" {
		m["reason"] = e.Reason
	}
	if e.Restarts != 0 {
		m["restarts"] = e.Restarts
	}
	m["coalesced"] = n.Coalesced
	return m
}

func (n notice) summary() string {
	who := n.Event.Handle
	if n.Event.Name != "" {
		who += " (" + n.Event.Name + ")"
	}
	s := who + ": " + n.Event.Type
	if n.Coalesced > 0 {
		s += fmt.Sprintf(" (after %d earlier events)", n.Coalesced)
	}
	return s
}

// limiter decides when a job event becomes a notification: at most one
// per interval per job, the first at once and the rest coalesced into the
// latest event, sent when the job's interval has passed; and at most burst
// notifications for all jobs together per interval. It is driven by the
// caller's clock, so it is tested without sleeping.
type limiter struct {
	interval time.Duration
	burst    int

	last    map[string]time.Time // when each job was last notified
	pending map[string]*pendingNotice
	window  time.Time // start of the current global window
	used    int       // notifications sent in it
}

type pendingNotice struct {
	notice
	due time.Time
}

func newLimiter(interval time.Duration, burst int) *limiter {
	return &limiter{interval: interval, burst: burst, last: map[string]time.Time{}, pending: map[string]*pendingNotice{}}
}

func jobKey(e state.Event) string {
	if e.Handle != "" {
		return e.Handle
	}
	return e.Name
}

// budget reports whether one more notification fits the global window at
// now, opening a new window when the old one is over.
func (l *limiter) budget(now time.Time) bool {
	if now.Sub(l.window) >= l.interval {
		l.window, l.used = now, 0
	}
	return l.used < l.burst
}

// offer takes an event at now and returns what to send at once.
func (l *limiter) offer(e state.Event, now time.Time) []notice {
	k := jobKey(e)
	if p, ok := l.pending[k]; ok {
		p.Coalesced++
		p.Event = e
		return nil
	}
	if t, seen := l.last[k]; (!seen || now.Sub(t) >= l.interval) && l.budget(now) {
		l.used++
		l.last[k] = now
		return []notice{{Event: e}}
	}
	due := now
	if t, seen := l.last[k]; seen && t.Add(l.interval).After(due) {
		due = t.Add(l.interval)
	}
	l.pending[k] = &pendingNotice{notice: notice{Event: e}, due: due}
	return nil
}

// flush returns the coalesced notifications due at now, oldest due first,
// as far as the global budget allows.
func (l *limiter) flush(now time.Time) []notice {
	var ready []*pendingNotice
	for _, p := range l.pending {
		if !p.due.After(now) {
			ready = append(ready, p)
		}
	}
	sort.Slice(ready, func(i, j int) bool {
		if !ready[i].due.Equal(ready[j].due) {
			return ready[i].due.Before(ready[j].due)
		}
		return ready[i].Event.Seq < ready[j].Event.Seq
	})
	var out []notice
	for _, p := range ready {
		if !l.budget(now) {
			break
		}
		l.used++
		k := jobKey(p.Event)
		l.last[k] = now
		delete(l.pending, k)
		out = append(out, p.notice)
	}
	return out
}

// next is when flush has something to do: the earliest due notice, but
// not before the global window reopens if it is spent.
func (l *limiter) next() (time.Time, bool) {
	var t time.Time
	for _, p := range l.pending {
		if t.IsZero() || p.due.Before(t) {
			t = p.due
		}
	}
	if t.IsZero() {
		return t, false
	}
	if l.used >= l.burst {
		if reopen := l.window.Add(l.interval); reopen.After(t) {
			t = reopen
		}
	}
	return t, true
}

// drain returns every held notification at once, oldest first: the end
// of a call, when nothing more will coalesce into them.
func (l *limiter) drain() []notice {
	var out []notice
	for _, p := range l.pending {
		out = append(out, p.notice)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Event.Seq < out[j].Event.Seq })
	l.pending = map[string]*pendingNotice{}
	return out
}
