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
	main proctree.ID // the job's main process, when recorded (PID 0 otherwise)
	sv   proctree.ID // the supervisor, whose session the job is in
}

// remainsOf is the remains of the job whose status is s.
func remainsOf(s Status, pid int, pidStart uint64) remains {
	return remains{main: proctree.ID{PID: pid, Start: pidStart}, sv: proctree.ID{PID: s.svPID, Start: s.svStart}}
}

// tree is what proctree signals: the main process with its group and
// descendants while it lives, and the supervisor's session.
func (r remains) tree() proctree.Tree {
	t := proctree.Tree{}
	if r.sv.PID > 1 {
		t.Session = r.sv
	}
	if r.main.PID > 0 && r.main.Alive() {
		t.Main, t.Group, t.Root = r.main, r.main.PID, r.main.PID
	}
	return t
}

// live lists the live processes of r: the main process, its descendants
// and the members of the supervisor's session (the supervisor included,
// should it still run), as Tree.Signal reaches them.
func (r remains) live() []proctree.ID {
	snap, err := proctree.Snapshot()
	if err != nil {
		return nil
	}
	seen := map[int]bool{}
	var out []proctree.ID
	add := func(p proctree.Stat) {
		if !seen[p.PID] && !p.Dead() {
			seen[p.PID] = true
			out = append(out, proctree.ID{PID: p.PID, Start: p.StartTime})
		}
	}
	if r.main.PID > 0 {
		for _, p := range snap {
			if p.PID == r.main.PID && p.StartTime == r.main.Start {
				add(p)
				for _, d := range proctree.Descendants(snap, r.main.PID) {
					add(d)
				}
			}
		}
	}
	if r.sv.PID > 1 {
		for _, p := range snap {
			if p.SID == r.sv.PID && p.StartTime >= r.sv.Start {
				add(p)
			}
		}
	}
	return out
}

// errRemainsAlive says a kill left a process of the job running.
var errRemainsAlive = errors.New("a process of the job is still running")

// kill stops everything of r with proctree's sequence (sig, up to grace
// for the main process, SIGKILL), then SIGKILLs what is left of the
// session, and returns only once nothing of r is alive (or ctx ended, with
// errRemainsAlive). Only a caller that knows the supervisor is dead, or
// means to kill it too, may call it.
func (r remains) kill(ctx context.Context, sig syscall.Signal, grace time.Duration) error {
	if len(r.live()) == 0 {
		return nil
	}
	proctree.Terminate(ctx, r.tree(), sig, grace, nil)
	// New processes can appear until every parent is gone: a few rounds
	// of SIGKILL and wait settle it.
	for range 10 {
		procs := r.live()
		if len(procs) == 0 {
			return nil
		}
		r.tree().Signal(syscall.SIGKILL)
		kctx, cancel := context.WithTimeout(ctx, killWait)
		for _, p := range procs {
			_ = proctree.Wait(kctx, p)
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

// killOrphan kills a job process whose supervisor is gone, with its group
// and descendants (those that left the group were adopted elsewhere and
// are found only if they are still below it).
func killOrphan(ctx context.Context, pid int, start uint64, sig syscall.Signal, grace time.Duration) {
	_ = remains{main: proctree.ID{PID: pid, Start: start}}.kill(ctx, sig, grace)
}
