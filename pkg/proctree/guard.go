package proctree

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A Guard keeps a command's process tree from outliving the process that
// started it, even when that process is SIGKILLed and so cannot clean up:
// the guarded process (agentsh, a session server) starts a small watchdog
// in a process group of its own (a killpg of the caller's group misses it) that
// holds the read end of a stream (a socket pair, which unlike a pipe cannot
// be opened again through /proc). The write end stays in the guarded
// process only (close-on-exec; a one-shot agentsh is undumpable, Seal, so
// no other process of its user can take a copy), so the watchdog reads
// end-of-file exactly when the guarded process is gone; and since root can
// take a copy all the same (pidfd_getfd), the watchdog also holds the
// guarded process's pidfd (OwnerFD) and, when it says the process exited,
// shuts the stream down for reading, which brings the end of file after
// whatever was written. Unless it was told "done" first, it then kills
// the tree:
//
//   - cgroup mode: the command runs in a cgroup v2 child created for it
//     (CLONE_INTO_CGROUP, so no instruction of the command runs outside);
//     cgroup.kill kills every member at once, setsid, nohup and
//     double-forked descendants included, and a fork loop cannot outrun it.
//   - environ mode, where no writable cgroup v2 with cgroup.kill exists
//     (an unprivileged user without a delegated cgroup, and always on
//     macOS): the command's environment carries a random token
//     (EnvToken); the watchdog kills every process whose environment
//     (/proc/PID/environ, kern.procargs2 on macOS) holds it, and every member of
//     the command's Unix session, until a scan finds none. A descendant
//     that clears its environment (env -i) and leaves the session escapes
//     the token; on Linux a runner therefore starts the command under the
//     guard's Keeper (Keep), its subreaper parent, which no descendant
//     leaves. Mode reports which mode is in force.
//
// Detached servers that a command starts on purpose (a job supervisor, a
// session server) are launched through Detach, which takes them out of the
// guard's cgroup and environment, so they outlive it.
type Guard struct {
	mode  string
	exe   string // the guarded program, which serves KeeperCommand
	cgDir string // cgroup mode: the command's cgroup
	cgFD  int    // cgroup mode: an O_PATH fd of cgDir, for CLONE_INTO_CGROUP
	evFD  int    // cgroup mode: cgroup.events, opened with the cgroup, for Empty
	token string
	w     *os.File // write end of the watchdog's pipe
	wd    *os.Process

	// The guarded process watches the watchdog in turn (watchWatchdog):
	// a watchdog killed before Release kills the tree at once, so that no
	// window opens in which agentsh's own death would leave it running.
	mu       sync.Mutex
	released bool
	watched  []ID
	lost     atomic.Bool

	swept chan struct{} // closed when the sweep startSweep began is done (nil: none)
}

// Guard modes.
const (
	GuardCgroup  = "cgroup"
	GuardEnviron = "environ"
)

// EnvToken is the environment variable that carries the guards' tokens,
// separated by ':' (an agentsh inside agentsh adds its own).
const EnvToken = "AGENTPLANE_GUARD"

// EnvJobMark is the environment variable that marks every process of a
// job with its supervisor (pkg/jobs finds a job's remains by it). Like a
// guard's token it ties a process to what started it, and like one it is
// dropped by WithoutTokens: a detached server (a job's supervisor, a
// session's shell) started from inside a job is not part of that job.
const EnvJobMark = "AGENTJOB_SUPERVISOR"

// StartGuard starts the watchdog as argv (a hidden entry point of the
// caller's program that calls RunWatchdog) and prepares a cgroup when it
// can. The caller must Release the guard once the tree is dead.
func StartGuard(argv []string) (*Guard, error) { return startGuard(argv, nil, nil) }

// startGuard is StartGuard, calling cgroup (when not nil) with the
// guard's cgroup descriptor (-1 in environ mode) as soon as the cgroup is
// made, before the watchdog starts. A start that fails with a process in
// the cgroup (one cgroup started) leaves the cgroup, named in *left, for
// the caller to remove once that process is done (Pending.Close).
func startGuard(argv []string, cgroup func(fd int), left *string) (*Guard, error) {
	if len(argv) == 0 {
		if cgroup != nil {
			cgroup(-1)
		}
		return nil, errors.New("proctree: no watchdog command")
	}
	// The token needs to be unique and unguessable by other processes,
	// not a key: the runtime's generator (ChaCha8, seeded from the
	// kernel's random bytes at exec) gives that in nanoseconds, where the
	// first getrandom(2) of a process (the vDSO's state mapped, or the
	// system call) took about 0.14 ms on the watchdog's path.
	var tok [12]byte
	binary.LittleEndian.PutUint64(tok[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(tok[8:], rand.Uint32())
	g := &Guard{mode: GuardEnviron, exe: argv[0], token: hex.EncodeToString(tok[:]), cgFD: -1, evFD: -1}
	if dir, fd, err := makeCgroup(g.token); err == nil {
		g.mode, g.cgDir, g.cgFD = GuardCgroup, dir, fd
		g.evFD = openEvents(dir)
		g.startSweep()
	}
	if cgroup != nil {
		cgroup(g.cgFD)
	}
	drop := func() {
		if !g.dropCgroup() && left != nil {
			*left = g.cgDir
		}
	}
	// Sockets, not pipes: a pipe can be opened again through
	// /proc/PID/fd/N by whoever may look into the watchdog (the command,
	// unsandboxed, as root or as the same user), and a write end held so
	// keeps the end of file from coming when the guarded process dies; a
	// socket cannot be opened so.
	r, w, err := guardPipe()
	if err != nil {
		drop()
		return nil, err
	}
	// A second pipe the other way, whose write end only the watchdog
	// holds (its stdout; it writes nothing there): end-of-file on the read
	// end tells the guarded process that the watchdog is gone, in the
	// poller, where a wait(2) would hold a thread for the whole run.
	lr, lw, err := guardPipe()
	if err != nil {
		r.Close()
		w.Close()
		drop()
		return nil, err
	}
	// Its own process group: a killpg of the caller's group (an agent
	// host aborting a turn) must not take the watchdog with it. Not a
	// session of its own: setsid makes a scheduler autogroup, which costs
	// more than the rest of the start (the watchdog reads a pipe, not a
	// terminal, so a session would give it nothing). Only the two streams
	// are passed, and the guarded process's pidfd as OwnerFD: the stream's
	// end of file never comes while another process holds a copy of the
	// write end (root can take one from the undumpable guarded process
	// with pidfd_getfd), its pidfd tells of its exit all the same.
	//
	// In cgroup mode the cgroup's cgroup.kill, opened for writing, goes
	// as KillFD: the front kills the cgroup with one write to it, which
	// needs no descriptor, memory or process of its own, so no resource
	// limit the command lowers on it (prlimit(2) needs no ptrace access)
	// keeps the kill from being done.
	files := []*os.File{r, lw}
	self := ownPidfd()
	kill := g.killFile()
	if self != nil || kill != nil {
		files = append(files, nil, self)
	}
	if kill != nil {
		files = append(files, kill)
	}
	var wd *os.Process
	for _, try := range g.watchdogArgvs(argv) {
		wd, err = os.StartProcess(try[0], try[1:], &os.ProcAttr{Dir: "/", Files: files, Sys: watchdogAttr()})
		if err == nil {
			break
		}
	}
	r.Close()
	lw.Close()
	if self != nil {
		self.Close()
	}
	if kill != nil {
		kill.Close()
	}
	if err != nil {
		w.Close()
		lr.Close()
		drop()
		return nil, fmt.Errorf("proctree: start the watchdog: %w", err)
	}
	g.w, g.wd = w, wd
	ResumeStops(wd.Pid)
	go g.watchWatchdog(lr)
	return g, nil
}

// guardPipe returns the two ends of a Unix stream socket, both
// close-on-exec, for a one-way stream between the guarded process and
// its watchdog whose end of file comes when every holder of the write end
// is gone.
func guardPipe() (r, w *os.File, err error) {
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	return os.NewFile(uintptr(fds[0]), "guard"), os.NewFile(uintptr(fds[1]), "guard"), nil
}

// watchWatchdog waits for the watchdog: for end-of-file on lifeline, the
// pipe only the watchdog holds open, then reaps it (it owns g.wd's wait).
// A watchdog that dies before Release (killed by the command, or by
// anyone) leaves the tree unguarded against the guarded process's own
// death, so the tree is killed now, as the watchdog would have: the
// cgroup, or every bearer of the token and member of a watched session.
func (g *Guard) watchWatchdog(lifeline *os.File) {
	_, _ = io.Copy(io.Discard, lifeline)
	lifeline.Close()
	_, _ = g.wd.Wait()
	g.mu.Lock()
	released := g.released
	watched := append([]ID(nil), g.watched...)
	g.mu.Unlock()
	if released {
		return
	}
	g.lost.Store(true)
	if g.mode == GuardCgroup {
		killGuardCgroupOnly(g.cgDir)
	}
	killTokenBearers(g.token, watched, 10*time.Second)
}

// Lost reports that the watchdog died before Release, so the tree was
// killed by the guarded process itself (see watchWatchdog).
func (g *Guard) Lost() bool { return g.lost.Load() }

// StartGuardAsync is StartGuard on another goroutine, so that the
// watchdog's start overlaps the caller's own preparation. On that
// goroutine, cgroup (when not nil) is called with the guard's cgroup
// descriptor (-1 in environ mode; valid during the call only) once the
// cgroup is made, before the watchdog starts: only a process that dies
// with the caller may be started in the cgroup then (the sandbox's helper,
// PID 1 of its namespaces, with a parent-death signal), since until the
// watchdog runs nothing kills the cgroup should the caller be SIGKILLed.
// after (when not nil) runs there once the guard started, before Wait
// returns.
func StartGuardAsync(argv []string, cgroup func(fd int), after func()) *Pending {
	p := &Pending{done: make(chan struct{})}
	go func() {
		g, err := startGuard(argv, cgroup, &p.left)
		if after != nil {
			after()
		}
		p.g, p.err = g, err
		close(p.done)
	}()
	return p
}

// Pending is a guard that is starting (StartGuardAsync).
type Pending struct {
	done chan struct{}
	g    *Guard
	err  error
	left string // the cgroup a failed start left (startGuard)
}

// Wait waits for the guard's start; it may be called any number of times.
func (p *Pending) Wait() (*Guard, error) {
	<-p.done
	return p.g, p.err
}

// Close ends the guard: Release when it started; else it removes the
// cgroup a start that failed left behind, where the cgroup hook had
// started a process (which contains its own tree), killing what is left
// in it. Call it once the run is over.
func (p *Pending) Close() {
	g, err := p.Wait()
	if err == nil {
		g.Release()
		return
	}
	if p.left != "" {
		dropLeftCgroup(p.left)
	}
}

// Mode is GuardCgroup or GuardEnviron.
func (g *Guard) Mode() string { return g.mode }

// Env returns env with the guard's token added to EnvToken.
func (g *Guard) Env(env []string) []string {
	out := make([]string, 0, len(env)+1)
	val := g.token
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, EnvToken+"="); ok {
			if v != "" {
				val = v + ":" + g.token
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, EnvToken+"="+val)
}

// Watch tells the watchdog the identity of a process it started under the
// guard (the shell, the command): in environ mode the members of its Unix
// session are killed too.
func (g *Guard) Watch(id ID) {
	if g.mode == GuardEnviron {
		g.mu.Lock()
		g.watched = append(g.watched, id)
		g.mu.Unlock()
		_, _ = fmt.Fprintf(g.w, "%d %d\n", id.PID, id.Start)
	}
}

// IsWatchdog reports whether s is the guard's watchdog, which a cleanup of
// the caller's descendants must spare until Release.
func (g *Guard) IsWatchdog(s Stat) bool { return g.wd != nil && s.PID == g.wd.Pid }

// Release ends the guard: the watchdog is told that nothing needs killing
// and exits on its own (it is not waited for), and the cgroup is removed
// if it is empty. When it is not (a member is still exiting, EmptyBut),
// the watchdog is told so ("rmdir") and removes it once this process has
// exited (its pipe's end: the guard keeps the write end open until then,
// or until the guard is garbage collected) and the member is gone, so
// that the removal takes nothing from this process's last steps (the
// front does it with a system call, the shell watchdog with rmdir(1)).
// Call it after the tree is dead.
func (g *Guard) Release() {
	g.mu.Lock()
	g.released = true
	g.mu.Unlock()
	gone := g.dropCgroup()
	if g.w != nil && !gone {
		_, _ = io.WriteString(g.w, "rmdir\n")
	} else if g.w != nil {
		_, _ = io.WriteString(g.w, "done\n")
		g.w.Close()
		g.w = nil
	}
	if g.swept != nil {
		<-g.swept
	}
}

// RunWatchdog is the watchdog's body; args are what StartGuard appended
// (mode, token, cgroup) and in is the pipe. It returns the exit status.
func RunWatchdog(args []string, in io.Reader) int {
	if len(args) != 3 {
		return 2
	}
	mode, token, cg := args[0], args[1], args[2]
	// Undumpable, as the front is: the command runs as the same user, and
	// could otherwise trace the watchdog and hold it stopped (a traced
	// stop, which agentsh does not see) until agentsh's death had passed.
	Seal()
	if f, ok := in.(*os.File); ok {
		shutdownAtOwnerExit(int(f.Fd()))
	}
	var watched []ID
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := sc.Text()
		if line == "done" {
			return 0
		}
		if line == "rmdir" {
			// Released while a member was still exiting: the cgroup
			// goes once the guarded process is gone too (Release).
			_, _ = io.Copy(io.Discard, in)
			if mode == GuardCgroup && !removeWhenEmpty(cg, 5*time.Second) {
				return 1
			}
			return 0
		}
		var id ID
		if _, err := fmt.Sscanf(line, "%d %d", &id.PID, &id.Start); err == nil {
			watched = append(watched, id)
		}
	}
	// End of file without "done": the guarded process died.
	// In cgroup mode the cgroup goes first, and the token then finds a
	// member that moved itself out of it (root can, unsandboxed).
	if mode == GuardCgroup && killGuardCgroup(cg) {
		killTokenBearers(token, watched, 2*time.Second)
		return 0
	}
	if killTokenBearers(token, watched, 10*time.Second) {
		return 0
	}
	return 1
}

// killTokenBearers SIGKILLs every process that carries token in its
// environment or belongs to the session of a watched process, until a
// scan finds none or timeout passes.
func killTokenBearers(token string, watched []ID, timeout time.Duration) bool {
	self := os.Getpid()
	deadline := time.Now().Add(timeout)
	for {
		snap, err := Snapshot()
		if err != nil {
			return false
		}
		found, unknown := 0, 0
		for _, s := range snap {
			if s.PID == self || s.Dead() {
				continue
			}
			if !inWatchedSession(s, watched) {
				bears, err := bearsToken(s.PID, token)
				if errors.Is(err, ErrEnvironUnknown) {
					unknown++ // neither a bearer nor a stranger yet: the next scan tells
				}
				if !bears {
					continue
				}
			}
			if Alive(s.PID, s.StartTime) && syscall.Kill(s.PID, syscall.SIGKILL) == nil {
				found++
			}
		}
		if found == 0 && unknown == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond) // let the killed ones die before the next scan
	}
}

func inWatchedSession(s Stat, watched []ID) bool {
	for _, w := range watched {
		if s.SID == w.PID && s.StartTime >= w.Start {
			return true
		}
	}
	return false
}

// Detach prepares cmd, a detached server that a command under a guard
// starts on purpose, to outlive the guard: its environment loses the
// guards' tokens and, when the caller runs in a guard's cgroup, it starts
// in the nearest cgroup above every guard's. cmd.Env must be set. Call the
// returned function once cmd has started (or failed to).
func Detach(cmd *exec.Cmd) (done func(), err error) {
	cmd.Env = WithoutTokens(cmd.Env)
	return leaveGuardCgroup(cmd)
}

// WithoutTokens returns env without the guards' tokens (and a job's mark,
// EnvJobMark). A detached server
// runs its job or shell with the environment its client recorded, which
// carries the tokens of the guard the client ran under: kept, they would
// make the client's watchdog kill what is meant to outlive it.
func WithoutTokens(env []string) []string {
	if env == nil {
		return nil
	}
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, EnvToken+"=") && !strings.HasPrefix(kv, EnvJobMark+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// bearsToken reports whether pid's environment carries token in EnvToken.
// A process whose environment cannot be read (another user's, on macOS)
// does not; err says why it was not read (ErrEnvironUnknown: the process
// was mid-exec, and may bear it once the exec is done).
func bearsToken(pid int, token string) (bool, error) {
	env, err := Environ(pid)
	return err == nil && carriesToken(env, token), err
}

// carriesToken reports whether the environment env holds token in
// EnvToken's ':'-separated list.
func carriesToken(env []string, token string) bool {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, EnvToken+"="); ok {
			for _, t := range strings.Split(v, ":") {
				if t == token {
					return true
				}
			}
		}
	}
	return false
}
