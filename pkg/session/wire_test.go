package session

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/policy"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox"
	"github.com/agentplane/agentplane/pkg/state"
)

// TestRunRequestWire: the call's first message, built field by field,
// is what encoding/json writes for message and CallRequest, for a request
// with every field set and for one with none; a field added to
// CallRequest that runRequest does not write fails here.
func TestRunRequestWire(t *testing.T) {
	full := CallRequest{}
	v := reflect.ValueOf(&full).Elem()
	for i := 0; i < v.NumField(); i++ {
		f, sf := v.Field(i), v.Type().Field(i)
		if sf.Tag.Get("json") == "-" {
			continue
		}
		switch {
		case sf.Type == reflect.TypeOf(time.Duration(0)):
			f.SetInt(int64(i+1) * int64(time.Millisecond))
		case f.Kind() == reflect.String:
			f.SetString("<" + sf.Name + "> & \"x\"\n\x01é")
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.Kind() == reflect.Int:
			f.SetInt(int64(i + 1))
		case sf.Type == reflect.TypeOf((*string)(nil)):
			s := "in<put>\x00"
			f.Set(reflect.ValueOf(&s))
		case sf.Type == reflect.TypeOf((*policy.Policy)(nil)):
			f.Set(reflect.ValueOf(&policy.Policy{Default: policy.Prompt, Rules: []policy.Rule{{Pattern: [][]string{{"rm"}, {"-rf", "-r"}}, Decision: policy.Forbidden, Justification: "no", Source: "p.star:1"}}}))
		default:
			t.Fatalf("CallRequest.%s: a field of a kind this test does not fill (%s): fill it, and write it in runRequest", sf.Name, sf.Type)
		}
	}
	for _, req := range []CallRequest{full, {}, {Command: "true", Timeout: time.Second, MaxOutput: 30000, Keep: "both"}} {
		got, err := runRequest("tok\"en", &req)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(string(got), "}\n") || strings.Count(string(got), "\n") != 1 {
			t.Fatalf("not one line: %q", got)
		}
		want, err := json.Marshal(message{Op: "run", Token: "tok\"en", Call: &req})
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%q: %v", got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("runRequest wrote\n%s\nencoding/json writes\n%s", got, want)
		}
		var m message
		if err := json.Unmarshal(got, &m); err != nil || m.Op != "run" || m.Token != "tok\"en" || m.Call == nil || !reflect.DeepEqual(*m.Call, req) {
			t.Errorf("the server reads %+v (%v), want %+v", m.Call, err, req)
		}
	}
}

// TestReplyFields: reply has every field of message that is not the
// client's (op, token, call, signal), with the same type and tag.
func TestReplyFields(t *testing.T) {
	client := map[string]bool{"Op": true, "Token": true, "Call": true, "Signal": true}
	mt, rt := reflect.TypeOf(message{}), reflect.TypeOf(reply{})
	n := 0
	for i := 0; i < mt.NumField(); i++ {
		mf := mt.Field(i)
		if client[mf.Name] {
			continue
		}
		n++
		rf, ok := rt.FieldByName(mf.Name)
		if !ok || rf.Type != mf.Type || rf.Tag != mf.Tag {
			t.Errorf("message.%s (%s %s) has no twin in reply", mf.Name, mf.Type, mf.Tag)
		}
	}
	if rt.NumField() != n {
		t.Errorf("reply has %d fields, message's server fields are %d", rt.NumField(), n)
	}
}

// TestCallSandbox: what a call's client reads of spec.json is what Spec
// reads, with a sandbox and without one; a spec that cannot be read is
// session_ended for both.
func TestCallSandbox(t *testing.T) {
	d, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := &Manager{Dir: d}
	specs := []Spec{
		{Shell: "/bin/bash", Cwd: "/w", Env: []string{"A=1"}},
		{Shell: "/bin/bash", Cwd: "/w2", Sandbox: &sandbox.Policy{Mode: sandbox.ModeWorkspaceWrite, Workspace: "/w2", AllowWrite: []string{"/tmp/x"}, DenyRead: []string{"/secret"}, Net: sandbox.NetNone, Memory: 1 << 30, Pids: 64, User: "nobody"}},
	}
	for i, spec := range specs {
		id := strconv.Itoa(i + 1)
		if err := os.MkdirAll(m.sessionDir(id), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := state.WriteJSONAtomic(filepath.Join(m.sessionDir(id), "spec.json"), spec, 0o600); err != nil {
			t.Fatal(err)
		}
		h := d.Mint(Kind, id)
		full, err := m.Spec(h)
		if err != nil {
			t.Fatal(err)
		}
		pol, cwd, err := m.CallSandbox(h)
		if err != nil {
			t.Fatal(err)
		}
		if cwd != full.Cwd || !reflect.DeepEqual(pol, full.Sandbox) {
			t.Errorf("CallSandbox = %+v, %q; Spec has %+v, %q", pol, cwd, full.Sandbox, full.Cwd)
		}
	}
	if err := os.WriteFile(filepath.Join(m.sessionDir("1"), "spec.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, specErr := m.Spec(d.Mint(Kind, "1"))
	_, _, err = m.CallSandbox(d.Mint(Kind, "1"))
	if result.AsError(err).Code != result.CodeSessionEnded || result.AsError(specErr).Code != result.CodeSessionEnded {
		t.Errorf("unreadable spec: CallSandbox %v, Spec %v", err, specErr)
	}
}

// TestSendResult: a result goes out as the very line send writes for it.
func TestSendResult(t *testing.T) {
	obj := result.New().Set("success", true).Set("stdout", "<a href=\"x\">&amp;</a>\n\u2028é\x01\ufffd").Set("exit_code", 0).
		Set("background", []BackgroundInfo{{PID: 3, Command: "sleep 1 &", Status: "running"}})
	b, err := result.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var got, want strings.Builder
	if err := (&lineWriter{w: &got}).sendResult(b); err != nil {
		t.Fatal(err)
	}
	if err := (&lineWriter{w: &want}).send(message{Type: "result", Result: b}); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Errorf("sendResult wrote\n%q\nsend writes\n%q", got.String(), want.String())
	}
}

// TestDialedCall: the client's connection made ahead of its request
// (Dial) carries a call through the server's whole path, and one closed
// without a request reaches nothing: the call is not counted.
func TestDialedCall(t *testing.T) {
	s := newTestServer(t)
	auth, err := newAuthority()
	if err != nil {
		t.Fatal(err)
	}
	s.auth = auth
	d, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := &Manager{Dir: d}
	sdir := m.sessionDir("1")
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := state.WriteJSONAtomic(filepath.Join(sdir, "spec.json"), s.spec, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := auth.publish(sdir); err != nil {
		t.Fatal(err)
	}
	l, err := listenUnix(filepath.Join(sdir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	served := make(chan struct{}, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { s.serveConn(c); served <- struct{}{} }()
		}
	}()
	h := d.Mint(Kind, "1")
	calls := func() int { s.mu.Lock(); defer s.mu.Unlock(); return s.rec.Calls }

	idle := m.Dial(h)
	idle.Close()
	<-served
	if n := calls(); n != 0 {
		t.Fatalf("a connection closed without a request counted %d calls", n)
	}
	conn := m.Dial(h)
	raw, err := conn.Call(context.Background(), CallRequest{Command: "echo hi", Timeout: 20 * time.Second, KillAfter: time.Second, MaxOutput: 1000}, nil)
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Stdout   string `json:"stdout"`
		ExitCode int    `json:"exit_code"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || res.Stdout != "hi\n" || res.ExitCode != 0 {
		t.Fatalf("result %s (%v)", raw, err)
	}
	if n := calls(); n != 1 {
		t.Fatalf("%d calls counted, want 1", n)
	}
	if _, err := m.Dial("ses_aaaaaaaaaaaaaaaaaaaaaaaaaaaa").Call(context.Background(), CallRequest{Command: "true"}, nil); err == nil {
		t.Fatal("a handle of no session was called")
	}
}

// TestParseReply: what a client reads of each message the server sends
// (every kind, through the writers the server uses) is what json.Unmarshal
// into reply reads, and a line json.Unmarshal refuses is refused.
func TestParseReply(t *testing.T) {
	pid := 4242
	res, err := result.Marshal(result.New().Set("success", true).Set("status", "completed").Set("exit_code", 3).Set("stdout", "a\"b\n<é>\x01").Set("pid", pid))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	w := &lineWriter{w: &b}
	for _, m := range []message{
		{Type: "start", Started: &pid},
		{Type: "stdout", Data: "line\n\"quoted\" <&>"},
		{Type: "output", Data: ""},
		{Type: "error", Error: toWire(result.Errorf(result.CodeSessionBusy, "busy").With("hint", "wait").With("n", 2))},
		{Type: "stopped"},
	} {
		if err := w.send(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.sendResult(res); err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(b.String(), "\n")
	lines = append(lines[:len(lines)-1], `{"type":"result","result":null}`, `{"type":3}`, `{"started":"1"}`, `{"started":1.5}`, `{"error":{"code":1}}`, `{"type":"x"`, `[1]`, `null`, ``, `{"data":null,"type":"stdout"}`)
	for _, l := range lines {
		var want reply
		wantOK := json.Unmarshal([]byte(l), &want) == nil
		got, ok := parseReply([]byte(l))
		if ok != wantOK {
			t.Errorf("%q: parseReply ok %v, json.Unmarshal ok %v", l, ok, wantOK)
			continue
		}
		if !ok {
			continue
		}
		// The result's bytes, compared as JSON values.
		if !reflect.DeepEqual(got.Result == nil, want.Result == nil) || (got.Result != nil && string(got.Result) != string(want.Result)) {
			t.Errorf("%q: result %s, want %s", l, got.Result, want.Result)
		}
		got.Result, want.Result = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: parseReply %+v, json.Unmarshal %+v", l, got, want)
		}
	}
}
