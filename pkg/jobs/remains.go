package jobs

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// remains names what of a job can outlive its supervisor, so that whoever
// finds the supervisor dead can find the job too, whatever moment it died
// at. The job's main process is known once the supervisor recorded it; its
// session is known before the job exists: the supervisor leads a session of
// its own (Start launches it with setsid) and the job, in a process group of
// its own, stays in that session, as does everything it starts that does
// not call setsid itself. Linux does not reuse a pid while it names a live
// session or group, so after the supervisor's death the processes whose
// session id is its pid, started no earlier than it, are the job's even
// when they were reparented to init before anything recorded them.
//
// This is the kill the issue "start leaks the job" needed: between the fork
// and the first record no file names the job's pid, but its session id is
// the supervisor's pid, which Start knows.
type remains struct {
	main    proctree.Stat // the job's main process, when recorded (PID 0 otherwise)
	svPID   int
	svStart uint64
}

// remainsOf is the remains of the job whose status is s.
func remainsOf(s Status, pid int, pidStart uint64) remains {
	r := remains{svPID: s.svPID, svStart: s.svStart}
	r.main.PID, r.main.StartTime = pid, pidStart
	return r
}

// live lists the live processes of r: the main process, its descendants
// and the members of the supervisor's session (the supervisor included,
// should it still run).
func (r remains) live() []proctree.Stat {
	snap, err := proctree.Snapshot()
	if err != nil {
		return nil
	}
	seen := map[int]bool{}
	var out []proctree.Stat
	add := func(p proctree.Stat) {
		if !seen[p.PID] && !p.Dead() {
			seen[p.PID] = true
			out = append(out, p)
		}
	}
	if r.main.PID > 0 {
		for _, p := range snap {
			if p.PID == r.main.PID && p.StartTime == r.main.StartTime {
				add(p)
			}
		}
		if len(out) > 0 {
			for _, p := range proctree.Descendants(snap, r.main.PID) {
				add(p)
			}
		}
	}
	if r.svPID > 1 {
		for _, p := range snap {
			if p.SID == r.svPID && p.StartTime >= r.svStart {
				add(p)
			}
		}
	}
	return out
}

// signal sends sig to every live process of r (and to the main process's
// group) and returns what it signalled.
func (r remains) signal(sig syscall.Signal) []proctree.Stat {
	procs := r.live()
	if r.main.PID > 0 && proctree.Alive(r.main.PID, r.main.StartTime) {
		_ = proctree.SignalGroup(r.main.PID, sig)
	}
	for _, p := range procs {
		if proctree.Alive(p.PID, p.StartTime) {
			_ = syscall.Kill(p.PID, sig)
		}
	}
	return procs
}

// errRemainsAlive says a kill left a process of the job running.
var errRemainsAlive = errors.New("a process of the job is still running")

// kill stops everything of r: sig, up to grace for it to go, then SIGKILL,
// and returns only once nothing of r is alive (or ctx ended, with
// errRemainsAlive). Only a caller that knows the supervisor is dead, or
// means to kill it too, may call it.
func (r remains) kill(ctx context.Context, sig syscall.Signal, grace time.Duration) error {
	if sig != syscall.SIGKILL && len(r.signal(sig)) > 0 {
		gctx, cancel := context.WithTimeout(ctx, grace)
		r.waitGone(gctx)
		cancel()
	}
	// New processes can appear until every parent is gone: a few rounds
	// of SIGKILL and wait settle it.
	for range 10 {
		procs := r.signal(syscall.SIGKILL)
		if len(procs) == 0 {
			return nil
		}
		kctx, cancel := context.WithTimeout(ctx, killWait)
		for _, p := range procs {
			_ = waitProcess(kctx, p.PID, p.StartTime)
		}
		cancel()
		if ctx.Err() != nil {
			break
		}
	}
	if len(r.live()) > 0 {
		return errRemainsAlive
	}
	return nil
}

// waitGone waits until r has no live process or ctx ends.
func (r remains) waitGone(ctx context.Context) {
	for ctx.Err() == nil {
		procs := r.live()
		if len(procs) == 0 {
			return
		}
		for _, p := range procs {
			if waitProcess(ctx, p.PID, p.StartTime) != nil {
				return
			}
		}
	}
}

// killOrphan kills a job process whose supervisor is gone, with its group
// and descendants (those that left the group were adopted elsewhere and
// are found only if they are still below it).
func killOrphan(ctx context.Context, pid int, start uint64, sig syscall.Signal, grace time.Duration) {
	r := remains{}
	r.main.PID, r.main.StartTime = pid, start
	_ = r.kill(ctx, sig, grace)
}
