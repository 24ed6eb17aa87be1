package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// remains names what of a job can outlive its supervisor, so that whoever
// finds the supervisor dead can find the job too, whatever moment it died
// at. The job's main process is known once the supervisor recorded it (a
// plain job does not even run before: see gateScript), with its group and
// descendants. The rest is found by session and environment: the
// supervisor leads a session of its own (Start launches it with setsid),
// the job stays in it, in a process group of its own, as does everything
// it starts that does not call setsid itself, and every one of them
// inherits sessionMarkEnv, which names the supervisor. Linux does not reuse
// a pid while it names a live session, but a session id alone could, long
// after, belong to a stranger's session; the mark cannot.
//
// Where a writable cgroup v2 exists (root, or a delegated cgroup), the
// supervisor also starts the job in a cgroup of its own (jobCgroupName),
// which no process of the job leaves by setsid or by clearing its
// environment: its members are the job's whatever they did, and
// cgroup.kill kills them all at once.
type remains struct {
	main   proctree.ID // the job's main process, when recorded (PID 0 otherwise)
	sv     proctree.ID // the supervisor, whose session the job is in
	cgroup string      // the job's cgroup, as recorded ("" without)
	cgName string      // the name it must have (jobCgroupName)
}

// remainsOf is the remains of the job whose status is s.
func remainsOf(s Status, pid int, pidStart uint64) remains {
	sv := proctree.ID{PID: s.svPID, Start: s.svStart}
	return remains{main: proctree.ID{PID: pid, Start: pidStart}, sv: sv,
		cgroup: s.cgroup, cgName: jobCgroupName(s.ID, sv)}
}

// jobCgroupName is the name of the cgroup of job id's processes under
// supervisor sv: unique to the supervisor, so that a recorded path can
// only ever name this job's cgroup.
func jobCgroupName(id string, sv proctree.ID) string {
	return fmt.Sprintf("job-%s-%d.%d", id, sv.PID, sv.Start)
}

// tree is what proctree signals: the main process with its group and
// descendants while it lives. (The session members are signalled one by
// one, once their mark is checked: see live.)
func (r remains) tree() proctree.Tree {
	t := proctree.Tree{}
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
	if r.cgroup != "" {
		for _, pid := range proctree.TreeCgroupMembers(r.cgroup, r.cgName) {
			if st, err := proctree.ReadStat(pid); err == nil {
				add(st)
			}
		}
	}
	if r.sv.PID > 1 {
		mark := sessionMark(r.sv)
		for _, p := range snap {
			if seen[p.PID] || p.StartTime < r.sv.Start {
				continue
			}
			// A member of the session is the job's unless its environment
			// proves otherwise; one that left the session (a daemon that
			// setsid and double-forked) only when it provably carries the
			// mark, so that a stranger is never taken for the job.
			if p.SID == r.sv.PID && mayHaveEnv(p.PID, mark) || p.SID != r.sv.PID && hasEnv(p.PID, mark) {
				add(p)
			}
		}
	}
	return out
}

// sessionMarkEnv is set in the environment of every job process: the
// supervisor's pid and start time, which remains looks for.
// It is declared in proctree, whose WithoutTokens drops it for what is
// detached from the job (a nested job's supervisor, a session's shell).
const sessionMarkEnv = proctree.EnvJobMark

// sessionMark is the sessionMarkEnv entry of the jobs of supervisor sv.
func sessionMark(sv proctree.ID) string {
	return fmt.Sprintf("%s=%d.%d", sessionMarkEnv, sv.PID, sv.Start)
}

// signalMarked sends sig to each live process of r, checked by pid and
// start time just before.
func (r remains) signalMarked(sig syscall.Signal) {
	for _, p := range r.live() {
		if p.Alive() {
			_ = syscall.Kill(p.PID, sig)
		}
	}
}

// errRemainsAlive says a kill left a process of the job running.
var errRemainsAlive = errors.New("a process of the job is still running")

// kill stops everything of r with proctree's sequence (sig, up to grace
// for the main process, SIGKILL), then SIGKILLs what is left of the
// session, and returns only once nothing of r is alive (or ctx ended, with
// errRemainsAlive). Only a caller that knows the supervisor is dead, or
// means to kill it too, may call it.
func (r remains) kill(ctx context.Context, sig syscall.Signal, grace time.Duration) error {
	// What is found now is waited for at the end, even once it no longer
	// counts as r's (a setsid'd descendant whose parent died meanwhile).
	found := r.live()
	if len(found) == 0 {
		return nil
	}
	r.signalMarked(sig)
	proctree.Terminate(ctx, r.tree(), sig, grace, nil)
	if r.cgroup != "" {
		// Every member at once, and with them whatever no scan finds.
		proctree.KillTreeCgroup(r.cgroup, r.cgName, killWait)
	}
	// New processes can appear until every parent is gone: a few rounds
	// of SIGKILL and wait settle it.
	for range 10 {
		procs := r.live()
		if len(procs) == 0 {
			break
		}
		found = append(found, procs...)
		r.tree().Signal(syscall.SIGKILL)
		r.signalMarked(syscall.SIGKILL)
		kctx, cancel := context.WithTimeout(ctx, killWait)
		for _, p := range procs {
			_ = proctree.Wait(kctx, p)
		}
		cancel()
		if ctx.Err() != nil {
			break
		}
	}
	kctx, cancel := context.WithTimeout(ctx, killWait)
	defer cancel()
	for _, p := range found {
		if p.Alive() {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		if proctree.Wait(kctx, p) != nil {
			return errRemainsAlive
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

// hasEnv reports whether process pid's environment provably holds kv.
func hasEnv(pid int, kv string) bool {
	env, err := proctree.Environ(pid)
	return err == nil && slices.Contains(env, kv)
}

// mayHaveEnv reports whether process pid's environment holds the entry kv
// (KEY=VALUE), or could: a process that stayed mid-exec while it was read
// (proctree.ErrEnvironUnknown) is counted in, never taken for a stranger,
// since it already is in the supervisor's session and started after it.
func mayHaveEnv(pid int, kv string) bool {
	env, err := proctree.Environ(pid)
	if errors.Is(err, proctree.ErrEnvironUnknown) {
		return true
	}
	return err == nil && slices.Contains(env, kv)
}
