package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// binDir holds agentsh, agentjob and agentfs built once for all tests: the
// server runs each call as a subprocess of the real programs.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "mcpserver-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	out, err := exec.Command("go", "build", "-o", dir+"/",
		"github.com/agentplane/agentplane/cmd/agentsh",
		"github.com/agentplane/agentplane/cmd/agentjob",
		"github.com/agentplane/agentplane/cmd/agentfs").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the programs: %v\n%s", err, out)
		return 1
	}
	binDir = dir
	return m.Run()
}

// server is one running "PROGRAM mcp" with a connected Go SDK client.
type server struct {
	t        *testing.T
	cmd      *exec.Cmd
	cs       *mcp.ClientSession
	stderr   *syncBuffer
	stateDir string
	logs     chan *mcp.LoggingMessageParams
	progress chan *mcp.ProgressNotificationParams
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// testEnv isolates the programs from the user's configuration.
func testEnv(t *testing.T) []string {
	home := t.TempDir()
	return append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_STATE_HOME="+filepath.Join(home, ".state"), "AGENTPLANE_CONFIG=")
}

// start runs "program mcp args..." in dir and connects a client.
func start(t *testing.T, program, dir string, args ...string) *server {
	t.Helper()
	return startIn(t, t.TempDir(), program, dir, args...)
}

// startIn is start with a given state directory: a second server on the
// same environment is how a host that opens one connection per call
// (over stdio, one server per call) reaches its sessions again.
func startIn(t *testing.T, stateDir, program, dir string, args ...string) *server {
	t.Helper()
	return startEnv(t, testEnv(t), stateDir, program, dir, args...)
}

// startEnv is startIn with the server's environment given.
func startEnv(t *testing.T, env []string, stateDir, program, dir string, args ...string) *server {
	t.Helper()
	s := &server{t: t, stderr: &syncBuffer{}, stateDir: stateDir,
		logs: make(chan *mcp.LoggingMessageParams, 256), progress: make(chan *mcp.ProgressNotificationParams, 256)}
	argv := append([]string{"mcp", "--verbose", "--state-dir", s.stateDir}, args...)
	s.cmd = exec.Command(filepath.Join(binDir, program), argv...)
	s.cmd.Dir = dir
	s.cmd.Env = env
	s.cmd.Stderr = s.stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "agentplane-test", Version: "0"}, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			select {
			case s.logs <- r.Params:
			default:
			}
		},
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			select {
			case s.progress <- r.Params:
			default:
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A generous grace: the server stops its sessions before it exits.
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: s.cmd, TerminateDuration: time.Minute}, nil)
	if err != nil {
		t.Fatalf("connect: %v\nstderr: %s", err, s.stderr.String())
	}
	s.cs = cs
	t.Cleanup(func() { s.close() })
	return s
}

// close ends the connection and waits for the server to exit: after that,
// every call's subprocess has reported and the server's sessions are
// stopped.
func (s *server) close() {
	if s.cs == nil {
		return
	}
	_ = s.cs.Close()
	s.cs = nil
	if st := s.cmd.ProcessState; st == nil || !st.Success() {
		s.t.Errorf("server exit: %v\n%s", st, s.stderr.String())
	}
}

// call runs a tool and returns the result and its structured content.
func (s *server) call(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, map[string]any) {
	s.t.Helper()
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		s.t.Fatalf("%s: %v\nstderr: %s", name, err, s.stderr.String())
	}
	b, _ := json.Marshal(res.StructuredContent)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		s.t.Fatalf("%s: structured content %s: %v", name, b, err)
	}
	if len(res.Content) == 0 {
		s.t.Fatalf("%s: no text content", name)
	}
	return res, m
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestListTools(t *testing.T) {
	s := start(t, "agentsh", t.TempDir(), "--all")
	res, err := s.cs.ListTools(testCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		tools[tl.Name] = tl
	}
	for _, want := range []string{"agentsh_run", "agentsh_session_start", "agentjob_start", "agentjob_wait", "agentfs_edit", "agentfs_read"} {
		if tools[want] == nil {
			t.Errorf("tool %s missing", want)
		}
	}
	// Same descriptions as "schema --format mcp"; the operator's keys and
	// the server's own are gone; sessions can be detached.
	for _, prog := range []string{"agentsh", "agentjob", "agentfs"} {
		out, err := exec.Command(filepath.Join(binDir, prog), "schema", "--format", "mcp").Output()
		if err != nil {
			t.Fatal(err)
		}
		var sch struct {
			Tools []struct {
				Name        string `json:"name"`
				Description string `json:"description"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(out, &sch); err != nil {
			t.Fatal(err)
		}
		for _, st := range sch.Tools {
			if tools[st.Name] == nil || tools[st.Name].Description != st.Description {
				t.Errorf("%s: served description differs from schema --format mcp", st.Name)
			}
		}
	}
	props := func(name string) map[string]any {
		b, _ := json.Marshal(tools[name].InputSchema)
		var s struct {
			Properties map[string]any `json:"properties"`
		}
		_ = json.Unmarshal(b, &s)
		return s.Properties
	}
	run := props("agentsh_run")
	for _, k := range []string{"sandbox", "allow_write", "net", "allow_host", "memory", "stream", "tee"} {
		if _, ok := run[k]; ok {
			t.Errorf("agentsh_run offers the operator's or server's key %q", k)
		}
	}
	for _, k := range []string{"command", "cwd", "timeout"} {
		if _, ok := run[k]; !ok {
			t.Errorf("agentsh_run lacks %q", k)
		}
	}
	for name, tl := range tools {
		a := tl.Annotations
		if a == nil || a.DestructiveHint == nil || a.OpenWorldHint == nil {
			t.Errorf("%s: annotations %+v, want all four hints", name, a)
		}
	}
	if a := tools["agentfs_read"].Annotations; !a.ReadOnlyHint || *a.DestructiveHint || *a.OpenWorldHint {
		t.Errorf("agentfs_read annotations %+v", a)
	}
	if a := tools["agentsh_run"].Annotations; a.ReadOnlyHint || !*a.DestructiveHint || !*a.OpenWorldHint {
		t.Errorf("agentsh_run annotations %+v", a)
	}
	if _, ok := props("agentsh_session_start")["detached"]; !ok {
		t.Error("agentsh_session_start lacks detached")
	}
	if _, ok := props("agentjob_logs")["follow"]; ok {
		t.Error("agentjob_logs offers follow")
	}
}

func TestRunCommandWithProgress(t *testing.T) {
	s := start(t, "agentsh", t.TempDir())
	params := &mcp.CallToolParams{Name: "agentsh_run", Arguments: map[string]any{"command": "printf hello"}}
	params.SetProgressToken("p1")
	res, err := s.cs.CallTool(testCtx(t), params)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("tool error: %+v", res.Content[0])
	}
	m := res.StructuredContent.(map[string]any)
	if m["stdout"] != "hello" || m["status"] != "completed" || m["exit_code"] != float64(0) {
		t.Fatalf("result %v", m)
	}
	if _, ok := m["type"]; ok {
		t.Error("the result carries a stream event's type")
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if !strings.HasPrefix(text, "agentsh_run: ok status=completed exit_code=0") || !strings.Contains(text, `"stdout":"hello"`) {
		t.Errorf("text %q", text)
	}
	// The output event precedes the result, so its progress notification
	// was sent before the response.
	select {
	case p := <-s.progress:
		if p.ProgressToken != "p1" || p.Progress != 5 {
			t.Errorf("progress %+v", p)
		}
	case <-testCtx(t).Done():
		t.Error("no progress notification")
	}
}

func TestTimeout(t *testing.T) {
	s := start(t, "agentsh", t.TempDir())
	res, m := s.call(testCtx(t), "agentsh_run", map[string]any{"command": "echo before; sleep 60", "timeout": "1s", "kill_after": "1s"})
	// A command that ran and timed out is a normal result (CONTRACT §7).
	if res.IsError || m["success"] != false || m["status"] != "timeout" || m["exit_code"] != float64(124) || m["stdout"] != "before\n" {
		t.Fatalf("isError=%v result %v", res.IsError, m)
	}
}

func TestOperatorKeysRefused(t *testing.T) {
	dir := t.TempDir()
	s := start(t, "agentsh", dir, "--all", "--sandbox", "read-only", "--root", dir)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"agentsh_run", map[string]any{"command": "true", "sandbox": "none"}},
		{"agentsh_run", map[string]any{"command": "true", "allow_write": []string{"/"}}},
		{"agentsh_run", map[string]any{"command": "true", "stream": true}},
		{"agentsh_run", map[string]any{"command": "cat", "stdin_file": "/etc/hostname"}},
		{"agentsh_session_start", map[string]any{"net": "host"}},
		{"agentsh_run", map[string]any{"command": "true", "allow_host": []string{"evil.example"}}},
		{"agentsh_session_start", map[string]any{"allow_host": []string{"evil.example"}}},
		{"agentjob_start", map[string]any{"command": "true", "allow_host": []string{"evil.example"}}},
		{"agentfs_read", map[string]any{"path": "x", "root": "/"}},
		{"agentfs_write", map[string]any{"path": "x", "content_file": "/etc/hostname"}},
		{"agentfs_edit", map[string]any{"path": "x", "edits": "@/etc/hostname"}},
		{"agentjob_logs", map[string]any{"job": "x", "follow": true}},
	} {
		res, m := s.call(testCtx(t), c.tool, c.args)
		e, _ := m["error"].(map[string]any)
		if !res.IsError || e["code"] != "invalid_request" {
			t.Errorf("%s %v: isError=%v result %v", c.tool, c.args, res.IsError, m)
		}
		if _, ok := c.args["allow_host"]; ok && !strings.Contains(fmt.Sprint(e["message"]), "allow_host") {
			t.Errorf("%s: the refusal does not name allow_host: %v", c.tool, e)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Error("a refused call wrote a file")
	}
}

func TestPolicyRefusal(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.star")
	if err := os.WriteFile(rules, []byte(`prefix_rule(pattern=["rm"], decision="forbidden", justification="never delete")`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := start(t, "agentsh", dir, "--all", "--policy", rules)
	res, m := s.call(testCtx(t), "agentsh_run", map[string]any{"command": "rm keep"})
	e, _ := m["error"].(map[string]any)
	if !res.IsError || e["code"] != "policy_denied" {
		t.Fatalf("isError=%v result %v", res.IsError, m)
	}
	if _, err := os.Stat(filepath.Join(dir, "keep")); err != nil {
		t.Fatal("the refused command ran")
	}
	// agentjob start is screened by the same policy.
	res, m = s.call(testCtx(t), "agentjob_start", map[string]any{"command": "rm keep"})
	e, _ = m["error"].(map[string]any)
	if !res.IsError || e["code"] != "policy_denied" {
		t.Fatalf("agentjob_start: isError=%v result %v", res.IsError, m)
	}
	// A tool call cannot route around the policy with the shell or an
	// environment variable that injects code.
	for _, args := range []map[string]any{
		{"command": "true", "shell": "/usr/bin/python3"},
		{"command": "true", "env": []any{"BASH_ENV=/tmp/x"}},
		{"command": "true", "env": []any{"LD_PRELOAD=/tmp/x.so"}},
	} {
		res, m = s.call(testCtx(t), "agentsh_run", args)
		e, _ = m["error"].(map[string]any)
		if !res.IsError || e["code"] != "invalid_request" {
			t.Fatalf("%v: isError=%v result %v", args, res.IsError, m)
		}
	}
	// An exec the string check cannot see is stopped while it runs.
	res, m = s.call(testCtx(t), "agentsh_run", map[string]any{"command": "printf '#!/bin/sh\\nrm keep\\n' > s.sh; chmod +x s.sh; ./s.sh"})
	e, _ = m["error"].(map[string]any)
	if !res.IsError || e["code"] != "policy_denied" {
		t.Fatalf("runtime: isError=%v result %v", res.IsError, m)
	}
	if _, err := os.Stat(filepath.Join(dir, "keep")); err != nil {
		t.Fatal("the refused command ran")
	}
}

// TestCancel cancels a running command: the call's subprocess gets SIGINT,
// agentsh stops the command and reports cancelled, and once the server has
// exited no process of the command is left.
func TestCancel(t *testing.T) {
	dir := t.TempDir()
	s := start(t, "agentsh", dir)
	pidFile := filepath.Join(dir, "pids")
	ctx, cancel := context.WithCancel(testCtx(t))
	params := &mcp.CallToolParams{Name: "agentsh_run", Arguments: map[string]any{
		"command": "echo $$ > pids; sleep 300 & echo $! >> pids; setsid sleep 300 & echo $! >> pids; echo started; wait",
		"timeout": 0,
	}}
	params.SetProgressToken("c1")
	errc := make(chan error, 1)
	go func() {
		_, err := s.cs.CallTool(ctx, params)
		errc <- err
	}()
	select {
	case <-s.progress: // "started" was printed: the command is running
	case err := <-errc:
		t.Fatalf("call ended before output: %v", err)
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled call returned a result")
	}
	s.close()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pids := strings.Fields(string(b))
	if len(pids) != 3 {
		t.Fatalf("pids %q", pids)
	}
	for _, p := range pids {
		if _, err := os.Stat("/proc/" + p); err == nil {
			stat, _ := os.ReadFile("/proc/" + p + "/stat")
			t.Errorf("process %s survived the cancelled call: %s", p, stat)
		}
	}
	if !strings.Contains(s.stderr.String(), "agentsh_run: failed status=cancelled") {
		t.Errorf("the call did not report cancelled; server log:\n%s", s.stderr.String())
	}
}

func TestEditFile(t *testing.T) {
	dir := t.TempDir()
	s := start(t, "agentfs", dir, "--root", dir)
	ctx := testCtx(t)
	path := filepath.Join(dir, "main.go")
	res, m := s.call(ctx, "agentfs_write", map[string]any{"path": path, "content": "package main\n\nfunc main() {}\n"})
	if res.IsError || m["created"] != true {
		t.Fatalf("write: %v", m)
	}
	res, m = s.call(ctx, "agentfs_edit", map[string]any{"path": path, "old": "func main() {}", "new": "func main() { println(1) }"})
	if res.IsError {
		t.Fatalf("edit: %v", m)
	}
	if m["original_file"] != "package main\n\nfunc main() {}\n" || m["new_file"] != "package main\n\nfunc main() { println(1) }\n" {
		t.Fatalf("before/after: %v", m)
	}
	if d, _ := m["diff"].(string); !strings.Contains(d, "+func main() { println(1) }") {
		t.Errorf("diff %q", d)
	}
	res, m = s.call(ctx, "agentfs_read", map[string]any{"path": path})
	if res.IsError || m["content"] != "package main\n\nfunc main() { println(1) }\n" {
		t.Fatalf("read: %v", m)
	}
	// The server's root holds; a path outside is a tool error.
	res, m = s.call(ctx, "agentfs_read", map[string]any{"path": "/etc/hostname"})
	e, _ := m["error"].(map[string]any)
	if !res.IsError || e["code"] != "outside_root" {
		t.Fatalf("outside root: %v", m)
	}
	res, m = s.call(ctx, "agentfs_read", map[string]any{"path": path, "root": "/"})
	if e, _ := m["error"].(map[string]any); !res.IsError || e["code"] != "invalid_request" {
		t.Fatalf("root argument: %v", m)
	}
}

// realPython finds the interpreter itself rather than a version manager's
// shim, whose wrapper process would be what the job runs.
func realPython(t *testing.T) string {
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Skipf("python3 is needed for the dev server job: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestDevServerReadyNotification(t *testing.T) {
	py := realPython(t)
	dir := t.TempDir()
	s := start(t, "agentsh", dir, "--all")
	ctx := testCtx(t)
	if err := s.cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(freePort(t))
	res, m := s.call(ctx, "agentjob_start", map[string]any{
		"argv": []string{py, "-m", "http.server", port, "--bind", "127.0.0.1"}, "cwd": dir,
		"ready_http": "http://127.0.0.1:" + port + "/", "name": "web",
	})
	if res.IsError {
		t.Fatalf("start: %v", m)
	}
	handle, _ := m["handle"].(string)
	t.Cleanup(func() {
		_ = exec.Command(filepath.Join(binDir, "agentjob"), "stop", "--state-dir", s.stateDir, handle).Run()
	})
	seen := map[string]bool{}
	for !seen["ready"] {
		select {
		case p := <-s.logs:
			d, _ := p.Data.(map[string]any)
			if p.Logger != "agentjob" || d["handle"] != handle {
				continue
			}
			seen[d["event"].(string)] = true
			if d["event"] == "ready" && (d["name"] != "web" || d["type"] != "job_ready") {
				t.Errorf("ready notification %v", d)
			}
		case <-ctx.Done():
			t.Fatalf("no ready notification; saw %v\n%s", seen, s.stderr.String())
		}
	}
	// The job is reachable, and stopping it is another notification.
	res, m = s.call(ctx, "agentjob_stop", map[string]any{"job": handle})
	if res.IsError {
		t.Fatalf("stop: %v", m)
	}
	for !seen["stopped"] {
		select {
		case p := <-s.logs:
			if d, _ := p.Data.(map[string]any); d["handle"] == handle {
				seen[d["event"].(string)] = true
			}
		case <-ctx.Done():
			t.Fatalf("no stopped notification; saw %v", seen)
		}
	}
}

func TestWaitProgress(t *testing.T) {
	dir := t.TempDir()
	s := start(t, "agentjob", dir)
	ctx := testCtx(t)
	gate := filepath.Join(dir, "gate")
	res, m := s.call(ctx, "agentjob_start", map[string]any{"command": "while [ ! -e gate ]; do sleep 0.05; done; exit 3", "cwd": dir})
	if res.IsError {
		t.Fatalf("start: %v", m)
	}
	handle := m["handle"].(string)
	params := &mcp.CallToolParams{Name: "agentjob_wait", Arguments: map[string]any{"jobs": []string{handle}, "timeout": "60s"}}
	params.SetProgressToken("w1")
	type out struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		r, err := s.cs.CallTool(ctx, params)
		done <- out{r, err}
	}()
	// The gate opens only once the wait has begun: its agentjob wait
	// subprocess runs, so the server's progress watch, set up before it,
	// has taken its starting point in the event log. A job that failed
	// earlier would end the wait with no event after that point.
	awaitDescendant(t, s.cmd.Process.Pid, "wait\x00--request\x00")
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	m = o.res.StructuredContent.(map[string]any)
	// The job failed, the wait did what was asked: a normal result.
	if o.res.IsError || m["success"] != false || m["status"] != "failed" {
		t.Fatalf("wait: %v", m)
	}
	// The event that ended the wait is reported as progress before the
	// result.
	for {
		select {
		case p := <-s.progress:
			if p.ProgressToken == "w1" && strings.HasSuffix(p.Message, ": failed") {
				return
			}
		case <-ctx.Done():
			t.Fatal("no progress for the failure")
		}
	}
}

func TestSessionsStopWithConnection(t *testing.T) {
	dir := t.TempDir()
	s := start(t, "agentsh", dir, "--session-idle-timeout", "0")
	ctx := testCtx(t)
	res, m := s.call(ctx, "agentsh_session_start", map[string]any{"cwd": dir})
	if res.IsError {
		t.Fatalf("start: %v", m)
	}
	owned := m["session"].(string)
	res, m = s.call(ctx, "agentsh_session_start", map[string]any{"cwd": dir, "detached": true})
	if res.IsError {
		t.Fatalf("start detached: %v", m)
	}
	detached := m["session"].(string)
	if _, m = s.call(ctx, "agentsh_run", map[string]any{"session": owned, "command": "export X=kept; cd /"}); m["success"] != true {
		t.Fatalf("run: %v", m)
	}
	if _, m = s.call(ctx, "agentsh_run", map[string]any{"session": owned, "command": "echo $X; pwd"}); m["stdout"] != "kept\n/\n" {
		t.Fatalf("session state lost: %v", m)
	}
	s.close()
	status := func(h string) string {
		cmd := exec.Command(filepath.Join(binDir, "agentsh"), "session", "status", "--state-dir", s.stateDir, "-q", "status", h)
		cmd.Env = testEnv(t)
		b, _ := cmd.Output()
		return strings.TrimSpace(string(b))
	}
	if st := status(owned); st != "ended" {
		t.Errorf("the connection's session is %q after it closed", st)
	}
	if st := status(detached); st == "ended" || st == "" {
		t.Errorf("the detached session is %q", st)
	}
	cmd := exec.Command(filepath.Join(binDir, "agentsh"), "session", "stop", "--state-dir", s.stateDir, detached)
	cmd.Env = testEnv(t)
	_ = cmd.Run()
}

// TestWorkspacePinned: with --sandbox workspace-write and no --workspace,
// the writable area is the server's directory, not the cwd a call names.
func TestWorkspacePinned(t *testing.T) {
	work, other := t.TempDir(), t.TempDir()
	s := start(t, "agentsh", work, "--sandbox", "workspace-write")
	res, m := s.call(testCtx(t), "agentsh_run", map[string]any{
		"command": "touch here 2>/dev/null; echo other=$?; touch " + filepath.Join(work, "w") + "; echo work=$?",
		"cwd":     other,
	})
	if e, _ := m["error"].(map[string]any); e["code"] == "sandbox_unavailable" {
		t.Skipf("this machine cannot enforce workspace-write: %v", e["message"])
	}
	if res.IsError || m["stdout"] != "other=1\nwork=0\n" {
		t.Fatalf("isError=%v result %v", res.IsError, m)
	}
	if _, err := os.Stat(filepath.Join(other, "here")); err == nil {
		t.Fatal("a call's cwd widened the workspace")
	}
}

// TestSessionsOutliveConnection: a host that opens one connection per tool
// call (over stdio, one server process per call) finds its session again
// with its state, and the session's idle timeout is the server's bound.
func TestSessionsOutliveConnection(t *testing.T) {
	dir, stateDir := t.TempDir(), t.TempDir()
	ctx := testCtx(t)
	s := startIn(t, stateDir, "agentsh", dir, "--session-idle-timeout", "10m")
	res, m := s.call(ctx, "agentsh_session_start", map[string]any{"cwd": dir, "idle_timeout": 0})
	if res.IsError {
		t.Fatalf("start: %v", m)
	}
	h := m["session"].(string)
	t.Cleanup(func() {
		cmd := exec.Command(filepath.Join(binDir, "agentsh"), "session", "stop", "--state-dir", stateDir, h)
		cmd.Env = testEnv(t)
		_ = cmd.Run()
	})
	s.close()
	s = startIn(t, stateDir, "agentsh", dir, "--session-idle-timeout", "10m")
	if _, m = s.call(ctx, "agentsh_run", map[string]any{"session": h, "command": "export X=kept; cd /"}); m["success"] != true {
		t.Fatalf("the session is gone after its connection closed: %v", m)
	}
	s.close()
	s = startIn(t, stateDir, "agentsh", dir, "--session-idle-timeout", "10m")
	if _, m = s.call(ctx, "agentsh_run", map[string]any{"session": h, "command": "echo $X; pwd"}); m["stdout"] != "kept\n/\n" {
		t.Fatalf("session state lost across connections: %v", m)
	}
	// idle_timeout 0 (never) asked for; the server's 10m applies.
	if _, m = s.call(ctx, "agentsh_session_status", map[string]any{"session": h}); fmt.Sprint(m["idle_timeout_ms"]) != "600000" {
		t.Errorf("idle timeout not bounded by the server: %v", m)
	}
	// A session or job that is gone is a tool error.
	if _, err := exec.Command(filepath.Join(binDir, "agentsh"), "session", "stop", "--state-dir", stateDir, h).Output(); err != nil {
		t.Logf("stop: %v", err)
	}
	res, m = s.call(ctx, "agentsh_run", map[string]any{"session": h, "command": "true"})
	if !res.IsError || m["success"] != false {
		t.Errorf("a call on a stopped session: isError=%v %v", res.IsError, m)
	}
}

// TestBadSettingFailsAtStart: a server that cannot start says why on
// stderr (which hosts show; stdout is the MCP connection) and exits
// non-zero: a setting the program would reject, a sibling program that
// is not there.
func TestBadSettingFailsAtStart(t *testing.T) {
	lone := t.TempDir() // agentsh without agentjob and agentfs beside it or on PATH
	b, err := os.ReadFile(filepath.Join(binDir, "agentsh"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lone, "agentsh"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		exe  string
		args []string
		code string
		says string
	}{
		{filepath.Join(binDir, "agentsh"), []string{"--sandbox", "bogus"}, "usage_error", "bogus"},
		{filepath.Join(binDir, "agentsh"), []string{"--all", "--memory", "lots"}, "usage_error", "lots"},
		{filepath.Join(lone, "agentsh"), []string{"--all"}, "usage_error", "agentjob"},
	} {
		cmd := exec.Command(c.exe, append([]string{"mcp", "--state-dir", t.TempDir()}, c.args...)...)
		cmd.Env = append(testEnv(t), "PATH=/usr/bin:/bin")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		var m struct {
			Success bool `json:"success"`
			Error   struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		jerr := json.Unmarshal([]byte(lines[len(lines)-1]), &m)
		if err == nil || len(out) != 0 || jerr != nil || m.Error.Code != c.code ||
			!strings.HasPrefix(lines[0], "agentsh: error: ") || !strings.Contains(lines[0], c.says) {
			t.Errorf("%s %v: err=%v stdout=%q stderr=%s", c.exe, c.args, err, out, stderr.String())
		}
	}
}

// TestJobLogsStreamArgument: agentjob_logs' stream (which stream to read)
// is a tool argument, though agentsh_run's stream (NDJSON reporting) is the
// server's; a wait that times out is a normal result.
func TestJobLogsStreamArgument(t *testing.T) {
	dir := t.TempDir()
	s := start(t, "agentjob", dir)
	ctx := testCtx(t)
	res, m := s.call(ctx, "agentjob_start", map[string]any{"command": "echo out; echo err >&2; sleep 60", "cwd": dir})
	if res.IsError {
		t.Fatalf("start: %v", m)
	}
	h := m["handle"].(string)
	defer s.call(ctx, "agentjob_stop", map[string]any{"job": h})
	res, m = s.call(ctx, "agentjob_wait", map[string]any{"jobs": []string{h}, "timeout": 1})
	if res.IsError || m["success"] != false || m["timed_out"] != true {
		t.Fatalf("a wait that timed out: isError=%v %v", res.IsError, m)
	}
	// A job that ran and failed before it was ready is reported like a
	// command that failed: its handle and status, not a tool error.
	res, m = s.call(ctx, "agentjob_start", map[string]any{"command": "echo no; exit 3", "cwd": dir, "ready_log": "never", "wait_ready": true})
	if e, _ := m["error"].(map[string]any); res.IsError || m["status"] != "failed" || m["handle"] == nil || e["code"] != "not_ready" {
		t.Fatalf("a job that failed before ready: isError=%v %v", res.IsError, m)
	}
	for {
		res, m = s.call(ctx, "agentjob_logs", map[string]any{"job": h, "stream": "stderr"})
		if res.IsError {
			t.Fatalf("logs: %v", m)
		}
		if m["data"] == "err\n" {
			break
		}
		if m["data"] != "" {
			t.Fatalf("stderr only, got %v", m)
		}
		select {
		case <-ctx.Done():
			t.Fatal("no stderr")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestOperatorAllowHost: the server's --allow-host applies to every call;
// the result reports what the allowlist let through and refused.
func TestOperatorAllowHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the network namespace")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl")
	}
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer ok.Close()
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "leaked") }))
	defer denied.Close()
	s := start(t, "agentsh", t.TempDir(), "--allow-host", ok.Listener.Addr().String())
	res, m := s.call(testCtx(t), "agentsh_run", map[string]any{"command": "curl -sS " + ok.URL + "; curl -sS " + denied.URL})
	if res.IsError || m["stdout"] == nil || !strings.HasPrefix(m["stdout"].(string), "ok") || strings.Contains(m["stdout"].(string), "leaked") {
		t.Fatalf("isError=%v result %v", res.IsError, m)
	}
	n, _ := m["network"].(map[string]any)
	d, _ := n["denied"].([]any)
	if len(d) != 1 || d[0].(map[string]any)["port"] != float64(denied.Listener.Addr().(*net.TCPAddr).Port) {
		t.Fatalf("network %v", n)
	}
}

// TestLargeCommand: an agentsh_run whose command is a 1 MiB heredoc, eight
// times the kernel's limit for one argument, writes its file: the command
// travels to agentsh in the request on stdin and to the shell through a
// file, never through argv.
func TestLargeCommand(t *testing.T) {
	dir := t.TempDir()
	s := start(t, "agentsh", dir)
	ctx := testCtx(t)
	file := filepath.Join(dir, "big.txt")
	line := strings.Repeat("0123456789abcdef", 7) + "\n"
	body := strings.Repeat(line, (1<<20)/len(line)+1)
	cmd := "cat > " + file + " <<'MCP_EOF'\n" + body + "MCP_EOF\necho written"
	res, m := s.call(ctx, "agentsh_run", map[string]any{"command": cmd})
	if res.IsError || m["stdout"] != "written\n" {
		t.Fatalf("agentsh_run: error %v, stdout %q, error %v", res.IsError, m["stdout"], m["error"])
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != body {
		t.Fatalf("the file has %d bytes, want %d", len(got), len(body))
	}
}

// awaitDescendant waits (bounded) until a descendant of pid has marker in
// its /proc cmdline: a subprocess that has been exec'd, not merely forked.
func awaitDescendant(t *testing.T, pid int, marker string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		snap, err := proctree.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range proctree.Descendants(snap, pid) {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(d.PID) + "/cmdline")
			if strings.Contains(string(b), marker) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no subprocess with %q below %d", marker, pid)
		}
		time.Sleep(5 * time.Millisecond) // polling /proc: an exec has no event to wait on
	}
}

// TestLockHoldsFileTools: under sandbox_lock, agentfs's tools served by
// agentsh mcp --all change files only inside the locked workspace (the
// server's working directory), as a sandboxed command could, and read no
// hidden path: a model's write through a path outside, or through a link
// out of the workspace, is a tool error with nothing written.
func TestLockHoldsFileTools(t *testing.T) {
	ws, outside := t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	env := testEnv(t)
	var cfgDir string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "XDG_CONFIG_HOME="); ok {
			cfgDir = filepath.Join(v, "agentplane")
		}
	}
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := "sandbox = \"workspace-write\"\ndeny_read = [\"" + secret + "\"]\nsandbox_lock = true\n"
	if err := os.WriteFile(filepath.Join(cfgDir, "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startEnv(t, env, t.TempDir(), "agentsh", ws, "--all")
	ctx := testCtx(t)
	res, m := s.call(ctx, "agentfs_write", map[string]any{"path": filepath.Join(ws, "in.txt"), "content": "in"})
	if res.IsError || m["created"] != true {
		t.Fatalf("write inside the workspace: %v", m)
	}
	for _, path := range []string{filepath.Join(outside, "f.txt"), filepath.Join(ws, "out", "f.txt")} {
		res, m = s.call(ctx, "agentfs_write", map[string]any{"path": path, "content": "x"})
		if e, _ := m["error"].(map[string]any); !res.IsError || e["code"] != "sandbox_locked" {
			t.Errorf("write %s: %v", path, m)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "f.txt")); err == nil {
		t.Fatal("a tool call wrote outside the locked workspace")
	}
	// Nor one through which git runs a program at the user's next git
	// command: a commondir naming a forged git directory.
	if err := os.MkdirAll(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	res, m = s.call(ctx, "agentfs_write", map[string]any{"path": filepath.Join(ws, ".git", "commondir"), "content": "../forged"})
	if e, _ := m["error"].(map[string]any); !res.IsError || e["code"] != "sandbox_locked" {
		t.Errorf("write of .git/commondir: %v", m)
	}
	res, m = s.call(ctx, "agentfs_read", map[string]any{"path": secret})
	if e, _ := m["error"].(map[string]any); !res.IsError || e["code"] != "path_denied" {
		t.Errorf("read of a hidden path: %v", m)
	}
}
