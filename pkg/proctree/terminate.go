package proctree

import (
	"context"
	"syscall"
	"time"
)

// Tree names the processes one termination reaches. Every part is
// optional; the parts are signalled in the order of the fields.
type Tree struct {
	// Main is the command's main process, signalled only while it is
	// provably the same process. Its exit ends the grace early when
	// Terminate is given no exited channel.
	Main ID
	// Group is a process group to signal: a command started with setsid
	// leads a group whose id is its pid.
	Group int
	// Root: every live descendant of Root is signalled, which reaches those
	// that left the group (setsid, double fork) while they are still below
	// Root. Root must be current: the caller itself, a child it has not yet
	// reaped, or a process it has just checked alive.
	Root int
	// Session: every live process in the Unix session Session.PID that
	// started no earlier than Session.Start. A pid is not reused while it
	// names a live session, so these are the session leader's, even after
	// they were reparented away from it.
	Session ID
	// Spare, when set, leaves out the processes for which it returns true
	// (the background jobs of earlier session calls). It is asked about
	// descendants and session members, not about Main or Group.
	Spare func(Stat) bool
}

// Signal sends sig to every process of the tree and returns how many
// single processes it signalled (a group counts as none). Processes are
// matched by (pid, start time) between the snapshot and the kill, so a
// recycled pid is never signalled.
func (t Tree) Signal(sig syscall.Signal) int { return len(t.signal(sig)) }

// Kill sends SIGKILL to every process of the tree, as Signal, and returns
// once each process it signalled is gone (or ctx ends): a SIGKILLed
// process still runs until the kernel has taken it down, which on a busy
// machine is not at once, and a caller that says the tree is dead must
// not return before it is. It reports whether all of them were seen gone.
func (t Tree) Kill(ctx context.Context) bool {
	all := true
	for _, id := range t.signal(syscall.SIGKILL) {
		if err := Wait(ctx, id); err != nil || id.Alive() {
			all = false
		}
	}
	return all
}

// signal is Signal, returning the single processes it signalled.
func (t Tree) signal(sig syscall.Signal) []ID {
	// The snapshot comes first: once Main or the group is killed, their
	// children are reparented and no longer found below Root.
	var targets []Stat
	if t.Root > 0 || t.Session.PID > 0 {
		if snap, err := Snapshot(); err == nil {
			if t.Root > 0 {
				targets = Descendants(snap, t.Root)
			}
			if t.Session.PID > 0 {
				for _, p := range snap {
					if p.SID == t.Session.PID && p.StartTime >= t.Session.Start {
						targets = append(targets, p)
					}
				}
			}
		}
	}
	var sent []ID
	if t.Main.PID > 0 && t.Main.Alive() {
		if syscall.Kill(t.Main.PID, sig) == nil {
			sent = append(sent, t.Main)
		}
	}
	if t.Group > 1 {
		_ = SignalGroup(t.Group, sig)
	}
	done := map[int]bool{t.Main.PID: true}
	for _, s := range targets {
		if done[s.PID] || s.Dead() || (t.Spare != nil && t.Spare(s)) {
			continue
		}
		done[s.PID] = true
		if !Alive(s.PID, s.StartTime) {
			continue
		}
		if syscall.Kill(s.PID, sig) == nil {
			sent = append(sent, ID{PID: s.PID, Start: s.StartTime})
		}
	}
	return sent
}

// Terminate is the one kill sequence: sig to the whole tree, then up to
// grace for the main process to exit, then, if it has not, SIGKILL to the
// whole tree and a wait for the main process to be gone. exited, when not nil,
// is closed when the main process has exited (the caller's exec.Cmd.Wait
// finished); otherwise Main is waited for through its pidfd. A sig of
// SIGKILL skips the grace. ctx bounds the whole call; Terminate reports
// whether the main process was seen to exit.
func Terminate(ctx context.Context, t Tree, sig syscall.Signal, grace time.Duration, exited <-chan struct{}) bool {
	return TerminateStep(ctx, t, sig, grace, exited, nil)
}

// TerminateStep is Terminate calling signalled, when not nil, between the
// first signal and the grace: the place of a caller's fault point.
func TerminateStep(ctx context.Context, t Tree, sig syscall.Signal, grace time.Duration, exited <-chan struct{}, signalled func()) bool {
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	if exited == nil {
		exited = waitChan(ctx, t.Main)
	}
	t.signalUnlessGone(sig, exited)
	if signalled != nil {
		signalled()
	}
	if sig != syscall.SIGKILL {
		if waitFor(ctx, exited, grace) {
			// What the main process leaves behind got the first signal
			// too; killing it is the caller's cleanup (run drains the
			// pipes first, a supervisor reaps its orphans).
			return true
		}
	}
	t.signalUnlessGone(syscall.SIGKILL, exited)
	return waitFor(ctx, exited, -1)
}

// signalUnlessGone is Signal, but without the group when its leader has
// exited and a live process has the leader's pid: the leader was reaped
// and its pid, which names the group, handed to a stranger. While the
// group has members the kernel does not hand the pid out, so with no
// process of that pid the group is still the tree's.
func (t Tree) signalUnlessGone(sig syscall.Signal, exited <-chan struct{}) {
	select {
	case <-exited:
		if st, err := ReadStat(t.Group); t.Group > 0 && err == nil && !st.Dead() {
			t.Group = 0
		}
	default:
	}
	t.Signal(sig)
}

// waitFor waits for exited, at most d (d < 0: no bound but ctx).
func waitFor(ctx context.Context, exited <-chan struct{}, d time.Duration) bool {
	var timeout <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-exited:
		return true
	case <-timeout:
		return false
	case <-ctx.Done():
		return false
	}
}

// waitChan is closed when the process id is gone or ctx ends.
func waitChan(ctx context.Context, id ID) <-chan struct{} {
	c := make(chan struct{})
	if id.PID <= 0 {
		close(c)
		return c
	}
	go func() {
		if Wait(ctx, id) == nil {
			close(c)
		}
	}()
	return c
}
