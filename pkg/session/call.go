package session

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/pkg/capture"
	"github.com/agentplane/agentplane/pkg/execguard"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/run"
	"github.com/agentplane/agentplane/pkg/sandbox"
)

// This file is call execution: a connection's operation, the busy token,
// the call's files and output pumps, and the run of one call in the shell
// (see shell.go for the protocol).

func (s *server) serveConn(c net.Conn) {
	defer c.Close()
	// Who connected is read before the request comes: a client connects
	// while it runs its own checks (Manager.Dial).
	who := s.auth.identify(c)
	defer who.release()
	dec := json.NewDecoder(bufio.NewReader(c))
	var m message
	if err := dec.Decode(&m); err != nil {
		return
	}
	enc := &lineWriter{w: c}
	if err := s.auth.admit(who, m.Token); err != nil {
		_ = enc.send(message{Type: "error", Error: toWire(err)})
		return
	}
	switch m.Op {
	case "stop":
		s.stop(EndedStopped)
		_ = enc.send(message{Type: "stopped"})
	case "status":
		// The live record: status.json lags it by up to recordDelay.
		b, err := json.Marshal(s.liveRecord())
		if err != nil {
			_ = enc.send(message{Type: "error", Error: toWire(err)})
			return
		}
		_ = enc.send(message{Type: "status", Result: b})
	case "run":
		if m.Call == nil {
			_ = enc.send(message{Type: "error", Error: toWire(result.Errorf(result.CodeInvalidRequest, "run without a call"))})
			return
		}
		if m.Call.Sandbox != "" && m.Call.Sandbox != SandboxDigest(s.spec.Sandbox) {
			_ = enc.send(message{Type: "error", Error: toWire(result.Errorf(result.CodeSessionRefused,
				"the session's spec file names another sandbox than the one its shell runs in (it was rewritten since the session started)"))})
			return
		}
		// Cancellation arrives on the same connection, or as its close:
		// a caller that is gone counts as one killed (SIGKILL), whose
		// call need not be given any grace.
		cancel := make(chan struct{})
		var cancelSig atomic.Int32
		go func() {
			var m2 message
			for {
				err := dec.Decode(&m2)
				if err != nil {
					cancelSig.Store(int32(syscall.SIGKILL))
				}
				if err != nil || m2.Op == "cancel" {
					if err == nil && m2.Signal > 0 && m2.Signal < 65 {
						cancelSig.Store(int32(m2.Signal))
					}
					close(cancel)
					return
				}
			}
		}()
		obj, ended, err := s.call(*m.Call, cancel, func() syscall.Signal { return syscall.Signal(cancelSig.Load()) }, enc)
		if err != nil {
			_ = enc.send(message{Type: "error", Error: toWire(err)})
			s.tidyUp()
			return
		}
		settled := make(chan struct{})
		s.mu.Lock()
		s.settled = settled
		s.mu.Unlock()
		// What the call left running was adopted before its result goes
		// out (execute), so that the result and any status after it
		// list it.
		if bg := s.bg.started(s.seqNow()); len(bg) > 0 {
			obj.Set("background", bg)
		}
		b, _ := result.Marshal(obj)
		_ = enc.sendResult(b)
		// The call's files go and the next call's are made now, while
		// its caller starts.
		s.tidyUp()
		s.calls.stock(s.seqNow() + 1)
		s.release()
		close(settled)
		if ended {
			s.stop(EndedExit)
		}
	default:
		_ = enc.send(message{Type: "error", Error: toWire(result.Errorf(result.CodeInvalidRequest, "unknown operation %q", m.Op))})
	}
}

// afterCall is the bookkeeping of a call that the caller need not wait
// for: what the call left running, and the list of processes the next
// call inherits (one scan of the server's descendants for both). The
// record is written in the background: the next call need not wait for
// its fsync.
func (s *server) afterCall(ended bool, callText string) {
	if !ended {
		procs := s.track.scan()
		sh := s.currentShell()
		prev := s.takeBefore()
		if prev == nil {
			prev = map[int]uint64{}
		}
		// In a sandbox the shell itself is below the process the server
		// started; it is not something a call left running (after a
		// reset it is new).
		prev[sh.self.PID] = sh.self.Start
		s.bg.adopt(procs, s.seqNow(), sh.id.PID, sh.self.PID, cmdline(sh.self.PID), callText, prev)
		before := make(map[int]uint64, len(procs))
		for _, d := range procs {
			before[d.PID] = d.StartTime
		}
		s.mu.Lock()
		s.before = before
		s.mu.Unlock()
	}
	s.markRecord()
}

// tidyUp removes the files of the call whose answer just went out.
func (s *server) tidyUp() {
	s.mu.Lock()
	tidy := s.tidy
	s.tidy = nil
	s.mu.Unlock()
	if tidy != nil {
		tidy()
	}
}

func (s *server) seqNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// takeBefore returns (and forgets) the processes that were there before
// the last call.
func (s *server) takeBefore() map[int]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.before
	s.before = nil
	return b
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
		case <-s.done:
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
		s.released = make(chan struct{})
		s.mu.Unlock()
	}
	return ok
}

// release ends the call in progress and frees the busy token.
func (s *server) release() {
	s.mu.Lock()
	s.inCall = false
	released := s.released
	s.mu.Unlock()
	<-s.busy
	if released != nil {
		close(released)
	}
}

// call runs one command in the shell and renders its result.
func (s *server) call(req CallRequest, cancel <-chan struct{}, cancelSig func() syscall.Signal, enc *lineWriter) (*result.Object, bool, error) {
	if !s.acquire(req.BusyTimeout) {
		return nil, false, result.Errorf(result.CodeSessionBusy, "the session is running another command").
			With("hint", "wait for it, or pass --busy-timeout to wait up to that long")
	}
	sh := s.currentShell()
	s.mu.Lock()
	replaced := s.replaced != ""
	s.mu.Unlock()
	select {
	case <-s.done:
		s.release()
	case <-sh.exited:
		if replaced {
			// watchSandbox killed it: callReady starts a new one.
			return s.callReady(req, cancel, cancelSig, enc)
		}
		s.release()
		// The shell is gone: end the session (once) and answer only when
		// everything it started is dead, so that a caller who sees
		// session_ended can rely on it.
		go s.stop(EndedExit)
	default:
		// The busy token stays held: serveConn releases it after the
		// result is sent and the bookkeeping is done.
		return s.callReady(req, cancel, cancelSig, enc)
	}
	<-s.finished
	s.mu.Lock()
	reason := s.rec.EndedReason
	s.mu.Unlock()
	return nil, false, result.Errorf(result.CodeSessionEnded, "the session has ended (%s)", reason).With("ended_reason", reason)
}

// resetShell replaces a shell that cannot be brought back with a fresh
// one in its last known cwd.
func (s *server) resetShell(sh *shell, out *outcome) {
	last := sh.cwd()
	if last == "" {
		s.mu.Lock()
		last = s.rec.Cwd
		s.mu.Unlock()
	}
	s.killShell()
	if err := s.startShell(existingDir(last)); err != nil {
		out.ended, out.restartErr = true, err
		s.mu.Lock()
		s.restartErr = err
		s.mu.Unlock()
		return
	}
	out.reset = true
	s.mu.Lock()
	s.rec.Resets++
	s.mu.Unlock()
	// The new shell's identity must be on disk before anyone is told:
	// stop and the dead-server cleanup go by it.
	_ = s.writeRecord()
}

// existingDir is dir, or, when the command removed it, the nearest
// directory above it that still exists: a replaced shell cannot start in
// a directory that is gone.
func existingDir(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
		if d == filepath.Dir(d) {
			return dir
		}
	}
}

// outcome is what became of the session during a call.
type outcome struct {
	cwd    string
	broken bool // the command broke the shell's protocol: see gotBroken
	lost   bool // the shell lost its control channel: see gotLost, lostPrompt
	unrun  bool // the call's descriptors could not be put in place: see gotUnrun
	reset  bool // the shell could not be brought back and was replaced
	stuck  bool // the command left posix mode unreachable: see stuckMark
	ended  bool // the shell is gone (exit, exec, killed)
	// killedFor: a protected or hidden path replaced outside during the
	// call, for which the shell's sandbox was killed (watchSandbox).
	killedFor string
	// restartErr: the shell had to be replaced and its replacement did
	// not start; the session ends (EndedRestartFailed).
	restartErr error
	// pending: killed for killedFor, no replacement held still: the next
	// call starts the shell (callReady), and the session goes on.
	pending bool
}

// stillReplaced reports whether a protected or hidden path was replaced
// again since the last new shell's sandbox recorded it.
func (s *server) stillReplaced() bool {
	s.mu.Lock()
	replaced := s.replaced != ""
	s.mu.Unlock()
	return replaced || (s.sandbox != nil && s.sandbox.Stale() != "")
}

// overtaken reports whether a new shell's failure to start err is a
// protected or hidden path replaced again meanwhile: by the helper's word
// (sandbox.ChangedError), or as stillReplaced sees it, which a new file
// that took the old one's inode number hides.
func (s *server) overtaken(err error) bool {
	var ce *sandbox.ChangedError
	return errors.As(err, &ce) || s.stillReplaced()
}

// forgetRestartErr drops the failure of a replacement shell that is tried
// again: the session does not end for it.
func (s *server) forgetRestartErr() {
	s.mu.Lock()
	s.restartErr = nil
	s.mu.Unlock()
}

// spareNewShell adds the processes there now to those from before the
// call: a new shell's own (its guard, the sandbox's helper) were not there
// when the last call ended, and are no more this call's than the old ones
// were, for its cancellation and for what it leaves running.
func (s *server) spareNewShell() {
	procs := s.track.scan()
	s.mu.Lock()
	defer s.mu.Unlock()
	before := make(map[int]uint64, len(s.before)+len(procs))
	maps.Copy(before, s.before)
	for _, d := range procs {
		before[d.PID] = d.StartTime
	}
	s.before = before
}

// refreshAttempts bounds the new shells a call starts because protected
// files were replaced (see callReady).
const refreshAttempts = 8

// callReady runs a call once the busy token is held and the shell is up.
func (s *server) callReady(req CallRequest, cancel <-chan struct{}, cancelSig func() syscall.Signal, enc *lineWriter) (*result.Object, bool, error) {
	s.mu.Lock()
	s.seq++
	n := s.seq
	s.mu.Unlock()

	// A protected or hidden file that someone outside replaced since the
	// shell's sandbox was made (git config, an editor's save) is at its
	// path unprotected in that sandbox: the shell is replaced first, in a
	// new sandbox that binds or covers what is there now. That comes
	// before the call's policy is given to the guard: the new shell has
	// a new guard, which must be the one that knows it.
	// (Once more should a file be replaced again while the new shell
	// started: what its sandbox recorded is the file before.)
	refreshed := ""
	pending := ""
	for attempt := range refreshAttempts {
		if s.sandbox == nil {
			break
		}
		path := s.sandbox.Stale()
		s.mu.Lock()
		if path == "" {
			path = s.replaced // killed for it (watchSandbox), covered since
		}
		s.replaced = ""
		s.mu.Unlock()
		if path == "" {
			path = pending
		}
		if path == "" {
			break
		}
		pending = ""
		var out outcome
		s.resetShell(s.currentShell(), &out)
		if out.restartErr != nil && attempt < refreshAttempts-1 {
			// Replaced again between the new sandbox's record and its
			// helper's check (a host writing the file in a loop), or
			// killed by the watch as it started: the session goes on
			// with another try.
			s.forgetRestartErr()
			pending = path
			continue
		}
		if out.restartErr != nil && s.overtaken(out.restartErr) {
			// The host keeps replacing it (a loop of git config): no
			// new sandbox held still long enough to run the command
			// in. Nothing ran; the session goes on, and the next call
			// tries again.
			s.forgetRestartErr()
			s.mu.Lock()
			s.replaced = path
			s.mu.Unlock()
			s.release()
			return nil, false, result.Errorf(result.CodeSandboxFailed,
				"%s was replaced again each time a new shell was started in a new sandbox for it (%v); the command did not run, and the session goes on", path, out.restartErr).
				With("hint", "call again once the file is left alone")
		}
		if out.restartErr != nil {
			s.release()
			go s.stop(EndedRestartFailed)
			return nil, false, result.Errorf(result.CodeSessionEnded,
				"%s was replaced since the session's sandbox was made, and the shell could not be restarted in a new one (%v); the session has ended", path, out.restartErr).With("ended_reason", EndedRestartFailed)
		}
		refreshed = path
		s.spareNewShell()
	}
	if req.Policy != nil && s.policy == nil {
		s.release()
		return nil, false, result.Errorf(result.CodePolicyUnavailable,
			"this session was started without runtime policy enforcement, so the call's policy cannot hold while it runs").
			With("hint", "start the session with the policy in force, or use --policy-enforce static")
	}
	if s.policy != nil {
		if err := s.policy.Call(n, req.Policy, req.PolicyApproved); err != nil {
			s.release()
			return nil, false, err
		}
	}
	c, err := s.prepareCall(n, req, enc)
	if err != nil {
		s.release()
		return nil, false, err
	}
	// The call's files go once its answer is out (serveConn): their
	// removal is no part of what the caller waits for.
	s.mu.Lock()
	s.tidy = c.cleanup
	s.mu.Unlock()
	callCancel := cancel
	if s.policy != nil && req.Policy != nil {
		// An exec refused at run time stops the rest of the call, as a
		// cancellation does.
		merged, stop := make(chan struct{}), make(chan struct{})
		denied := s.policy.Denied(n)
		go func() {
			select {
			case <-cancel:
			case <-denied:
			case <-stop:
				return
			}
			close(merged)
		}()
		defer close(stop)
		callCancel = merged
	}
	res, out := s.execute(c, req, callCancel, cancelSig)
	var rt *execguard.Report
	if s.policy != nil && req.Policy != nil {
		rt = s.policy.CallReport(n)
	}

	s.mu.Lock()
	s.lastUsed = time.Now()
	s.rec.LastUsedAt = result.FormatTime(s.lastUsed)
	s.rec.Calls++
	if out.cwd != "" {
		s.rec.Cwd = out.cwd
	}
	cwdNow := s.rec.Cwd
	pid := s.rec.ShellPID
	s.mu.Unlock()

	obj := run.Render(res, capture.RenderOptions{Raw: req.Raw, Binary: req.Binary})
	obj.Set("cwd", cwdNow).Set("command", req.Command).Set("pid", pid).Set("session", s.handle)
	if out.reset || refreshed != "" {
		obj.Set("session_reset", true)
	}
	if refreshed != "" {
		// The shell was replaced before the command ran: what an earlier
		// call left in it (variables, functions, background jobs) is gone.
		obj.Set("session_reset_reason", "sandbox_refreshed").Set("sandbox_refreshed", refreshed)
	}
	if out.broken {
		obj.Set("success", false).Set("status", run.StatusError).Set("error", result.ErrorObject(result.Errorf(result.CodeSessionReset,
			"the command changed the shell so that it could not report the call's end (a readonly protocol variable or prompt, a DEBUG trap that skips commands, a forged prompt); its status is unknown and the shell was restarted in its last cwd")))
	}
	if out.killedFor != "" {
		obj.Set("session_reset_reason", "sandbox_refreshed").Set("sandbox_refreshed", out.killedFor)
	}
	switch {
	case out.killedFor != "" && out.pending:
		obj.Set("success", false).Set("status", run.StatusError).Set("error", result.ErrorObject(result.Errorf(result.CodeSessionReset,
			"%s, which the session's sandbox protects, was replaced outside the session while the call ran; so that nothing in that sandbox could write the new file, the shell and everything it ran (background jobs too) were killed; it was replaced again each time a new shell was started for it, so the next call starts one", out.killedFor)))
	case out.killedFor != "":
		obj.Set("success", false).Set("status", run.StatusError).Set("error", result.ErrorObject(result.Errorf(result.CodeSessionReset,
			"%s, which the session's sandbox protects, was replaced outside the session while the call ran; so that nothing in that sandbox could write the new file, the shell and everything it ran (background jobs too) were killed, and the shell was restarted in a new sandbox in its last cwd", out.killedFor)))
	case out.unrun:
		obj.Set("success", false).Set("status", run.StatusError).Set("error", result.ErrorObject(result.Errorf(result.CodeSessionReset,
			"the command did not run: the shell could not open the call's descriptors (the descriptor limit an earlier command set, ulimit -n, is too low even once raised); the shell was restarted in its last cwd")))
	case out.stuck:
		// The command ran and its exit_code is its own; what is gone is
		// the state the next call would have had.
		obj.Set("success", false).Set("status", run.StatusError).Set("error", result.ErrorObject(result.Errorf(result.CodeSessionReset,
			"the command made POSIXLY_CORRECT readonly while unset, which keeps posix mode off for good, so the shell's own commands could be replaced by functions; the command ran (exit_code is its status), and the shell was restarted in its last cwd")))
	case out.lost:
		obj.Set("success", false).Set("status", run.StatusError).Set("error", result.ErrorObject(result.Errorf(result.CodeSessionReset,
			"the shell could not take back its control channel after the command (a descriptor limit too low for its own redirections, a DEBUG trap that skips every command under extdebug, PROMPT_COMMAND replaced whole before an abandoned line); what the command did ran, its status is unknown, and the shell was restarted in its last cwd")))
	}
	if out.restartErr != nil {
		// Whatever the reason for the replacement was, no shell runs now:
		// the call must not say it was restarted.
		obj.Set("success", false).Set("status", run.StatusError).Set("error", result.ErrorObject(result.Errorf(result.CodeSessionEnded,
			"the shell had to be replaced after this command, but could not be restarted (%v); the session has ended", out.restartErr).With("ended_reason", EndedRestartFailed)))
	}
	if out.ended {
		obj.Set("session_ended", true)
	}
	if s.sandbox != nil {
		// With the git metadata planted since the previous call's end
		// (sandbox.git.planted).
		obj.Set("sandbox", s.sandbox.EndReport())
		// The session's allowlist and every refusal since it started.
		if n := s.sandbox.Network(); n != nil {
			obj.Set("network", n)
		}
	}
	if rt != nil {
		obj.Set("policy", result.New().Set("enforce", execguard.EnforceRuntime).Set("runtime", rt))
		if err := rt.Err(); err != nil {
			// The refused exec was killed before it ran, and the rest of
			// the call was interrupted: the call failed.
			obj.Set("success", false).Set("status", run.StatusError).Set("error", result.ErrorObject(result.AsError(err)))
		}
	}
	if req.Description != "" {
		obj.Set("description", req.Description)
	}
	return obj, out.ended, nil
}

// pendingCall holds the files and readers of one call.
type pendingCall struct {
	n       int
	script  string
	stdin   string
	fifos   []string
	holders []*os.File // our own write ends, so reads do not see EOF before the shell opens the FIFO
	pumps   []*pump
	caps    map[string]*capture.HeadTail
	enc     *lineWriter // the caller's connection
	stream  bool        // the caller streams: it gets the start event
	proto   callProto   // the call's protocol text
	// trapFIFO is where the call's end writes the user's RETURN trap
	// (see callEnd); trapR is the server's end of it.
	trapFIFO string
	trapR    *os.File
}

// takeTraps reads what the call's end wrote to the trap FIFO (it wrote
// and closed it before the shell printed the prompt that ended the call)
// and keeps the user's RETURN trap for the next call; when the end did not
// run, the shell still has whatever trap it had, and nothing changes.
func (c *pendingCall) takeTraps(sh *shell) {
	if c.trapR == nil {
		return
	}
	// Everything is in the pipe already: the deadline only guards against
	// a writer that kept it open.
	_ = c.trapR.SetReadDeadline(time.Now().Add(time.Second))
	b := make([]byte, 0, 512)
	buf := make([]byte, 4096)
	for len(b) < 1<<20 {
		k, err := c.trapR.Read(buf)
		b = append(b, buf[:k]...)
		if err != nil || k == 0 {
			break
		}
	}
	savedTraps(b, c.proto.errAction(), &sh.traps)
}

func (c *pendingCall) cleanup() {
	for _, h := range c.holders {
		h.Close()
	}
	if c.trapR != nil {
		c.trapR.Close()
	}
	for _, p := range append([]string{c.script, c.stdin, c.trapFIFO}, c.fifos...) {
		if p != "" && p != os.DevNull {
			_ = os.Remove(p)
		}
	}
}

// pump copies one FIFO into the call's capture and, once the call is over,
// into the session's background log, until every writer is gone: a
// background process never writes into a closed pipe.
type pump struct {
	r      *os.File
	name   string
	mu     sync.Mutex
	cap    *capture.HeadTail
	stream *capture.Stream
	enc    *lineWriter
	log    *bgLog // set when the call is over
	next   *bgLog // the log detach asked for
	// detached is closed once what the call wrote before it ended has been
	// read into the capture and the log took over.
	detached chan struct{}
	done     chan struct{}
}

func (p *pump) run() {
	defer close(p.done)
	defer p.r.Close()
	buf := make([]byte, 64<<10)
	for {
		k, err := p.r.Read(buf)
		if k > 0 {
			p.mu.Lock()
			p.take(buf[:k])
			p.mu.Unlock()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Go reports an expired deadline before it tries the read,
			// so the pipe may still hold what the call wrote (the pump
			// had not come round to it yet): read it out directly until
			// it is empty. Then everything the call wrote is in the
			// capture, and what comes now is background output.
			p.mu.Lock()
			p.empty(buf)
			p.flushStream()
			p.log = p.next
			p.mu.Unlock()
			_ = p.r.SetReadDeadline(time.Time{})
			close(p.detached)
			continue
		}
		if err != nil {
			p.mu.Lock()
			if p.log == nil && p.stream != nil {
				if t := p.stream.Flush(); len(t) > 0 {
					_ = p.enc.send(message{Type: p.name, Data: string(t)})
				}
			}
			p.mu.Unlock()
			return
		}
	}
}

// take puts b where the pump's output goes now: the background log once
// the call is over, the call's capture (and stream) before. p.mu is held.
func (p *pump) take(b []byte) {
	if p.log != nil {
		p.log.write(b)
		return
	}
	p.cap.Write(b)
	if p.stream != nil {
		if t := p.stream.Next(b); len(t) > 0 {
			_ = p.enc.send(message{Type: p.name, Data: string(t)})
		}
	}
}

// empty reads what the FIFO holds now into the capture, bypassing the
// expired deadline with reads on the descriptor itself (it is
// non-blocking: an empty pipe answers EAGAIN, one without writers 0).
// p.mu is held.
func (p *pump) empty(buf []byte) {
	rc, err := p.r.SyscallConn()
	if err != nil {
		return
	}
	for {
		var k int
		var rerr error
		if err := rc.Control(func(fd uintptr) {
			for {
				k, rerr = syscall.Read(int(fd), buf)
				if rerr != syscall.EINTR {
					return
				}
			}
		}); err != nil || rerr != nil || k <= 0 {
			return
		}
		p.take(buf[:k])
	}
}

func (p *pump) flushStream() {
	if p.log == nil && p.stream != nil {
		if t := p.stream.Flush(); len(t) > 0 {
			_ = p.enc.send(message{Type: p.name, Data: string(t)})
		}
	}
}

// detach sends what the FIFO carries from now on to the background log,
// once what is already in the pipe has reached the call's capture: a read
// deadline in the past makes the pump's read fail only when the pipe is
// empty.
func (p *pump) detach(log *bgLog) {
	p.mu.Lock()
	p.next = log
	p.mu.Unlock()
	if err := p.r.SetReadDeadline(time.Now()); err != nil {
		p.mu.Lock()
		p.log = log
		p.mu.Unlock()
		return
	}
	select {
	case <-p.detached:
	case <-p.done:
	}
}

func (s *server) prepareCall(n int, req CallRequest, enc *lineWriter) (*pendingCall, error) {
	d := s.calls
	c := &pendingCall{n: n, caps: map[string]*capture.HeadTail{}, stdin: os.DevNull, enc: enc, stream: req.Stream}
	sh := s.currentShell()
	c.proto = sh.proto(n, wrapsTrap(req.Command))
	keep, err := capture.ParseKeep(req.Keep)
	if err != nil {
		return nil, result.Errorf(result.CodeInvalidRequest, "keep: %v", err)
	}
	names := []string{"stdout", "stderr"}
	if req.Merge {
		names = []string{"output"}
	}
	// Made ahead while the session was idle, when they could be (stock).
	files, err := d.files(n, names)
	if err != nil {
		return nil, result.Errorf(result.CodeStateDir, "cannot make the call's files: %v", err)
	}
	c.script = files.script
	for _, f := range files.fifos {
		c.fifos = append(c.fifos, f.path)
		c.holders = append(c.holders, f.w)
	}
	fail := func(err error) (*pendingCall, error) {
		for _, f := range files.fifos {
			f.r.Close()
		}
		c.cleanup()
		return nil, err
	}
	// Where the call's end hands back the user's traps (see callEnd).
	c.trapFIFO, c.trapR = files.traps, files.trapsR
	c.proto.trapFIFO = c.trapFIFO
	if err := fill(files.w, files.script, callFile(c.proto, req.Command, sh.traps, c.trapFIFO)); err != nil {
		return fail(result.Errorf(result.CodeInternal, "cannot write the call: %v", err))
	}
	if req.Stdin != nil {
		c.stdin = d.name(n, "in")
		if err := d.writeFile(c.stdin, []byte(*req.Stdin)); err != nil {
			return fail(result.Errorf(result.CodeInternal, "cannot write stdin: %v", err))
		}
	}
	for i, name := range names {
		hc := capture.NewHeadTail(req.MaxOutput, keep)
		c.caps[name] = hc
		pp := &pump{r: files.fifos[i].r, name: name, cap: hc, enc: enc, done: make(chan struct{}), detached: make(chan struct{})}
		if req.Stream {
			pp.stream = capture.NewStream(capture.RenderOptions{Raw: req.Raw})
		}
		c.pumps = append(c.pumps, pp)
		go pp.run()
	}
	c.proto.script, c.proto.stdin, c.proto.outs = c.script, c.stdin, c.fifos
	return c, nil
}

// execute sends the call to the shell and waits for it, handling timeout,
// cancellation, errexit, exec and the shell's exit.
func (s *server) execute(c *pendingCall, req CallRequest, cancel <-chan struct{}, cancelSig func() syscall.Signal) (*run.Result, outcome) {
	res := &run.Result{Status: run.StatusCompleted, ExitCode: -1, StartedAt: time.Now()}
	if out, ok := c.caps["output"]; ok {
		res.Output = out
	} else {
		res.Stdout, res.Stderr = c.caps["stdout"], c.caps["stderr"]
	}
	sh := s.currentShell()
	var out outcome
	// Processes alive when the previous call ended (background jobs) are
	// not this call's; the list was taken off the critical path. It stays
	// for the bookkeeping after this call (what it left running).
	s.mu.Lock()
	before := s.before
	s.mu.Unlock()
	if before == nil {
		before = map[int]uint64{}
		for _, d := range s.track.scan() {
			before[d.PID] = d.StartTime
		}
		s.mu.Lock()
		s.before = before
		s.mu.Unlock()
	}
	// The call's processes are every descendant of the server (orphans
	// of the call are reparented to it, a subreaper) but the shell, what
	// was there before the call, and what those earlier processes start
	// meanwhile: a background job's new child is the job's, not the
	// call's, so its parent chain is followed up to a process from before
	// (spared) or to the shell or the server (the call's).
	isShell := func(pid int) bool { return pid == sh.id.PID || pid == sh.self.PID }
	server := os.Getpid()
	spare := func(p proctree.Stat) bool {
		if isShell(p.PID) {
			return true
		}
		for range 64 {
			if st, ok := before[p.PID]; ok && st == p.StartTime {
				return true
			}
			if isShell(p.PPID) || p.PPID <= 1 || p.PPID == server {
				return false
			}
			parent, err := proctree.ReadStat(p.PPID)
			if err != nil || parent.StartTime > p.StartTime {
				return false // gone, or a recycled pid: not an ancestor
			}
			p = parent
		}
		return false
	}

	var timer <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timer = t.C
	}
	why := gotEOF
	code := 0
	nonce := newNonce()
	// The start event goes out before the call line: once the shell has
	// the line, the command's output races it to the caller.
	if c.stream && c.enc != nil {
		pid := sh.self.PID
		_ = c.enc.send(message{Type: "start", Started: &pid})
	}
	sh.call = c.proto
	sh.evictReaders(s.bg.running())
	sh.began(c.proto)
	if _, err := io.WriteString(sh.stdin, callLine(c.proto, nonce)); err == nil {
		code, why = sh.awaitCall(c.n, nonce, timer, cancel)
	}
	// A caller that is gone (its connection closed: killed, say) waits
	// for nothing: the call's processes get the interrupt and then
	// SIGKILL at once, and the shell keeps its state.
	grace := max(req.KillAfter, time.Millisecond)
	if why == gotStop && cancelSig() == syscall.SIGKILL {
		grace = time.Millisecond
	}
	switch why {
	case gotMarker:
		res.ExitCode = code
		c.takeTraps(sh)
	case gotBroken:
		// The command left the shell unable to run the protocol's lines
		// as written: what it did ran, but its status cannot be known,
		// and no later call could be either. Say so, and start afresh.
		res.Status = run.StatusError
		out.broken = true
		s.resetShell(sh, &out)
	case gotLost, gotUnrun:
		res.Status = run.StatusError
		out.lost, out.unrun = why == gotLost, why == gotUnrun
		s.resetShell(sh, &out)
	case gotEOF:
		// The control channel closed: the shell exited, or exec replaced
		// it with a program that still runs and still obeys the call's
		// timeout and cancellation.
		out.ended = true
		select {
		case <-sh.exited:
		case <-timer:
			res.Status, res.TimedOut = run.StatusTimeout, true
		case <-cancel:
			res.Status = run.StatusCancelled
		}
		if res.Status != run.StatusCompleted {
			tree := proctree.Tree{Main: sh.id, Root: sh.id.PID}
			sig := syscall.SIGINT
			res.Signal = proctree.SignalName(sig)
			tree.Signal(sig)
			gt := time.NewTimer(grace)
			select {
			case <-sh.exited:
			case <-gt.C:
				tree.Signal(syscall.SIGKILL)
				res.Signal = "SIGKILL"
				<-sh.exited
			}
			gt.Stop()
		}
	default:
		// Timeout or cancellation: stop the whole call, keep the shell.
		if why == gotStop {
			res.Status = run.StatusCancelled
		} else {
			res.Status, res.TimedOut = run.StatusTimeout, true
		}
		res.Signal = proctree.SignalName(syscall.SIGINT)
		killed, ok := sh.interrupt(grace, spare)
		if killed {
			res.Signal = "SIGKILL"
		}
		switch {
		case ok:
			// The interrupt trap handed on an ERR trap the command
			// set or removed (abandonTraps), if it did.
			c.takeTraps(sh)
		case sh.closed || sh.gone():
			// The shell exited or exec replaced it: what runs in its place
			// is the call's, and goes with it.
			out.ended = true
			proctree.Terminate(context.Background(), proctree.Tree{Main: sh.id, Root: sh.id.PID}, syscall.SIGKILL, 0, sh.exited)
		default:
			// The shell itself is stuck: replace it in the last known cwd.
			s.resetShell(sh, &out)
		}
	}
	if out.ended && !out.reset {
		s.mu.Lock()
		path := s.replaced
		s.replaced = ""
		s.mu.Unlock()
		if path != "" {
			// watchSandbox killed the shell's sandbox during the call:
			// a file it protected was replaced outside. The session goes
			// on in a new one.
			res.Status, res.ExitCode = run.StatusError, -1
			out.ended, out.killedFor = false, path
			for attempt := range refreshAttempts {
				s.resetShell(sh, &out)
				if out.restartErr == nil || attempt == refreshAttempts-1 {
					break
				}
				// As in callReady: once more.
				out.ended, out.restartErr = false, nil
				s.forgetRestartErr()
			}
			if out.restartErr != nil && s.overtaken(out.restartErr) {
				// The host keeps replacing it (a loop of git config), as
				// in callReady: the session goes on without a shell, and
				// the next call starts one once the file holds still.
				out.ended, out.restartErr, out.pending = false, nil, true
				s.forgetRestartErr()
				s.mu.Lock()
				s.replaced = path
				s.mu.Unlock()
			}
		}
	}
	if sh.stuck && !out.ended && !out.reset {
		// The command left posix mode unreachable (stuckMark): no later
		// call could run the protocol's lines as written.
		out.stuck = true
		s.resetShell(sh, &out)
	}
	if !out.ended {
		out.cwd = s.currentShell().cwd()
	}
	switch {
	case res.TimedOut:
		res.ExitCode = run.ExitTimeout
	case res.Status == run.StatusCancelled:
		sig := cancelSig()
		if sig == 0 {
			sig = syscall.SIGINT
		}
		res.ExitCode = 128 + int(sig)
	case out.ended && out.restartErr == nil:
		if st := sh.status; st != nil {
			if ws, ok := st.Sys().(syscall.WaitStatus); ok {
				if ws.Signaled() {
					res.Signal = proctree.SignalName(ws.Signal())
					res.ExitCode = 128 + int(ws.Signal())
				} else {
					res.ExitCode = ws.ExitStatus()
				}
			}
		}
	case res.ExitCode > 128 && res.ExitCode <= 128+64:
		// The shell reports a death by signal N as 128+N.
		res.Signal = proctree.SignalName(syscall.Signal(res.ExitCode - 128))
	}
	res.Elapsed = time.Since(res.StartedAt)
	// What the call left running is adopted now, before the drain below
	// gives a short one the time to end unseen (one scan of the
	// processes created since the last one).
	s.afterCall(out.ended, req.Command)

	// The shell has closed its ends; ours go now. Background processes
	// that still hold a FIFO get the drain to finish writing into the
	// call's output; after that their output goes to the session's log.
	for _, h := range c.holders {
		h.Close()
	}
	c.holders = nil
	drain := closedTime
	if req.Drain > 0 {
		t := time.NewTimer(req.Drain)
		defer t.Stop()
		drain = t.C
	}
	for _, p := range c.pumps {
		select {
		case <-p.done:
			continue
		case <-drain:
			drain = closedTime
		}
		p.detach(s.bg.log)
	}
	if out.ended && !out.reset && res.Status == run.StatusCompleted && lostPrompt(res, c.proto) {
		// The shell came back to its prompt without its control channel
		// and read the call's stdin to its end: no exit of the
		// command's. It is replaced, and the call says so.
		res.Status, res.ExitCode = run.StatusError, -1
		out.ended, out.lost = false, true
		s.resetShell(sh, &out)
		if !out.ended {
			out.cwd = s.currentShell().cwd()
		}
	}
	return res, out
}

// lostPrompt reports whether the call's captured output ends with a
// prompt of the call's own (pending or done) and bash's "exit": the shell
// showed its prompt on the call's descriptors, so the protocol could not
// reopen its control channel, and it then read the call's stdin to its
// end. A command that prints this itself and exits gets a reset instead
// of the end it asked for.
func lostPrompt(res *run.Result, p callProto) bool {
	caps := []*capture.HeadTail{res.Stderr, res.Output}
	for _, c := range caps {
		if c == nil {
			continue
		}
		snap := c.Snapshot()
		tail := string(snap.Tail)
		if snap.Omitted == 0 {
			tail = string(snap.Head) + tail
		}
		tail, ok := strings.CutSuffix(tail, "\nexit\n")
		if !ok {
			continue
		}
		i := strings.LastIndex(tail, "\n"+p.marker+" ")
		if i < 0 {
			continue
		}
		// The done prompt's status may be empty: the line's own
		// commands failed too.
		if f := strings.Fields(tail[i+1:]); len(f) >= 2 && (f[1] == tagPending+strconv.Itoa(p.n) || strings.HasPrefix(f[1], tagDone)) {
			return true
		}
	}
	return false
}

var closedTime = func() <-chan time.Time { c := make(chan time.Time); close(c); return c }()

// wrapsTrap reports whether command names trap and ERR (any case: bash
// takes err and sigerr too), so that its call defines the trap function
// (trapFunc). Other calls, the most, go without it.
func wrapsTrap(command string) bool {
	l := strings.ToLower(command)
	return strings.Contains(l, "trap") && strings.Contains(l, "err")
}
