package session

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/audit"
	"github.com/agentplane/agentplane/pkg/capture"
	"github.com/agentplane/agentplane/pkg/netproxy"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/run"
	"github.com/agentplane/agentplane/pkg/sandbox"
	"github.com/agentplane/agentplane/pkg/state"
)

// recoverWait is how long the server waits for the shell to print its
// marker after the command's processes were SIGKILLed; a shell that does
// not answer by then is stuck in a builtin and is replaced.
const recoverWait = 2 * time.Second

// server owns one shell and serves calls on the session's socket.
type server struct {
	dir    *state.Dir
	id     string
	handle string
	sdir   string
	spec   Spec

	mu     sync.Mutex // guards rec and the shell fields
	rec    Record
	shell  *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // lines the shell prints on its own stdout
	exited chan struct{}
	waitSt *os.ProcessState

	busy     chan struct{} // a token: held while a call runs
	lastUsed time.Time
	stopOnce sync.Once
	done     chan struct{} // closed when the session starts to end
	finished chan struct{} // closed once the end is recorded
	conns    sync.WaitGroup
	listener net.Listener
	reason   string
	seq      int
	sandbox  *sandbox.Prepared
	before   map[int]uint64 // the shell's descendants when the last call ended
	calls    string         // where each call's script, stdin and FIFOs live
	// settled is closed when the last call's bookkeeping is done; a call
	// that arrives meanwhile waits for it rather than finding the session
	// busy, since the previous caller already has its answer.
	settled chan struct{}
	inCall  bool // a call holds the busy token
}

// Serve runs the session server for id until the session ends. It is the
// body of the hidden server subcommand; handshake receives one JSON line
// ({"ok":true} or {"error":…}) once the shell is ready, then is closed.
func Serve(dir *state.Dir, id string, handshake *os.File) error {
	s := &server{dir: dir, id: id, handle: dir.Mint(Kind, id), done: make(chan struct{}), finished: make(chan struct{}), busy: make(chan struct{}, 1)}
	s.sdir = dir.Join("sessions", id)
	err := s.start()
	if handshake != nil {
		msg := map[string]any{"ok": err == nil}
		if err != nil {
			msg["error"] = toWire(err)
		}
		b, _ := json.Marshal(msg)
		_, _ = handshake.Write(append(b, '\n'))
		handshake.Close()
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
		return result.Errorf(CodeStartFailed, "cannot read the session spec: %v", err)
	}
	if err := proctree.SetSubreaper(); err != nil {
		return result.Errorf(CodeStartFailed, "cannot become a subreaper: %v", err)
	}
	s.calls = filepath.Join(s.sdir, "calls")
	if s.spec.Sandbox != nil && !s.spec.Sandbox.Empty() {
		exe, err := os.Executable()
		if err != nil {
			return result.Errorf(sandbox.CodeUnavailable, "cannot find the executable for the sandbox helper: %v", err)
		}
		prep, err := sandbox.Prepare(*s.spec.Sandbox, exe)
		if err != nil {
			return err
		}
		s.sandbox = prep
		// Each connection the network allowlist refuses is an audit
		// record of this session.
		prep.OnDeny = netproxy.Auditor(&audit.Log{Path: s.dir.Join(audit.FileName)},
			audit.Record{Program: "agentsh", Operation: "session", Session: s.handle, Cwd: s.spec.Cwd, Description: s.spec.Description}, nil)
		// The shell opens each call's FIFOs for writing, which a sandbox
		// allows only in its private temp dir, in every mode; a --user
		// shell must also be able to reach and open them.
		s.calls = filepath.Join(prep.TempDir, ".agentsh-calls")
	}
	if err := os.MkdirAll(s.calls, 0o700); err != nil {
		return result.Errorf(CodeStartFailed, "cannot create the calls directory: %v", err)
	}
	if s.sandbox != nil {
		_ = os.Chmod(s.calls, 0o755)
	}
	self, _ := proctree.ReadStat(os.Getpid())
	boot, _ := proctree.BootID()
	now := result.FormatTime(time.Now())
	s.rec = Record{State: StateRunning, ServerPID: os.Getpid(), ServerStart: self.StartTime, BootID: boot, Cwd: s.spec.Cwd, StartedAt: now, LastUsedAt: now}
	if err := s.startShell(s.spec.Cwd); err != nil {
		return err
	}
	sock := filepath.Join(s.sdir, "sock")
	_ = os.Remove(sock)
	l, err := listenUnix(sock)
	if err != nil {
		s.killShell()
		return result.Errorf(CodeStartFailed, "cannot listen on the session socket: %v", err)
	}
	s.listener = l
	s.lastUsed = time.Now()
	return s.writeRecord()
}

// startShell starts a fresh shell in cwd and waits until it answers.
func (s *server) startShell(cwd string) error {
	argv := append([]string{s.spec.Shell}, s.spec.ShellArgs...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = cwd
	cmd.Env = s.spec.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if s.sandbox != nil {
		// The shell starts inside the sandbox helper (this executable),
		// so every command of the session inherits the confinement.
		exe, _ := os.Executable()
		cmd.Path = exe
		cmd.Args = s.sandbox.Argv(argv)
		cmd.Args[0] = "agentsh"
		cmd.Env = append(append([]string(nil), s.spec.Env...), s.sandbox.Env...)
		if s.sandbox.SysProcAttr != nil {
			a := *s.sandbox.SysProcAttr
			cmd.SysProcAttr = &a
		}
	}
	// A session of its own: no controlling terminal, and a process group
	// whose id is the shell's pid, for the final kill.
	cmd.SysProcAttr.Setsid = true
	in, err := cmd.StdinPipe()
	if err != nil {
		return result.Errorf(CodeStartFailed, "pipe: %v", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return result.Errorf(CodeStartFailed, "pipe: %v", err)
	}
	errLog, err := os.OpenFile(filepath.Join(s.sdir, "shell.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err == nil {
		cmd.Stderr = errLog
		defer errLog.Close()
	}
	if s.sandbox != nil {
		files, started, err := s.sandbox.Launch()
		if err != nil {
			return err
		}
		defer started()
		cmd.ExtraFiles = files
	}
	if err := cmd.Start(); err != nil {
		return result.Errorf(CodeStartFailed, "cannot start the shell %s: %v", s.spec.Shell, err).Wrap(err)
	}
	lines := make(chan string, 16)
	exited := make(chan struct{})
	go func() {
		r := bufio.NewReader(out)
		for {
			l, err := r.ReadString('\n')
			if l != "" {
				lines <- strings.TrimSuffix(l, "\n")
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		s.mu.Lock()
		s.waitSt = cmd.ProcessState
		s.mu.Unlock()
		close(exited)
	}()
	st, _ := proctree.ReadStat(cmd.Process.Pid)
	s.mu.Lock()
	s.shell, s.stdin, s.lines, s.exited = cmd, in, lines, exited
	s.rec.ShellPID, s.rec.ShellStart, s.rec.Cwd = cmd.Process.Pid, st.StartTime, cwd
	s.mu.Unlock()

	// Quiet, predictable settings; then a marker proves the shell reads us.
	marker := newMarker()
	init := "PS1=; PS2=; unset PROMPT_COMMAND 2>/dev/null; shopt -s expand_aliases 2>/dev/null; set +o history 2>/dev/null\n" +
		"printf '\\n%s %d\\n%s\\n' " + marker + " 0 \"$PWD\"\n"
	if _, err := io.WriteString(in, init); err != nil {
		return result.Errorf(CodeStartFailed, "the shell did not accept input: %v", err)
	}
	if _, _, ok := s.awaitMarker(marker, 30*time.Second); !ok {
		s.killShell()
		if s.sandbox != nil {
			if err := s.sandbox.Failure(); err != nil {
				return err
			}
		}
		return result.Errorf(CodeStartFailed, "the shell %s did not start (see %s)", s.spec.Shell, filepath.Join(s.sdir, "shell.log"))
	}
	return nil
}

// awaitMarker reads the shell's stdout until the marker line and the cwd
// line that follows it, or until timeout or the shell's exit.
func (s *server) awaitMarker(marker string, timeout time.Duration) (code int, cwd string, ok bool) {
	var t <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		t = tm.C
	}
	return s.awaitMarkerUntil(marker, t, nil)
}

// Why awaitMarkerUntil returned.
const (
	gotMarker = iota
	gotEOF    // the shell's stdout ended: it exited
	gotTimer
	gotStop
)

// awaitMarkerUntil is awaitMarker with explicit stop channels.
func (s *server) awaitMarkerUntil(marker string, t <-chan time.Time, stop <-chan struct{}) (int, string, bool) {
	code, cwd, why := s.awaitMarkerWhy(marker, t, stop)
	return code, cwd, why == gotMarker
}

func (s *server) awaitMarkerWhy(marker string, t <-chan time.Time, stop <-chan struct{}) (int, string, int) {
	s.mu.Lock()
	lines := s.lines
	s.mu.Unlock()
	for {
		select {
		case l, open := <-lines:
			if !open {
				return 0, "", gotEOF
			}
			f := strings.Fields(l)
			if len(f) != 2 || f[0] != marker {
				continue // stale output of an abandoned call, or noise
			}
			code, _ := strconv.Atoi(f[1])
			select {
			case cwd, open := <-lines:
				if !open {
					return code, "", gotMarker
				}
				return code, cwd, gotMarker
			case <-time.After(5 * time.Second):
				return code, "", gotMarker
			}
		case <-t:
			return 0, "", gotTimer
		case <-stop:
			return 0, "", gotStop
		}
	}
}

func newMarker() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "__agentsh_" + hex.EncodeToString(b)
}

func (s *server) writeRecord() error {
	s.mu.Lock()
	rec := s.rec
	s.mu.Unlock()
	return state.WriteJSONAtomic(filepath.Join(s.sdir, "status.json"), rec, 0o600)
}

// loop accepts connections until the session ends.
func (s *server) loop() {
	go s.watchShell()
	go s.idleWatch()
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
// a call the call itself notices and reports it. It looks at inCall rather
// than taking the busy token, so that it never makes a caller see a busy
// session.
func (s *server) watchShell() {
	for {
		s.mu.Lock()
		exited := s.exited
		s.mu.Unlock()
		select {
		case <-exited:
		case <-s.done:
			return
		}
		s.mu.Lock()
		same, busy := s.exited == exited, s.inCall
		s.mu.Unlock()
		if !same {
			continue // a reset replaced the shell
		}
		if busy {
			// The running call reports the exit; end the session after it.
			select {
			case s.busy <- struct{}{}:
				s.mu.Lock()
				same = s.exited == exited
				s.mu.Unlock()
				<-s.busy
			case <-s.done:
				return
			}
			if !same {
				continue
			}
		}
		s.stop(EndedExit)
		return
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

func (s *server) serveConn(c net.Conn) {
	defer c.Close()
	dec := json.NewDecoder(bufio.NewReader(c))
	var m message
	if err := dec.Decode(&m); err != nil {
		return
	}
	enc := &lineWriter{w: c}
	switch m.Op {
	case "stop":
		s.stop(EndedStopped)
		_ = enc.send(message{Type: "stopped"})
	case "run":
		if m.Call == nil {
			_ = enc.send(message{Type: "error", Error: toWire(result.Errorf(result.CodeInvalidRequest, "run without a call"))})
			return
		}
		// Cancellation arrives on the same connection, or as its close.
		cancel := make(chan struct{})
		go func() {
			var m2 message
			for {
				if err := dec.Decode(&m2); err != nil || m2.Op == "cancel" {
					close(cancel)
					return
				}
			}
		}()
		obj, ended, err := s.call(*m.Call, cancel, enc)
		if err != nil {
			_ = enc.send(message{Type: "error", Error: toWire(err)})
			return
		}
		b, _ := result.Marshal(obj)
		settled := make(chan struct{})
		s.mu.Lock()
		s.settled = settled
		s.mu.Unlock()
		_ = enc.send(message{Type: "result", Result: b})
		// Bookkeeping that the caller need not wait for: the record
		// (fsynced) and the list of processes the next call inherits.
		_ = s.writeRecord()
		if !ended {
			s.mu.Lock()
			pid := s.rec.ShellPID
			s.mu.Unlock()
			before := descendants(pid)
			s.mu.Lock()
			s.before = before
			s.mu.Unlock()
		}
		s.release()
		close(settled)
		if ended {
			s.stop(EndedExit)
		}
	default:
		_ = enc.send(message{Type: "error", Error: toWire(result.Errorf(result.CodeInvalidRequest, "unknown operation %q", m.Op))})
	}
}

// lineWriter sends one JSON message per line, serialising writers.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) send(m message) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	enc := json.NewEncoder(l.w)
	enc.SetEscapeHTML(false) // command output stays readable: <, > and &
	return enc.Encode(m)
}

// acquire takes the busy token, waiting up to wait (and always for the
// bookkeeping of a call whose answer was already sent), and marks a call
// in progress.
func (s *server) acquire(wait time.Duration) bool {
	s.mu.Lock()
	settled := s.settled
	s.mu.Unlock()
	if settled != nil {
		select {
		case <-settled:
		case <-time.After(30 * time.Second):
		}
	}
	ok := false
	select {
	case s.busy <- struct{}{}:
		ok = true
	default:
	}
	if !ok && wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case s.busy <- struct{}{}:
			ok = true
		case <-t.C:
		case <-s.done:
		}
	}
	if ok {
		s.mu.Lock()
		s.inCall = true
		s.mu.Unlock()
	}
	return ok
}

// release ends the call in progress and frees the busy token.
func (s *server) release() {
	s.mu.Lock()
	s.inCall = false
	s.mu.Unlock()
	<-s.busy
}

// call runs one command in the shell and renders its result.
func (s *server) call(req CallRequest, cancel <-chan struct{}, enc *lineWriter) (*result.Object, bool, error) {
	if !s.acquire(req.BusyTimeout) {
		return nil, false, result.Errorf(CodeSessionBusy, "the session is running another command").
			With("hint", "wait for it, or pass --busy-timeout to wait up to that long")
	}
	select {
	case <-s.done:
		s.release()
	case <-s.exitedChan():
		s.release()
		// The shell is gone: end the session (once) and answer only when
		// everything it started is dead, so that a caller who sees
		// session_ended can rely on it.
		go s.stop(EndedExit)
	default:
		// The busy token stays held: serveConn releases it after the
		// result is sent and the bookkeeping is done.
		return s.callReady(req, cancel, enc)
	}
	<-s.finished
	s.mu.Lock()
	reason := s.rec.EndedReason
	s.mu.Unlock()
	return nil, false, result.Errorf(CodeSessionEnded, "the session has ended (%s)", reason).With("ended_reason", reason)
}

// callReady runs a call once the busy token is held and the shell is up.
func (s *server) callReady(req CallRequest, cancel <-chan struct{}, enc *lineWriter) (*result.Object, bool, error) {
	s.mu.Lock()
	s.seq++
	n := s.seq
	s.mu.Unlock()

	c, err := s.prepareCall(n, req, enc)
	if err != nil {
		s.release()
		return nil, false, err
	}
	defer c.cleanup()
	res, cwd, reset, ended := s.execute(c, req, cancel)

	s.mu.Lock()
	s.lastUsed = time.Now()
	s.rec.LastUsedAt = result.FormatTime(s.lastUsed)
	s.rec.Calls++
	if cwd != "" {
		s.rec.Cwd = cwd
	}
	if reset {
		s.rec.Resets++
	}
	cwdNow := s.rec.Cwd
	pid := s.rec.ShellPID
	s.mu.Unlock()

	obj := run.Render(res, capture.RenderOptions{Raw: req.Raw, Binary: req.Binary})
	obj.Set("cwd", cwdNow).Set("command", req.Command).Set("pid", pid).Set("session", s.handle)
	if reset {
		obj.Set("session_reset", true)
	}
	if ended {
		obj.Set("session_ended", true)
	}
	if s.sandbox != nil {
		obj.Set("sandbox", s.sandbox.Report)
		// The session's allowlist and every refusal since it started.
		if n := s.sandbox.Network(); n != nil {
			obj.Set("network", n)
		}
	}
	if req.Description != "" {
		obj.Set("description", req.Description)
	}
	return obj, ended, nil
}

func (s *server) exitedChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exited
}

// pendingCall holds the files and readers of one call.
type pendingCall struct {
	n       int
	script  string
	stdin   string
	fifos   []string
	readers []*os.File
	holders []*os.File // our own write ends, so reads do not see EOF before the shell opens the FIFO
	caps    map[string]*capture.HeadTail
	pumps   sync.WaitGroup
	done    chan struct{}
}

func (c *pendingCall) cleanup() {
	for _, h := range c.holders {
		h.Close()
	}
	for _, r := range c.readers {
		r.Close()
	}
	for _, p := range append([]string{c.script, c.stdin}, c.fifos...) {
		if p != "" && p != os.DevNull {
			_ = os.Remove(p)
		}
	}
}

// writeCallFile writes a call's script or stdin; a sandboxed shell may run
// as another user, who must be able to read it.
func (s *server) writeCallFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	if s.sandbox != nil {
		return os.Chmod(path, 0o644)
	}
	return nil
}

func (s *server) prepareCall(n int, req CallRequest, enc *lineWriter) (*pendingCall, error) {
	calls := s.calls
	c := &pendingCall{n: n, caps: map[string]*capture.HeadTail{}, done: make(chan struct{}), stdin: os.DevNull}
	c.script = filepath.Join(calls, fmt.Sprintf("%d.sh", n))
	if err := s.writeCallFile(c.script, []byte(req.Command+"\n")); err != nil {
		return nil, result.Errorf(result.CodeInternal, "cannot write the call: %v", err)
	}
	if req.Stdin != nil {
		c.stdin = filepath.Join(calls, fmt.Sprintf("%d.in", n))
		if err := s.writeCallFile(c.stdin, []byte(*req.Stdin)); err != nil {
			c.cleanup()
			return nil, result.Errorf(result.CodeInternal, "cannot write stdin: %v", err)
		}
	}
	keep, err := capture.ParseKeep(req.Keep)
	if err != nil {
		c.cleanup()
		return nil, result.Errorf(result.CodeInvalidRequest, "keep: %v", err)
	}
	names := []string{"stdout", "stderr"}
	if req.Merge {
		names = []string{"output"}
	}
	for _, name := range names {
		p := filepath.Join(calls, fmt.Sprintf("%d.%s", n, name))
		if err := unix.Mkfifo(p, 0o600); err != nil {
			c.cleanup()
			return nil, result.Errorf(result.CodeInternal, "mkfifo: %v", err)
		}
		if s.sandbox != nil {
			// A --user shell opens it for writing; the directory is
			// reachable only through the sandbox's private dir.
			_ = os.Chmod(p, 0o666)
		}
		c.fifos = append(c.fifos, p)
		r, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			c.cleanup()
			return nil, result.Errorf(result.CodeInternal, "open fifo: %v", err)
		}
		c.readers = append(c.readers, r)
		w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			c.cleanup()
			return nil, result.Errorf(result.CodeInternal, "open fifo: %v", err)
		}
		c.holders = append(c.holders, w)
		hc := capture.NewHeadTail(req.MaxOutput, keep)
		c.caps[name] = hc
		var cleaner *capture.Stream
		if req.Stream {
			cleaner = capture.NewStream(capture.RenderOptions{Raw: req.Raw})
		}
		c.pumps.Add(1)
		go func(name string, r *os.File) {
			defer c.pumps.Done()
			buf := make([]byte, 64<<10)
			for {
				k, err := r.Read(buf)
				if k > 0 {
					hc.Write(buf[:k])
					if cleaner != nil {
						if t := cleaner.Next(buf[:k]); len(t) > 0 {
							_ = enc.send(message{Type: name, Data: string(t)})
						}
					}
				}
				if err != nil {
					if cleaner != nil {
						if t := cleaner.Flush(); len(t) > 0 {
							_ = enc.send(message{Type: name, Data: string(t)})
						}
					}
					return
				}
			}
		}(name, r)
	}
	go func() { c.pumps.Wait(); close(c.done) }()
	return c, nil
}

// execute sends the call to the shell and waits for it, handling timeout,
// cancellation and the shell's exit.
func (s *server) execute(c *pendingCall, req CallRequest, cancel <-chan struct{}) (res *run.Result, cwd string, reset, ended bool) {
	res = &run.Result{Status: run.StatusCompleted, ExitCode: -1, StartedAt: time.Now()}
	if out, ok := c.caps["output"]; ok {
		res.Output = out
	} else {
		res.Stdout, res.Stderr = c.caps["stdout"], c.caps["stderr"]
	}
	s.mu.Lock()
	shellPID := s.rec.ShellPID
	in := s.stdin
	s.mu.Unlock()
	// Processes alive when the previous call ended (background jobs) are
	// not this call's; the list was taken off the critical path.
	s.mu.Lock()
	before := s.before
	s.before = nil
	s.mu.Unlock()
	if before == nil {
		before = descendants(shellPID)
	}

	marker := newMarker()
	var redir string
	if len(c.fifos) == 1 {
		redir = fmt.Sprintf("> %s 2>&1", shellQuote(c.fifos[0]))
	} else {
		redir = fmt.Sprintf("> %s 2> %s", shellQuote(c.fifos[0]), shellQuote(c.fifos[1]))
	}
	line := fmt.Sprintf(". %s < %s %s; printf '\\n%s %%d\\n%%s\\n' $? \"$PWD\"\n", shellQuote(c.script), shellQuote(c.stdin), redir, marker)
	if _, err := io.WriteString(in, line); err != nil {
		ended = true
	}

	var timer <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timer = t.C
	}
	code, newCwd, why := 0, "", gotEOF
	if !ended {
		code, newCwd, why = s.awaitMarkerWhy(marker, timer, cancel)
	}
	res.Elapsed = time.Since(res.StartedAt)
	switch {
	case why == gotMarker:
		res.ExitCode, cwd = code, newCwd
	case why == gotEOF:
		ended = true
		<-s.exitedChan()
	default:
		// Timeout or cancellation: interrupt what this call started.
		select {
		case <-cancel:
			res.Status = run.StatusCancelled
		default:
			res.Status = run.StatusTimeout
			res.TimedOut = true
		}
		sig := syscall.SIGINT
		signalNew(shellPID, before, sig)
		res.Signal = proctree.SignalName(sig)
		var ok bool
		code, newCwd, ok = s.awaitMarker(marker, max(req.KillAfter, time.Millisecond))
		if !ok && !s.shellGone() {
			signalNew(shellPID, before, syscall.SIGKILL)
			res.Signal = "SIGKILL"
			code, newCwd, ok = s.awaitMarker(marker, recoverWait)
		}
		switch {
		case ok:
			res.ExitCode, cwd = code, newCwd
		case s.shellGone():
			ended = true
		default:
			// The shell itself is stuck (a builtin loop): replace it in
			// the last known cwd.
			s.mu.Lock()
			last := s.rec.Cwd
			s.mu.Unlock()
			s.killShell()
			if err := s.startShell(last); err != nil {
				ended = true
			} else {
				reset = true
			}
		}
		if res.TimedOut {
			res.ExitCode = run.ExitTimeout
		} else if res.ExitCode < 0 {
			res.ExitCode = 128 + int(syscall.SIGINT)
		}
	}
	if ended {
		s.mu.Lock()
		st := s.waitSt
		s.mu.Unlock()
		if st == nil {
			<-s.exitedChan()
			s.mu.Lock()
			st = s.waitSt
			s.mu.Unlock()
		}
		if ws, ok := st.Sys().(syscall.WaitStatus); ok {
			if ws.Signaled() {
				res.Signal = proctree.SignalName(ws.Signal())
				res.ExitCode = 128 + int(ws.Signal())
			} else if res.Status == run.StatusCompleted {
				res.ExitCode = ws.ExitStatus()
			}
		}
	} else if res.Status == run.StatusCompleted && res.ExitCode > 128 && res.ExitCode <= 128+64 {
		// The shell reports a death by signal N as 128+N.
		res.Signal = proctree.SignalName(syscall.Signal(res.ExitCode - 128))
	}

	// The shell has closed its ends; ours go now, then background
	// processes that inherited the FIFOs get the drain to finish writing.
	for _, h := range c.holders {
		h.Close()
	}
	c.holders = nil
	drain := req.Drain
	if drain > 0 {
		t := time.NewTimer(drain)
		select {
		case <-c.done:
		case <-t.C:
		}
		t.Stop()
	}
	for _, r := range c.readers {
		r.Close()
	}
	<-c.done
	c.readers = nil
	return res, cwd, reset, ended
}

func (s *server) shellGone() bool {
	select {
	case <-s.exitedChan():
		return true
	default:
		return false
	}
}

// descendants returns the (pid, start time) identities below pid.
func descendants(pid int) map[int]uint64 {
	out := map[int]uint64{}
	snap, err := proctree.Snapshot()
	if err != nil {
		return out
	}
	for _, d := range proctree.Descendants(snap, pid) {
		out[d.PID] = d.StartTime
	}
	return out
}

// signalNew signals the shell's descendants that were not there before the
// call: the command's processes, not background jobs of earlier calls.
func signalNew(shellPID int, before map[int]uint64, sig syscall.Signal) {
	old := func(p proctree.Stat) bool { st, ok := before[p.PID]; return ok && st == p.StartTime }
	proctree.Tree{Root: shellPID, Spare: old}.Signal(sig)
}

// killShell kills the current shell and everything below it.
func (s *server) killShell() {
	s.mu.Lock()
	cmd, exited := s.shell, s.exited
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	pid := cmd.Process.Pid
	// The shell is a child not yet reaped until exited closes, so its pid
	// is current; it leads its own session and group (Setsid).
	proctree.Terminate(context.Background(), proctree.Tree{Group: pid, Root: pid}, syscall.SIGKILL, 0, exited)
	_ = cmd.Process.Kill()
	<-exited
}

// stop ends the session: the shell and everything it started are killed,
// the socket is removed and the end is recorded.
func (s *server) stop(reason string) {
	s.stopOnce.Do(func() {
		s.reason = reason
		// Record the reason first: a client that finds the socket gone
		// while the shell is being killed can already say why.
		s.mu.Lock()
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
	s.killShell()
	// Background jobs that left the shell's group are still ours: the
	// server is a subreaper and owns nothing else.
	proctree.KillAllDescendants(5 * time.Second)
	if s.sandbox != nil {
		s.sandbox.Cleanup()
	}
	_ = os.Remove(filepath.Join(s.sdir, "sock"))
	_ = os.RemoveAll(s.calls)
	s.mu.Lock()
	s.rec.State = StateEnded
	s.rec.EndedAt = result.FormatTime(time.Now())
	s.rec.EndedReason = reason
	if s.waitSt != nil {
		c := s.waitSt.ExitCode()
		s.rec.ExitCode = &c
	}
	s.mu.Unlock()
	_ = s.writeRecord()
	ev := state.Event{Handle: s.handle, Name: s.spec.Name, Type: "session_ended", Reason: reason}
	_, _ = s.dir.AppendEvent(ev)
}

// shellQuote quotes s for the shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// listenUnix listens on path; a path longer than a socket address allows
// is reached through /proc/self/fd of its directory.
func listenUnix(path string) (net.Listener, error) {
	addr, closeDir, err := socketAddr(path)
	if err != nil {
		return nil, err
	}
	defer closeDir()
	l, err := net.Listen("unix", addr)
	if err != nil {
		return nil, err
	}
	// The socket file must not outlive the listener's close by accident,
	// but the server removes it itself at the end.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = os.Chmod(path, 0o600)
	return l, nil
}

func socketAddr(path string) (string, func(), error) {
	const max = 100 // sun_path is 108 bytes including the NUL
	if len(path) <= max {
		return path, func() {}, nil
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return "", nil, err
	}
	return "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + filepath.Base(path), func() { d.Close() }, nil
}

// dial connects to a session's socket.
func dial(ctx context.Context, path string) (net.Conn, error) {
	addr, closeDir, err := socketAddr(path)
	if err != nil {
		return nil, err
	}
	defer closeDir()
	var d net.Dialer
	return d.DialContext(ctx, "unix", addr)
}
