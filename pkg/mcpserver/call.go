package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/mcpserver/internal/mcpstdio"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/state"
)

// cancelGrace bounds how long a call's subprocess may take to report after
// SIGINT before it is killed. agentsh itself stops its command within
// --kill-after (default 5s), so this only fires if the CLI is wedged.
const cancelGrace = 2 * time.Minute

// progressEvery is the shortest time between two progress notifications
// of one agentsh call; output arriving in between is counted in the next.
const progressEvery = 200 * time.Millisecond

// handle runs one tool call.
func (s *Server) handle(ctx context.Context, t *tool, call *mcpstdio.Call) mcpstdio.Result {
	s.inflight.Add(1)
	defer s.inflight.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.connCtx, cancel)()
	args, detached, rerr := s.arguments(t, call.Arguments)
	if rerr != nil {
		return render(t, failureMap(rerr))
	}
	if s.cfg.Verbose {
		s.logf("call %s", t.Name)
	}
	var onLine func(map[string]any)
	if call.HasProgress && t.Name == "agentsh_run" {
		onLine = outputProgress(call)
	}
	if call.HasProgress && t.Name == "agentjob_wait" && s.cfg.StateDir != "" {
		stop := s.waitProgress(ctx, call, args)
		defer stop()
	}
	res, err := s.exec(ctx, t, args, onLine)
	if err != nil {
		res = failureMap(err)
	}
	if s.cfg.Verbose {
		s.logf("%s", summary(t.Name, res))
	}
	if h, ok := res["session"].(string); ok && res["success"] == true {
		switch t.Name {
		case "agentsh_session_start":
			s.trackSession(h, !detached)
		case "agentsh_session_stop":
			s.trackSession(h, false)
		}
	}
	return render(t, res)
}

// arguments decodes a call's arguments and refuses the keys the server
// owns. It returns the request for the subprocess and, for session start,
// the MCP-only detached argument.
func (s *Server) arguments(t *tool, raw json.RawMessage) (map[string]any, bool, error) {
	args := map[string]any{}
	if len(bytes.TrimSpace(raw)) > 0 && string(bytes.TrimSpace(raw)) != "null" {
		m, err := clikit.DecodeRequest(raw)
		if err != nil {
			return nil, false, err
		}
		args = m
	}
	served, _ := t.InputSchema["properties"].(map[string]any)
	for k, v := range args {
		if _, offered := served[k]; offered {
			continue // an argument of this tool, whatever other tools mean by it
		}
		if why := s.refused[k]; why != "" {
			if v == nil {
				delete(args, k) // null is "not given" (strict hosts send it)
				continue
			}
			return nil, false, result.Errorf(result.CodeInvalidRequest,
				"%q is not a tool argument of this MCP server", k).With("key", k).With("hint", why)
		}
	}
	// agentfs edit reads --edits @FILE itself, like content_file: the
	// flags marked clikit.FileRef.
	for _, k := range t.FileRefs {
		if e, ok := args[k].(string); ok && strings.HasPrefix(e, "@") {
			return nil, false, result.Errorf(result.CodeInvalidRequest, "%q may not name a file over MCP", k).
				With("key", k).With("hint", whyFile)
		}
	}
	detached := false
	if v, ok := args[DetachedKey]; ok && t.Name == "agentsh_session_start" {
		b, isBool := v.(bool)
		if v == nil {
			isBool = true
		}
		if !isBool {
			return nil, false, result.Errorf(result.CodeInvalidRequest, "key %q: expected a boolean", DetachedKey).With("key", DetachedKey)
		}
		detached = b
		delete(args, DetachedKey)
	}
	if t.Name == "agentsh_session_start" && s.cfg.SessionIdle > 0 {
		args["idle_timeout"] = clampIdle(args["idle_timeout"], s.cfg.SessionIdle)
	}
	return args, detached, nil
}

// clampIdle is a session's idle timeout under the server's bound: the
// bound when the call gives none, never (0) or a longer one. A value that
// does not parse is passed on for the CLI to refuse.
func clampIdle(v any, bound time.Duration) any {
	var s string
	switch t := v.(type) {
	case nil:
		return bound.String()
	case json.Number:
		s = t.String()
	case string:
		s = t
	default:
		return v
	}
	d, err := clikit.ParseDuration(s)
	if err != nil {
		return v
	}
	if d == 0 || d > bound {
		return bound.String()
	}
	return v
}

// exec runs one call as a subprocess of the program that owns it and
// returns its JSON result. onLine, if set, sees each streamed event.
// Cancelling ctx sends SIGINT, as a user's Ctrl-C would: the CLI stops
// what it runs and still prints its result ("cancelled").
func (s *Server) exec(ctx context.Context, t *tool, args map[string]any, onLine func(map[string]any)) (map[string]any, error) {
	req, err := json.Marshal(args)
	if err != nil {
		return nil, result.Errorf(result.CodeInvalidRequest, "cannot encode the arguments: %v", err)
	}
	argv := append(append([]string(nil), t.Path...), "--request", "-")
	argv = append(argv, t.Flags...)
	if t.Name == "agentsh_run" {
		argv = append(argv, "--stream")
	}
	cmd := exec.CommandContext(ctx, t.executable, argv...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = cancelGrace
	cmd.Env = s.cfg.Environ()
	cmd.Stdin = bytes.NewReader(req)
	stderr := &tailBuffer{max: 4096}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, result.Errorf(result.CodeInternal, "cannot run %s: %v", t.program, err)
	}
	// Memory stays bounded by the largest line: events are small chunks,
	// and the result is bounded by the call's own capture limits.
	var last map[string]any
	r := bufio.NewReaderSize(stdout, 64<<10)
	for {
		line, rerr := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			if m, err := decodeObject(line); err == nil {
				// Stream events carry a type; the result does not.
				if typ, isEvent := m["type"].(string); isEvent && typ != "result" {
					if onLine != nil {
						onLine(m)
					}
				} else {
					// The stream's last line is the result; its type
					// is the stream's framing, not part of the result.
					if typ == "result" && m["success"] != nil {
						delete(m, "type")
					}
					last = m
				}
			}
		}
		if rerr != nil {
			break
		}
	}
	werr := cmd.Wait()
	if last == nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" && werr != nil {
			msg = werr.Error()
		}
		return nil, result.Errorf(result.CodeInternal, "%s printed no result: %s", t.program, msg)
	}
	return last, nil
}

// decodeObject parses one JSON object, keeping numbers exact.
func decodeObject(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("not an object")
	}
	return m, nil
}

// outputProgress turns agentsh's stream events into progress: the bytes
// of output so far.
func outputProgress(call *mcpstdio.Call) func(map[string]any) {
	var total int64
	var sent time.Time
	return func(ev map[string]any) {
		typ, _ := ev["type"].(string)
		if typ != "stdout" && typ != "stderr" && typ != "output" {
			return
		}
		data, _ := ev["data"].(string)
		total += int64(len(data))
		now := time.Now()
		if !sent.IsZero() && now.Sub(sent) < progressEvery {
			return
		}
		sent = now
		call.Progress(float64(total), fmt.Sprintf("%d bytes of output", total))
	}
}

// waitProgress reports the state changes of the jobs an agentjob wait is
// waiting for, rate-limited like the job notifications. The returned stop
// function sends what the limiter still holds and what the log has beyond
// the last event seen, so that the change that ended the wait is reported
// before its result.
func (s *Server) waitProgress(ctx context.Context, call *mcpstdio.Call, args map[string]any) func() {
	want := map[string]bool{}
	if list, ok := args["jobs"].([]any); ok {
		for _, j := range list {
			if js, ok := j.(string); ok {
				want[js] = true
			}
		}
	}
	keep := func(e state.Event) bool { return want[e.Handle] || (e.Name != "" && want[e.Name]) }
	d, err := state.Open(s.cfg.StateDir)
	if err != nil {
		return func() {}
	}
	var since int64
	if evs, err := d.ReadEvents(0, nil); err == nil && len(evs) > 0 {
		since = evs[len(evs)-1].Seq
	}
	n := 0
	send := func(nt notice) {
		n++
		call.Progress(float64(n), nt.summary())
	}
	lim := newLimiter(s.cfg.EventInterval, s.cfg.EventBurst)
	var mu sync.Mutex // guards lim and since between the loop and stop
	wctx, cancel := context.WithCancel(ctx)
	events := make(chan state.Event)
	done := make(chan struct{})
	go func() {
		defer close(events)
		for from := since; ; {
			evs, err := d.WaitEvents(wctx, from, keep)
			if err != nil {
				return
			}
			for _, e := range evs {
				select {
				case events <- e:
					from = e.Seq
				case <-wctx.Done():
					return
				}
			}
		}
	}()
	go func() {
		defer close(done)
		runLimitedLocked(wctx, events, lim, &mu, func(e state.Event) { since = e.Seq }, send)
	}()
	return func() {
		cancel()
		<-done
		for range events {
		}
		mu.Lock()
		defer mu.Unlock()
		evs, _ := d.ReadEvents(since, keep)
		for _, e := range evs {
			lim.offer(e, time.Now())
		}
		for _, nt := range lim.drain() {
			send(nt)
		}
	}
}

// failureMap is a failure as the result object a CLI would print.
func failureMap(err error) map[string]any {
	b, _ := result.Marshal(result.Failure(err))
	m, _ := decodeObject(b)
	return m
}

// render makes the MCP result: the CLI's JSON object as structured
// content, and for hosts that only show text, a summary line followed by
// the same object as JSON.
func render(t *tool, res map[string]any) mcpstdio.Result {
	b, _ := result.Marshal(res)
	return mcpstdio.Result{Text: summary(t.Name, res) + "\n" + string(b), Structured: res, IsError: isToolError(res)}
}

// isToolError decides MCP's isError (CONTRACT §7): true only when the tool
// could not do what was asked — invalid arguments, a refusal, a session or
// job that is gone, an internal failure — which the CLI reports with an
// error code. Work that was done and went badly is a normal result whose
// object says success false and why: a command that exited non-zero or
// timed out (no error object: the exit code and status say it), or a wait
// whose job failed or whose timeout passed (an outcome code). Hosts such
// as LangChain throw on isError and drop the structured result, so a
// failed command must not be one.
func isToolError(res map[string]any) bool {
	if res["success"] == true {
		return false
	}
	e, ok := res["error"].(map[string]any)
	if !ok {
		return false
	}
	code, _ := e["code"].(string)
	return !result.IsOutcome(code)
}

// summary is one line for a human glancing at a host's transcript.
func summary(name string, res map[string]any) string {
	var parts []string
	if res["success"] == true {
		parts = append(parts, "ok")
	} else {
		parts = append(parts, "failed")
	}
	for _, k := range []string{"status", "exit_code", "signal", "handle", "session", "path", "elapsed_ms"} {
		if v, ok := res[k]; ok && v != nil {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	if e, ok := res["error"].(map[string]any); ok {
		parts = append(parts, fmt.Sprintf("error=%v: %v", e["code"], e["message"]))
	}
	return name + ": " + strings.Join(parts, " ")
}

// tailBuffer keeps the last max bytes written: a subprocess's stderr only
// matters when it printed no result, and then its end says why.
type tailBuffer struct {
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string { return string(b.buf) }
