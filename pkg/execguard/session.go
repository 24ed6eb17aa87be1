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
// session live on. Refusals reach the controller as they happen on the
// report pipe every guard has (reports.go), so it can stop the rest of the
// call.

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
}

// PrepareSession makes a session-mode guard. Its Guard's Wrap gives the
// guard's process its descriptors; call the Guard's Launched once it has
// started.
func PrepareSession(self string) (*Session, error) {
	g, err := prepare(self, spec{Rules: []policy.Rule{}, Session: true})
	if err != nil {
		return nil, err
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		g.Cleanup()
		return nil, result.Errorf(result.CodePolicyUnavailable, "cannot make the guard's pipes: %v", err)
	}
	ackR, ackW, err := os.Pipe()
	if err != nil {
		g.Cleanup()
		ctlR.Close()
		ctlW.Close()
		return nil, result.Errorf(result.CodePolicyUnavailable, "cannot make the guard's pipes: %v", err)
	}
	g.own = append(g.own, ctlR, ackW)
	return &Session{g: g, ctl: ctlW, ack: ackR, r: bufio.NewReader(ackR)}, nil
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
			return 0, result.Errorf(result.CodePolicyUnavailable, "the policy guard did not start the shell")
		}
		return a.pid, nil
	case <-t.C:
		s.Close()
		return 0, result.Errorf(result.CodePolicyUnavailable, "the policy guard did not start the shell in %s", timeout)
	}
}

// Denied returns a channel that is closed as soon as an exec of call n is
// refused, so the controller can stop the rest of the call.
func (s *Session) Denied(n int) <-chan struct{} { return s.g.reports.refusal(n) }

// Guard is the session's guard, for Wrap, Launched, TrustFirst and the
// report of a guard that could not start the shell.
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
	return normalized(&r)
}

func (s *Session) ask(m sessionMessage, out any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return result.Errorf(result.CodePolicyUnavailable, "the session's policy guard is gone")
	}
	b, _ := json.Marshal(m)
	if _, err := s.ctl.Write(append(b, '\n')); err != nil {
		s.dead = true
		return result.Errorf(result.CodePolicyUnavailable, "the session's policy guard is gone: %v", err)
	}
	line, err := s.r.ReadBytes('\n')
	if err != nil {
		s.dead = true
		return result.Errorf(result.CodePolicyUnavailable, "the session's policy guard is gone: %v", err)
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
	out      *reportWriter // refusals, to the controller
	ctl, ack *os.File      // requests from the controller, answers to it
}

func (st *sessionState) current() (int, *policy.Policy, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.call, st.pol, st.approved
}

// record updates call's report with f and returns it. Only the tracing
// thread changes reports, so it may read the result after the lock.
func (st *sessionState) record(call int, f func(*Report)) *Report {
	st.mu.Lock()
	defer st.mu.Unlock()
	r := st.reports[call]
	if r == nil {
		r = &Report{Enforced: EnforceRuntime, Approved: []Exec{}}
		st.reports[call] = r
	}
	f(r)
	return r
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
