package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/state"
)

// What Wait waits for.
const (
	ForExit  = "exit"
	ForReady = "ready"
)

// Wait blocks until every job in refs (with anyOf, the first of them) has
// ended, or for ForReady is ready or has ended, and returns their statuses
// in the order of refs. When ctx ends first it returns the current statuses
// and ctx's error.
//
// It does not poll: it watches the job directories (the supervisor
// replaces status.json on every change) and each live supervisor's pidfd
// (a SIGKILLed supervisor writes nothing, but its pidfd becomes readable).
// Watches are armed before each check, so no change falls between the two.
func (st *Store) Wait(ctx context.Context, refs []string, what string, anyOf bool) ([]Status, error) {
	if what != ForExit && what != ForReady {
		return nil, invalid("wait for must be exit or ready, not %q", what)
	}
	ids := make([]string, len(refs))
	for i, r := range refs {
		id, err := st.Resolve(r)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	return st.waitIDs(ctx, ids, what, anyOf)
}

func (st *Store) waitIDs(ctx context.Context, ids []string, what string, anyOf bool) ([]Status, error) {
	dirs := make([]string, len(ids))
	for i, id := range ids {
		dirs[i] = st.jobDir(id)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed, err := state.WatchNames(wctx, []string{statusFile}, dirs...)
	if err != nil {
		return nil, err
	}
	died := make(chan struct{}, 1)
	watched := map[[2]uint64]bool{}
	for {
		out := make([]Status, len(ids))
		done := 0
		// Slurm jobs get a bounded poll of the scheduler besides the
		// watches: a job Slurm ends before its supervisor runs (cancelled
		// while pending) or whose node fails writes nothing, and on a
		// shared filesystem a remote supervisor's writes raise no inotify
		// event here. A job no supervisor has taken yet turns lost at its
		// lostBy without any file changing: the wait wakes then too.
		wake := time.Duration(-1)
		soonest := func(d time.Duration) {
			if wake < 0 || d < wake {
				wake = max(d, 0)
			}
		}
		for i, id := range ids {
			s, err := st.statusOf(id)
			if err != nil {
				return nil, err
			}
			out[i] = s
			if s.Ended() || (what == ForReady && s.Ready) {
				done++
				continue
			}
			if s.Backend == BackendSlurm {
				soonest(schedulerPoll)
			}
			if !s.lostBy.IsZero() {
				soonest(time.Until(s.lostBy) + time.Millisecond)
			}
			key := [2]uint64{uint64(s.svPID), s.svStart}
			if s.svPID > 0 && s.svLocal && !watched[key] {
				watched[key] = true
				go func() {
					if proctree.Wait(wctx, proctree.ID{PID: s.svPID, Start: s.svStart}) == nil {
						select {
						case died <- struct{}{}:
						default:
						}
					}
				}()
			}
		}
		if done == len(ids) || (anyOf && done > 0) {
			return out, nil
		}
		var poll <-chan time.Time
		var pollTimer *time.Timer
		if wake >= 0 {
			pollTimer = time.NewTimer(wake)
			poll = pollTimer.C
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case _, ok := <-changed:
			if !ok && ctx.Err() == nil {
				return out, errors.New("jobs: watching the job directories failed")
			}
		case <-died:
		case <-poll:
		}
		if pollTimer != nil {
			pollTimer.Stop()
		}
	}
}

// Watch returns a channel signalled when job ref's status or logs change,
// or its supervisor dies; it is closed when ctx ends. Arm it before reading,
// then read again after each signal, and no change is missed: this is what
// following a log is built on.
func (st *Store) Watch(ctx context.Context, ref string) (<-chan struct{}, error) {
	id, err := st.Resolve(ref)
	if err != nil {
		return nil, err
	}
	changed, err := state.WatchNames(ctx, []string{statusFile, Stdout + ".log", Stderr + ".log"}, st.jobDir(id))
	if err != nil {
		return nil, err
	}
	s, err := st.statusOf(id)
	if err != nil || s.Ended() || (s.svPID == 0 && s.Backend != BackendSlurm) {
		return changed, err
	}
	out := make(chan struct{}, 1)
	died := make(chan struct{})
	if s.svPID > 0 && s.svLocal {
		go func() {
			if proctree.Wait(ctx, proctree.ID{PID: s.svPID, Start: s.svStart}) == nil {
				close(died)
			}
		}()
	}
	// As in Wait: a slurm job can end, or change on another node, without
	// an event here, so the scheduler is asked at a modest interval.
	var poll <-chan time.Time
	if s.Backend == BackendSlurm {
		t := time.NewTicker(schedulerPoll)
		poll = t.C
		context.AfterFunc(ctx, t.Stop)
	}
	go func() {
		defer close(out)
		for {
			select {
			case _, ok := <-changed:
				if !ok {
					return
				}
			case <-died:
				died = nil
			case <-poll:
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out, nil
}
