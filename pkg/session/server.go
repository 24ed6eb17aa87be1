package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/audit"
	"github.com/agentplane/agentplane/pkg/execguard"
	"github.com/agentplane/agentplane/pkg/launch"
	"github.com/agentplane/agentplane/pkg/netproxy"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox"
	"github.com/agentplane/agentplane/pkg/state"
)

// server owns one shell and serves calls on the session's socket. This
// file is its lifecycle: start, the accept loop, the idle and exit
// watches, and the end.
type server struct {
	dir    *state.Dir
	id     string
	handle string
	sdir   string
	spec   Spec

	mu  sync.Mutex // guards rec, sh and the fields below it
	rec Record
	sh  *shell
	// restartErr is why the replacement of a shell failed (resetShell):
	// the session ends with EndedRestartFailed, not EndedExit.
	restartErr error

	busy     chan struct{} // a token: held while a call runs
	lastUsed time.Time
	inCall   bool          // a call holds the busy token
	released chan struct{} // closed when the call in progress releases the token
	// settled is closed when the last call's bookkeeping is done; a call
	// that arrives meanwhile waits for it rather than finding the session
	// busy, since the previous caller already has its answer.
	settled chan struct{}
	seq     int
	before  map[int]uint64 // the shell's descendants when the last call ended
	tidy    func()         // removes the last call's files once its answer is out

	stopOnce sync.Once
	done     chan struct{} // closed when the session starts to end
	finished chan struct{} // closed once the end is recorded
	conns    sync.WaitGroup
	listener net.Listener
	sandbox  *sandbox.Prepared
	calls    *callDir // where each call's script, stdin and FIFOs live
	bg       *background
	track    *tracker // the server's descendants at each call's end
	auth     *authority
	dirty    chan struct{} // the record changed; the recorder writes it
	// guard kills the shell's tree should this server be SIGKILLed; nil
	// without a watchdog command.
	guard    *proctree.Guard
	watchdog []string
	// policy is the shell's runtime policy guard, with Spec.PolicyGuard.
	policy *execguard.Session
	// replaced is a protected or hidden path that a process outside
	// replaced while the shell ran: watchSandbox killed the shell's
	// sandbox and everything in it then, and the next call (or the one
	// running) starts a new shell in a new sandbox instead of ending the
	// session. Cleared by that start.
	replaced string
}

// markRecord asks the recorder to write the record soon.
func (s *server) markRecord() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// recordDelay coalesces record writes: each is fsynced, and an fsync per
// call would stall the next call's file creations on the same disk.
const recordDelay = 100 * time.Millisecond

// recorder writes the record when it changed, off the calls' path and at
// most once per recordDelay, until the session ends (finish writes the
// last one itself). What must be on disk at once (the shell's pid after a
// reset, the end) is written synchronously by its writer.
func (s *server) recorder() {
	t := time.NewTimer(recordDelay)
	t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-s.dirty:
			t.Reset(recordDelay)
			select {
			case <-s.done:
				return
			case <-t.C:
			}
			_ = s.writeRecord()
		}
	}
}

// Serve runs the session server for id until the session ends. It is the
// body of the hidden server subcommand; handshake receives the launch
// handshake (launch.Answer) once the shell is ready, then is closed.
// watchdog, when not empty, is the command of a proctree.Guard watchdog:
// the shell and everything it started then die with the server, even a
// SIGKILLed one.
func Serve(dir *state.Dir, id string, handshake *os.File, watchdog []string) error {
	keepFdsFromShells()
	s := &server{dir: dir, id: id, handle: dir.Mint(Kind, id), done: make(chan struct{}), finished: make(chan struct{}), busy: make(chan struct{}, 1), dirty: make(chan struct{}, 1), watchdog: watchdog}
	s.sdir = dir.Join("sessions", id)
	err := s.start()
	if handshake != nil {
		launch.Answer(handshake, err)
	}
	if err != nil {
		s.finish(EndedExit)
		return err
	}
	s.loop()
	return nil
}

func (s *server) start() error {
	unix.Umask(0o077)
	if err := state.ReadJSON(filepath.Join(s.sdir, "spec.json"), &s.spec); err != nil {
		return result.Errorf(result.CodeSessionStartFailed, "cannot read the session spec: %v", err)
	}
	if err := proctree.SetSubreaper(); err != nil {
		return result.Errorf(result.CodeSessionStartFailed, "cannot become a subreaper: %v", err)
	}
	if len(s.watchdog) > 0 {
		g, err := proctree.StartGuard(s.watchdog)
		if err != nil {
			return result.Errorf(result.CodeSessionStartFailed, "cannot start the watchdog: %v", err)
		}
		s.guard = g
	}
	if !strings.Contains(filepath.Base(s.spec.Shell), "bash") {
		return result.Errorf(result.CodeSessionStartFailed, "sessions need bash, not %s", s.spec.Shell).
			With("hint", "install bash or pass --shell with the path of bash")
	}
	auth, err := newAuthority()
	if err != nil {
		return result.Errorf(result.CodeSessionStartFailed, "%v", err)
	}
	s.auth = auth
	sandboxed := s.spec.Sandbox != nil && !s.spec.Sandbox.Empty()
	user := ""
	if sandboxed {
		user = s.spec.Sandbox.User
	}
	if s.calls, err = newCallDir(s.sdir, sandboxed, user); err != nil {
		return result.Errorf(result.CodeSessionStartFailed, "cannot create the calls directory: %v", err)
	}
	if sandboxed {
		exe, err := os.Executable()
		if err != nil {
			return result.Errorf(result.CodeSandboxUnavailable, "cannot find the executable for the sandbox helper: %v", err)
		}
		pol := *s.spec.Sandbox
		// The shell opens each call's FIFOs for writing; the directory
		// stays read-only to it, so it can plant nothing there.
		pol.WriteFiles = append(pol.WriteFiles, s.calls.path)
		prep, err := sandbox.Prepare(pol, exe)
		if err != nil {
			return err
		}
		s.sandbox = prep
		// Each connection the network allowlist refuses is an audit
		// record of this session.
		prep.OnDeny = netproxy.Auditor(&audit.Log{Path: s.dir.Join(audit.FileName)},
			audit.Record{Program: "agentsh", Operation: "session", Session: s.handle, Cwd: s.spec.Cwd, Description: s.spec.Description}, nil)
	}
	s.bg = newBackground(filepath.Join(s.sdir, "bg.log"), bgLogLimit)
	s.track = newTracker(os.Getpid())
	self, _ := proctree.ReadStat(os.Getpid())
	boot, _ := proctree.BootID()
	now := result.FormatTime(time.Now())
	s.rec = Record{State: StateRunning, ServerPID: os.Getpid(), ServerStart: self.StartTime, BootID: boot, Cwd: s.spec.Cwd, StartedAt: now, LastUsedAt: now}
	if s.sandbox != nil {
		s.rec.Sandbox = s.sandbox.Report
		s.rec.KeptIDs = s.sandbox.KeptIDs()
	}
	if err := s.startShell(s.spec.Cwd); err != nil {
		return err
	}
	s.calls.stock(1)
	if err := s.auth.publish(s.sdir); err != nil {
		s.killShell()
		return result.Errorf(result.CodeSessionStartFailed, "cannot write the session secret: %v", err)
	}
	sock := filepath.Join(s.sdir, "sock")
	_ = os.Remove(sock)
	l, err := listenUnix(sock)
	if err != nil {
		s.killShell()
		return result.Errorf(result.CodeSessionStartFailed, "cannot listen on the session socket: %v", err)
	}
	s.listener = l
	s.lastUsed = time.Now()
	// SIGTERM is how "session stop" ends a server whose socket is gone.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		select {
		case <-sigs:
			s.stop(EndedStopped)
		case <-s.done:
		}
	}()
	return s.writeRecord()
}

func newMarker() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "__agentsh_" + hex.EncodeToString(b)
}

func (s *server) writeRecord() error {
	return state.WriteJSONAtomic(filepath.Join(s.sdir, "status.json"), s.record(), 0o600)
}

// record is the session's record as of now, which status.json holds only
// once the recorder has written it.
func (s *server) record() Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.rec
	rec.Background = s.bg.list()
	return rec
}

// liveRecord is the record as a status call reports it: without a shell
// pid while there is no shell (the sandbox's watch killed it, and the next
// call starts another), where status.json keeps the last one's, which a
// stop without the server kills by.
func (s *server) liveRecord() Record {
	rec := s.record()
	if sh := s.currentShell(); sh != nil {
		select {
		case <-sh.exited:
			rec.ShellPID, rec.ShellStart = 0, 0
		default:
		}
	}
	return rec
}

func (s *server) currentShell() *shell {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sh
}

// loop accepts connections until the session ends.
func (s *server) loop() {
	go s.watchShell()
	go s.idleWatch()
	go s.watchSandbox()
	go s.recorder()
	go s.bg.watch(s.done, s.markRecord)
	for {
		c, err := s.listener.Accept()
		if err != nil {
			select {
			case <-s.done:
			default:
				if !errors.Is(err, net.ErrClosed) {
					continue
				}
				s.stop(EndedStopped)
			}
			// The process exits when Serve returns: first the end must be
			// recorded and every answer sent.
			<-s.finished
			s.conns.Wait()
			return
		}
		s.conns.Add(1)
		go func() {
			defer s.conns.Done()
			s.serveConn(c)
		}()
	}
}

// watchShell ends the session when the shell exits between calls. During
// a call the call itself notices and reports it. It never takes the busy
// token (that would make a caller see a busy session): when a call is in
// progress it waits for the call to be released and looks again.
func (s *server) watchShell() {
	for {
		sh := s.currentShell()
		select {
		case <-sh.exited:
		case <-s.done:
			return
		}
		s.mu.Lock()
		same, busy, released := s.sh == sh, s.inCall, s.released
		s.mu.Unlock()
		if !same {
			continue // a reset replaced the shell
		}
		if busy {
			select {
			case <-released:
			case <-s.done:
				return
			}
			s.mu.Lock()
			same = s.sh == sh
			s.mu.Unlock()
			if !same {
				continue
			}
		}
		s.mu.Lock()
		replaced := s.replaced != ""
		s.mu.Unlock()
		if replaced {
			// watchSandbox killed it: the next call starts another.
			select {
			case <-sh.superseded:
				continue
			case <-s.done:
				return
			}
		}
		s.stop(EndedExit)
		return
	}
}

// watchSandbox kills the shell's sandbox, with everything in it (the
// shell, the call's processes, the background jobs of earlier calls), as
// soon as a process outside replaces one of its protected or hidden paths
// (git config renaming a new .git/config into place): the new file at
// the path is no mount's, and a process left in the old sandbox (a
// background loop) could write it before the next call's check, for the
// host's next git to run. The next call starts a new shell in a new
// sandbox (sandbox_refreshed); the one running says what happened.
func (s *server) watchSandbox() {
	if s.sandbox == nil {
		return
	}
	replaced, stop := s.sandbox.WatchReplaced()
	defer stop()
	if replaced == nil {
		return
	}
	for {
		select {
		case <-s.done:
			return
		case path := <-replaced:
			s.mu.Lock()
			s.replaced = path
			sh := s.sh
			s.mu.Unlock()
			if sh != nil && sh.cmd != nil && sh.cmd.Process != nil {
				// The helper, PID 1 of the sandbox's namespace (or the
				// policy guard above it, whose tracees die with it):
				// the kernel kills everything inside.
				_ = sh.cmd.Process.Kill()
			}
		}
	}
}

func (s *server) idleWatch() {
	idle := s.spec.IdleTimeout
	if idle <= 0 {
		return
	}
	t := time.NewTimer(idle)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		s.mu.Lock()
		busy := s.inCall
		left := idle - time.Since(s.lastUsed)
		s.mu.Unlock()
		switch {
		case busy:
			t.Reset(idle) // a call is running: look again later
		case left <= 0:
			s.stop(EndedIdle)
			return
		default:
			t.Reset(left)
		}
	}
}

// killShell kills the current shell and everything below it.
// hangUpWait bounds how long a session that ends gives its shell to run
// the user's EXIT trap.
const hangUpWait = 2 * time.Second

// hangUp ends a live shell the way a closed terminal does, SIGHUP, so that
// the user's EXIT trap runs once, when the session really ends (its output
// goes to the shell log); a shell that has not exited within hangUpWait is
// killed with everything else.
func (s *server) hangUp() {
	sh := s.currentShell()
	if sh == nil || sh.gone() {
		return
	}
	_ = syscall.Kill(sh.self.PID, syscall.SIGHUP)
	_ = syscall.Kill(sh.self.PID, syscall.SIGCONT)
	t := time.NewTimer(hangUpWait)
	defer t.Stop()
	select {
	case <-sh.exited:
	case <-t.C:
	}
}

func (s *server) killShell() {
	sh := s.currentShell()
	if sh == nil {
		return
	}
	pid := sh.id.PID
	if s.policy != nil {
		// The shell runs under the policy guard, which leads the group:
		// killing the guard kills every process it traces (EXITKILL).
		_ = sh.cmd.Process.Kill()
	}
	// The shell is a child not yet reaped until exited closes, so its pid
	// is current; it leads its own session and group (Setsid).
	proctree.Terminate(context.Background(), proctree.Tree{Group: pid, Root: pid}, syscall.SIGKILL, 0, sh.exited)
	_ = sh.cmd.Process.Kill()
	<-sh.exited
	sh.stdin.Close()
	_ = os.Remove(sh.ctlIn)
	_ = os.Remove(sh.ctlOut)
}

// stop ends the session: the shell and everything it started are killed,
// the socket is removed and the end is recorded.
func (s *server) stop(reason string) {
	s.stopOnce.Do(func() {
		// Record the reason first: a client that finds the socket gone
		// while the shell is being killed can already say why.
		s.mu.Lock()
		if reason == EndedExit && s.restartErr != nil {
			// The shell did not exit: it was killed to be replaced, and
			// its replacement did not start.
			reason = EndedRestartFailed
		}
		s.rec.EndedReason = reason
		s.mu.Unlock()
		_ = s.writeRecord()
		close(s.done)
		if s.listener != nil {
			s.listener.Close()
		}
		s.finish(reason)
		close(s.finished)
	})
}

func (s *server) finish(reason string) {
	s.hangUp()
	s.killShell()
	// Background jobs that left the shell's group are still ours: the
	// server is a subreaper and owns nothing else but the watchdog, which
	// goes last.
	if s.policy != nil {
		defer s.policy.Close()
	}
	if s.guard != nil {
		s.guard.Kill(5 * time.Second)
		proctree.KillAllDescendantsExcept(5*time.Second, s.guard.IsWatchdog)
		s.guard.Release()
	} else {
		proctree.KillAllDescendants(5 * time.Second)
	}
	if s.bg != nil {
		s.bg.closeAll()
	}
	if s.sandbox != nil {
		s.sandbox.Cleanup()
	}
	_ = os.Remove(filepath.Join(s.sdir, "sock"))
	_ = os.Remove(tokenPath(s.sdir))
	if s.calls != nil {
		s.calls.remove()
	}
	s.mu.Lock()
	s.rec.State = StateEnded
	s.rec.EndedAt = result.FormatTime(time.Now())
	s.rec.EndedReason = reason
	if s.sh != nil && s.sh.status != nil {
		c := s.sh.status.ExitCode()
		s.rec.ExitCode = &c
	}
	s.mu.Unlock()
	_ = s.writeRecord()
	ev := state.Event{Handle: s.handle, Name: s.spec.Name, Type: "session_ended", Reason: reason}
	_, _ = s.dir.AppendEvent(ev)
}
