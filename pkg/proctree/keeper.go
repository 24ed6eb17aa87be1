package proctree

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/internal/faultpoint"
)

// A Keeper holds a guarded command's tree where no cgroup can (environ
// mode on Linux: an unprivileged user without a delegated cgroup). The
// environment token and the watched session miss a descendant that clears
// its environment and calls setsid (env -i, an execve with an empty
// environment, a daemon); the keeper misses nothing, because it is an
// ancestor of the whole tree that outlives the guarded process:
//
//	agentsh ── keeper (child subreaper, a session of its own) ── command …
//
// The keeper is a re-exec of the guarded program (KeeperCommand) that
// starts the command as its only child, in a session of its own, and
// reports the child's identity and wait status over a socket. Being a
// child subreaper, it inherits every orphan of the tree: whatever setsid,
// double fork or cleared environment a descendant uses, its parent chain
// ends at the keeper, which the kernel guarantees for as long as the
// keeper lives. When the socket reaches end of file without "done" (the
// guarded process died, SIGKILL included), the keeper SIGKILLs every
// descendant but the detached servers (its exempt predicate: a job
// supervisor or session server started on purpose) until a scan finds
// none, then exits. On "kill" it does the same and answers with what
// survived: the guarded process's own final cleanup.
//
// What it costs: one more process per call (a Go program's start), and
// the command's parent is the keeper, not agentsh ($PPID). $$, uids and
// setuid programs are untouched: no namespace, no ptrace. What it cannot
// survive: the keeper and the guarded process killed in the same instant
// (the guarded process kills the tree when it sees the keeper die).
type Keeper struct {
	ctl    *os.File      // our end of the socket
	theirs *os.File      // the keeper's end, closed once it started
	rd     *bufio.Reader // lines from the keeper
	cmd    *exec.Cmd     // the keeper's process

	mu     sync.Mutex
	exited chan struct{} // closed when the keeper's process is reaped
	done   bool
}

// KeeperCommand is the hidden first argument of the keeper's re-exec; the
// program routes it to RunKeeper.
const KeeperCommand = "__keeper"

// WatchdogCommand is the hidden entry point that runs RunWatchdog, argv[1]
// of the guard's watchdog in environ mode (StartGuard).
const WatchdogCommand = "__watchdog"

// ErrKeeperLost is what Keeper.Wait returns when the keeper died before it
// reported the command's end, and what Keeper.Started wraps when it died
// before it reported the command's start (it may have forked it): the
// tree is then the guarded process's own (it is a subreaper), and it must
// kill it at once.
var ErrKeeperLost = errors.New("proctree: the keeper died before the command")

// Keep prepares cmd, which would run a command under the guard, to run it
// under the guard's keeper instead: cmd then starts the keeper, which
// starts cmd's program as its child with cmd's environment, directory and
// descriptors (standard streams and ExtraFiles). It returns nil (and
// leaves cmd alone) where the guard has no keeper: cgroup mode, macOS, or
// a cmd whose SysProcAttr asks for more than a new session (namespaces,
// credentials: the sandbox, whose PID namespace holds its tree).
// After cmd.Start, call Started; after the command, Kill and Release.
func (g *Guard) Keep(cmd *exec.Cmd) (*Keeper, error) {
	if g == nil || g.mode != GuardEnviron || g.exe == "" || !keeperWorks() || !plainAttr(cmd.SysProcAttr) {
		return nil, nil
	}
	ours, theirs, err := socketPair()
	if err != nil {
		return nil, err
	}
	// The keeper itself must not bear the guard's token, or the
	// watchdog, which kills the bearers, would kill it in the middle of
	// its own work and free the rest of the tree: it gets the token as
	// an argument and gives it to the command alone.
	tokens := ""
	env := make([]string, 0, len(cmd.Env))
	for _, kv := range cmd.Env {
		if v, ok := strings.CutPrefix(kv, EnvToken+"="); ok {
			tokens = v
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = env
	args := []string{g.exe, KeeperCommand, strconv.Itoa(len(cmd.ExtraFiles)), tokens, cmd.Path, "--"}
	cmd.Args = append(args, cmd.Args...)
	cmd.Path = g.exe
	cmd.ExtraFiles = append([]*os.File{theirs}, cmd.ExtraFiles...)
	cmd.SysProcAttr = keeperAttr(cmd.SysProcAttr)
	return &Keeper{ctl: ours, theirs: theirs, rd: bufio.NewReader(ours), cmd: cmd, exited: make(chan struct{})}, nil
}

// plainAttr reports whether attr asks for nothing but a new session (and
// a cgroup, which environ mode has not).
func plainAttr(attr *syscall.SysProcAttr) bool {
	return attr == nil || plainAttrOS(attr)
}

// Started completes the start, once cmd.Start succeeded: it waits for the
// keeper to report the command's identity, or its failure to start it
// (the exec's error, as os/exec would give it: a *fs.PathError).
func (k *Keeper) Started() (ID, error) {
	k.theirs.Close()
	ResumeStops(k.cmd.Process.Pid)
	go func() {
		_ = k.cmd.Wait()
		close(k.exited)
	}()
	line, err := k.rd.ReadString('\n')
	f := strings.Fields(line)
	switch {
	case err == nil && len(f) == 3 && f[0] == "started":
		pid, _ := strconv.Atoi(f[1])
		start, _ := strconv.ParseUint(f[2], 10, 64)
		return ID{PID: pid, Start: start}, nil
	case err == nil && len(f) == 2 && f[0] == "failed":
		n, _ := strconv.Atoi(f[1])
		k.release()
		return ID{}, &os.PathError{Op: "fork/exec", Path: k.cmd.Args[4], Err: syscall.Errno(n)}
	}
	k.release()
	// The keeper died (or said nothing sensible) after its fork: the
	// command may run, and its tree, reparented to the caller (a
	// subreaper), is the caller's to kill, as after Wait's ErrKeeperLost.
	return ID{}, fmt.Errorf("%w: it did not report the command's start (%q)", ErrKeeperLost, strings.TrimSpace(line))
}

// Wait blocks until the command (the keeper's child) has ended and
// returns its wait status, or ErrKeeperLost.
func (k *Keeper) Wait() (syscall.WaitStatus, error) {
	for {
		line, err := k.rd.ReadString('\n')
		if err != nil {
			return 0, ErrKeeperLost
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "exited "); ok {
			n, _ := strconv.Atoi(v)
			return syscall.WaitStatus(n), nil
		}
	}
}

// Kill asks the keeper to SIGKILL every process of the tree but the
// detached servers, and returns the pids that survived timeout. Call it
// after Wait returned; without a keeper (it died) it returns nil.
func (k *Keeper) Kill(timeout time.Duration) []int {
	if _, err := fmt.Fprintf(k.ctl, "kill %d\n", timeout.Milliseconds()); err != nil {
		return nil
	}
	for {
		line, err := k.rd.ReadString('\n')
		if err != nil {
			return nil
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "killed"); ok {
			var left []int
			for _, f := range strings.Fields(v) {
				if p, err := strconv.Atoi(f); err == nil {
					left = append(left, p)
				}
			}
			return left
		}
	}
}

// Release tells the keeper that nothing needs killing any more and waits
// (bounded) for it to exit; the detached servers it held are then
// reparented to the caller.
func (k *Keeper) Release() { k.release() }

func (k *Keeper) release() {
	k.mu.Lock()
	if k.done {
		k.mu.Unlock()
		return
	}
	k.done = true
	k.mu.Unlock()
	_, _ = k.ctl.WriteString("done\n")
	k.ctl.Close()
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-k.exited:
	case <-t.C:
		_ = k.cmd.Process.Kill()
		<-k.exited
	}
}

// RunKeeper is the keeper's body: args are what Keep put after
// KeeperCommand (NEXTRA TOKENS PATH -- ARGV...), the socket is fd 3, the
// command's descriptors are 0 to 2 and 4 on, and the command's environment
// is the keeper's own with TOKENS in EnvToken. exempt spares the detached
// servers and their trees. It returns the keeper's exit status.
func RunKeeper(args []string, exempt func(Stat) bool) int {
	if len(args) < 5 || args[3] != "--" {
		fmt.Fprintln(os.Stderr, "usage: "+KeeperCommand+" NEXTRA TOKENS PATH -- PROGRAM [ARG...]")
		return 2
	}
	nextra, err := strconv.Atoi(args[0])
	if err != nil || nextra < 0 {
		return 2
	}
	env := os.Environ()
	if args[1] != "" {
		env = append(env, EnvToken+"="+args[1])
	}
	path, argv := args[2], args[4:]
	// Undumpable before the command exists: the command runs as the same
	// user, and could otherwise trace the keeper (ptrace) and hold it in a
	// traced stop, which agentsh neither sees nor ends (ResumeStops), from
	// a descendant that left the session and cleared its environment: a
	// SIGKILL of agentsh then reached a keeper that could not act, and
	// nothing else finds that descendant. It lasts until the keeper
	// execs, which it does not; the command's exec makes it dumpable again.
	Seal()
	// Inherited without close-on-exec: the command must not hold it, or
	// the keeper's death would not reach the guarded process.
	syscall.CloseOnExec(3)
	shutdownAtParentExit(3)
	ctl := os.NewFile(3, "keeper")
	var wmu sync.Mutex
	say := func(format string, a ...any) {
		wmu.Lock()
		defer wmu.Unlock()
		_, _ = fmt.Fprintf(ctl, format+"\n", a...)
	}
	if err := SetSubreaper(); err != nil {
		say("failed %d", int(syscall.EPERM))
		return 1
	}
	files := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	for i := 0; i < nextra; i++ {
		files = append(files, os.NewFile(uintptr(4+i), "extra"))
	}
	// The same session rule as the runner's: the command leads a session
	// (and so a process group) of its own, apart from the keeper's.
	p, err := os.StartProcess(path, argv, &os.ProcAttr{Env: env, Files: files,
		Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		n := int(syscall.EINVAL)
		var errno syscall.Errno
		if errors.As(err, &errno) {
			n = int(errno)
		}
		say("failed %d", n)
		return 1
	}
	faultpoint.Hit("keeper.forked")
	// The keeper must hold none of the command's descriptors: the
	// runner's readers wait for end of file on the output pipes.
	releaseStdio(nextra)
	id, err := Identify(p.Pid)
	if err != nil {
		id = ID{PID: p.Pid}
	}
	say("started %d %d", id.PID, id.Start)
	// The command is waited for as the runner waits for its own: its
	// exit first (it stays a zombie, so its pid and the group it leads
	// cannot be recycled), its reap only in kill, after its group.
	go func() {
		ws, err := waitExit(p.Pid)
		if err != nil {
			ws = syscall.WaitStatus(syscall.SIGKILL)
		}
		say("exited %d", int(ws))
	}()
	reaped := false
	kill := func(timeout time.Duration) []int {
		if !reaped { // after the reap, the group's id may be a stranger's
			_ = SignalGroup(p.Pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			for {
				if _, err := syscall.Wait4(p.Pid, &ws, 0, nil); err != syscall.EINTR {
					break
				}
			}
			reaped = true
		}
		return KillAllDescendantsExcept(timeout, exempt)
	}
	sc := bufio.NewScanner(ctl)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 1 && f[0] == "done":
			return 0
		case len(f) == 2 && f[0] == "kill":
			ms, _ := strconv.Atoi(f[1])
			say("killed%s", pidList(kill(time.Duration(ms)*time.Millisecond)))
		}
	}
	// End of file without "done": the guarded process is gone.
	if left := kill(10 * time.Second); len(left) > 0 {
		return 1
	}
	return 0
}

func pidList(pids []int) string {
	var b strings.Builder
	for _, p := range pids {
		b.WriteString(" " + strconv.Itoa(p))
	}
	return b.String()
}

// RunKeeperAbove is the keeper of a detached server whose own tree a
// cgroup cannot hold (a session server run by an unprivileged user): it
// becomes a child subreaper, starts the server (path, argv, env) as its
// only child in a session of its own with the same descriptors 0 to 3 (3:
// the launch handshake), and waits for it. A server that dies, SIGKILL
// included, leaves its orphans (its shell, what the shell started in the
// background, whatever setsid or environment they used) to the keeper,
// which kills every one but the detached servers (exempt) and exits with
// the server's status. A server that ends by itself has already killed
// its tree; the keeper finds nothing.
func RunKeeperAbove(path string, argv, env []string, exempt func(Stat) bool) int {
	if err := SetSubreaper(); err != nil {
		return 1
	}
	files := []*os.File{os.Stdin, os.Stdout, os.Stderr, os.NewFile(3, "handshake")}
	p, err := os.StartProcess(path, argv, &os.ProcAttr{Env: env, Files: files,
		Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		return 1
	}
	// The handshake is the server's: its end of file must come when the
	// server closes or dies, not when the keeper does.
	_ = syscall.Close(3)
	releaseStdio(0)
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(p.Pid, &ws, 0, nil)
		if err != syscall.EINTR {
			break
		}
	}
	KillAllDescendantsExcept(10*time.Second, exempt)
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return 1
}

// NeedsKeeper reports whether a guard started now would be in environ
// mode on a platform with a keeper: no writable cgroup v2 here, so a
// detached server's tree needs RunKeeperAbove.
func NeedsKeeper() bool {
	if !keeperWorks() {
		return false
	}
	var tok [12]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return true
	}
	g := &Guard{cgFD: -1, evFD: -1}
	dir, fd, err := makeCgroup("probe-" + hex.EncodeToString(tok[:]))
	if err != nil {
		return true
	}
	g.cgDir, g.cgFD = dir, fd
	g.dropCgroup()
	return false
}
