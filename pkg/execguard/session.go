package execguard

import (
	"bufio"
	"encoding/json"
	"os"
	"sync"
	"time"

	"github.com/agentplane/agentplane/pkg/policy"
	"github.com/agentplane/agentplane/pkg/result"
)

// A session's shell lives across calls, and each call brings its own policy
// and approval. In session mode the guard traces the shell for its whole
// life and takes each call's policy from its controller (the session
// server) over a pipe pair that nothing in the traced tree holds: the
// server says "call N, this policy, approved or not" and waits for the
// guard's answer before it hands the call to the shell, so every exec of
// the call is decided under that call's policy; at the end of the call it
// asks for the call's report. A refused exec is killed; the shell and the
// session live on.

// sessionMessage is one line from the controller.
type sessionMessage struct {
	Op       string         `json:"op"` // call, report
	Call     int            `json:"call"`
	Policy   *policy.Policy `json:"policy,omitempty"`
	Approved bool           `json:"approved,omitempty"`
}

// Session is the controller's end of a session-mode guard.
type Session struct {
	g    *Guard
	mu   sync.Mutex
	ctl  *os.File // to the guard
	ack  *os.File // from the guard
	r    *bufio.Reader
	dead bool
	ev   *os.File // the guard's refusals, as they happen

	dmu    sync.Mutex
	denied map[int]chan struct{} // closed when call N had an exec refused
}

// PrepareSession makes a session-mode guard. Files are the descriptors the
// guard process must get as its fds 3 and 4 (exec.Cmd.ExtraFiles); close
// them in the controller once the guard has started (CloseChild).
func PrepareSession(self string) (*Session, []*os.File, error) {
	if err := Available(); err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "agentplane-guard-")
	if err != nil {
		return nil, nil, result.Errorf(policy.CodeUnavailable, "cannot make the guard's directory: %v", err)
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, result.Errorf(policy.CodeUnavailable, "cannot make the guard's pipes: %v", err)
	}
	ackR, ackW, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		ctlR.Close()
		ctlW.Close()
		return nil, nil, result.Errorf(policy.CodeUnavailable, "cannot make the guard's pipes: %v", err)
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		for _, f := range []*os.File{ctlR, ctlW, ackR, ackW} {
			f.Close()
		}
		return nil, nil, result.Errorf(policy.CodeUnavailable, "cannot make the guard's pipes: %v", err)
	}
	g := &Guard{dir: dir, self: self, sp: spec{Rules: []policy.Rule{}, Session: true}}
	s := &Session{g: g, ctl: ctlW, ack: ackR, r: bufio.NewReader(ackR), ev: evR, denied: map[int]chan struct{}{}}
	go s.events()
	return s, []*os.File{ctlR, ackW, evW}, nil
}

// Started waits for the guard to start the shell and returns the shell's
// pid (the guard's child, which the controller signals and inspects).
func (s *Session) Started(timeout time.Duration) (int, error) {
	type answer struct {
		pid int
		err error
	}
	got := make(chan answer, 1)
	go func() {
		line, err := s.r.ReadBytes('\n')
		var m struct{ PID int }
		if err == nil {
			err = json.Unmarshal(line, &m)
		}
		got <- answer{m.PID, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case a := <-got:
		if a.err != nil || a.pid <= 0 {
			s.mu.Lock()
			s.dead = true
			s.mu.Unlock()
			return 0, result.Errorf(policy.CodeUnavailable, "the policy guard did not start the shell")
		}
		return a.pid, nil
	case <-t.C:
		s.Close()
		return 0, result.Errorf(policy.CodeUnavailable, "the policy guard did not start the shell in %s", timeout)
	}
}

// Denied returns a channel that is closed as soon as an exec of call n is
// refused, so the controller can stop the rest of the call.
func (s *Session) Denied(n int) <-chan struct{} {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	return s.deniedLocked(n)
}

func (s *Session) deniedLocked(n int) chan struct{} {
	c := s.denied[n]
	if c == nil {
		c = make(chan struct{})
		s.denied[n] = c
	}
	return c
}

// events reads the guard's refusals until its pipe closes.
func (s *Session) events() {
	r := bufio.NewReader(s.ev)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		var e struct{ Denied int }
		if json.Unmarshal(line, &e) != nil {
			continue
		}
		s.dmu.Lock()
		c := s.deniedLocked(e.Denied)
		select {
		case <-c:
		default:
			close(c)
		}
		for k := range s.denied {
			if k < e.Denied-1 {
				delete(s.denied, k)
			}
		}
		s.dmu.Unlock()
	}
}

// Guard is the session's guard, for Argv and TrustFirst.
func (s *Session) Guard() *Guard { return s.g }

// Call tells the guard that call n runs next, under p (nil: no policy) with
// or without approval, and returns once the guard has taken it.
func (s *Session) Call(n int, p *policy.Policy, approved bool) error {
	var out struct{ OK bool }
	return s.ask(sessionMessage{Op: "call", Call: n, Policy: p, Approved: approved}, &out)
}

// CallReport returns what the guard decided during call n.
func (s *Session) CallReport(n int) *Report {
	var r Report
	if err := s.ask(sessionMessage{Op: "report", Call: n}, &r); err != nil {
		r = Report{}
	}
	r.Enforced = EnforceRuntime
	if r.Approved == nil {
		r.Approved = []Exec{}
	}
	return &r
}

func (s *Session) ask(m sessionMessage, out any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return result.Errorf(policy.CodeUnavailable, "the session's policy guard is gone")
	}
	b, _ := json.Marshal(m)
	if _, err := s.ctl.Write(append(b, '\n')); err != nil {
		s.dead = true
		return result.Errorf(policy.CodeUnavailable, "the session's policy guard is gone: %v", err)
	}
	line, err := s.r.ReadBytes('\n')
	if err != nil {
		s.dead = true
		return result.Errorf(policy.CodeUnavailable, "the session's policy guard is gone: %v", err)
	}
	return json.Unmarshal(line, out)
}

// Close releases the controller's ends and the guard's directory.
func (s *Session) Close() {
	s.mu.Lock()
	s.dead = true
	s.mu.Unlock()
	s.ctl.Close()
	s.ack.Close()
	s.ev.Close()
	s.g.Cleanup()
}

// sessionState is the guard's side: the current call's policy and the
// reports of the calls, shared by the tracing thread and the goroutine
// that serves the controller.
type sessionState struct {
	mu       sync.Mutex
	call     int
	pol      *policy.Policy
	approved bool
	reports  map[int]*Report
	events   *os.File // refusals, to the controller
	ctl, ack *os.File // requests from the controller, answers to it
}

// refused tells the controller that call n had an exec refused.
func (st *sessionState) refused(n int) {
	b, _ := json.Marshal(map[string]int{"denied": n})
	_, _ = st.events.Write(append(b, '\n'))
}

func (st *sessionState) current() (int, *policy.Policy, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.call, st.pol, st.approved
}

func (st *sessionState) record(call int, f func(*Report)) {
	st.mu.Lock()
	defer st.mu.Unlock()
	r := st.reports[call]
	if r == nil {
		r = &Report{Enforced: EnforceRuntime, Approved: []Exec{}}
		st.reports[call] = r
	}
	f(r)
}

// serve answers the controller until its pipe closes.
func (st *sessionState) serve() {
	ack := st.ack
	r := bufio.NewReader(st.ctl)
	enc := json.NewEncoder(ack)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		var m sessionMessage
		if json.Unmarshal(line, &m) != nil {
			_ = enc.Encode(map[string]any{"ok": false})
			continue
		}
		switch m.Op {
		case "call":
			st.mu.Lock()
			// Reports of calls before the previous one are not asked
			// for again.
			for k := range st.reports {
				if k < m.Call-1 {
					delete(st.reports, k)
				}
			}
			st.call, st.pol, st.approved = m.Call, m.Policy, m.Approved
			st.mu.Unlock()
			_ = enc.Encode(map[string]any{"ok": true})
		case "report":
			st.mu.Lock()
			rep := st.reports[m.Call]
			if rep == nil {
				rep = &Report{Enforced: EnforceRuntime, Approved: []Exec{}}
			}
			b, _ := json.Marshal(rep)
			st.mu.Unlock()
			_, _ = ack.Write(append(b, '\n'))
		default:
			_ = enc.Encode(map[string]any{"ok": false})
		}
	}
}
