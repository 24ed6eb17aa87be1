package mcpstdio

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// bound is how long a test waits for something that must happen.
const bound = 30 * time.Second

// peer is the client side of one connection under test.
type peer struct {
	t     *testing.T
	in    *io.PipeWriter // what the server reads
	out   *io.PipeReader // what the server writes
	lines chan string
	done  chan error // Serve's return
}

// tools: "echo" answers its arguments; "block" waits for its context and
// reports that it saw the end; "panic" panics; "progress" sends progress.
func newPeer(t *testing.T, handle func(ctx context.Context, c *Call) Result) *peer {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &peer{t: t, in: inW, out: outR, lines: make(chan string, 1024), done: make(chan error, 1)}
	if handle == nil {
		handle = func(ctx context.Context, c *Call) Result {
			return Result{Text: "echo", Structured: json.RawMessage(c.Arguments)}
		}
	}
	conn := New(outW, Options{Name: "test", Version: "1", Instructions: "be nice",
		Tools:  []Tool{{Name: "echo", InputSchema: map[string]any{"type": "object"}}, {Name: "block", InputSchema: map[string]any{"type": "object"}}},
		Handle: handle})
	go func() { p.done <- conn.Serve(context.Background(), inR); outW.Close() }()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	return p
}

func (p *peer) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		p.t.Fatalf("send: %v", err)
	}
}

// next is the next line the server wrote, as JSON.
func (p *peer) next() map[string]any {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatal("the server closed its output")
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			p.t.Fatalf("not one JSON object per line: %q: %v", l, err)
		}
		return m
	case <-time.After(bound):
		p.t.Fatal("no message from the server")
	}
	return nil
}

func (p *peer) nextRaw() string {
	p.t.Helper()
	select {
	case l := <-p.lines:
		return l
	case <-time.After(bound):
		p.t.Fatal("no message from the server")
	}
	return ""
}

func (p *peer) initialize(version string) map[string]any {
	p.t.Helper()
	p.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"` + version + `","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	m := p.next()
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return m
}

// pingFence proves that nothing was answered before it: the next line
// is the answer to this ping.
func (p *peer) pingFence(id string) {
	p.t.Helper()
	p.send(`{"jsonrpc":"2.0","id":"` + id + `","method":"ping"}`)
	m := p.next()
	if m["id"] != id || m["result"] == nil {
		p.t.Fatalf("expected the answer to ping %s, got %v", id, m)
	}
}

func errCode(m map[string]any) int {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(float64)
	return int(c)
}

func TestBeforeInitialize(t *testing.T) {
	p := newPeer(t, nil)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if m := p.next(); errCode(m) != CodeInvalidRequest || m["id"] != float64(1) {
		t.Fatalf("tools/list before initialize: %v", m)
	}
	p.pingFence("before")
	p.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo"}}`)
	if m := p.next(); errCode(m) != CodeInvalidRequest {
		t.Fatalf("tools/call before initialize: %v", m)
	}
	m := p.initialize("2025-03-26")
	r, _ := m["result"].(map[string]any)
	if r["protocolVersion"] != "2025-03-26" || r["instructions"] != "be nice" ||
		fmt.Sprint(r["serverInfo"]) != "map[name:test version:1]" || fmt.Sprint(r["capabilities"]) != "map[logging:map[] tools:map[]]" {
		t.Fatalf("initialize: %v", m)
	}
	p.pingFence("after")
	p.send(`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}`)
	if m := p.next(); errCode(m) != CodeInvalidRequest {
		t.Fatalf("a second initialize: %v", m)
	}
}

func TestVersionNegotiation(t *testing.T) {
	for _, c := range []struct {
		asked any
		want  string
		code  int
	}{
		{"2024-11-05", "2024-11-05", 0},
		{"2025-03-26", "2025-03-26", 0},
		{"2025-06-18", "2025-06-18", 0},
		{"2025-11-25", "2025-11-25", 0},
		// 2026-07-28 is per request; through initialize the newest
		// initialize version answers, as the SDK does.
		{"2026-07-28", "2025-11-25", 0},
		{"1999-01-01", "2025-11-25", 0},
		{"2099-01-01", "2025-11-25", 0},
		{5, "", CodeInvalidParams},
		{nil, "", CodeInvalidParams},
	} {
		p := newPeer(t, nil)
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{"protocolVersion": c.asked}})
		p.send(string(b))
		m := p.next()
		r, _ := m["result"].(map[string]any)
		if errCode(m) != c.code || c.code == 0 && r["protocolVersion"] != c.want {
			t.Errorf("asked %v: %v", c.asked, m)
		}
	}
	p := newPeer(t, nil)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"initialize"}`)
	if m := p.next(); errCode(m) != CodeInvalidParams {
		t.Errorf("initialize without params: %v", m)
	}
}

// TestHostileMessages: every malformed message gets its JSON-RPC error
// (or, for a notification or a response, nothing), and the connection
// goes on serving.
func TestHostileMessages(t *testing.T) {
	p := newPeer(t, nil)
	p.initialize("2025-03-26")
	for i, c := range []struct {
		line string
		code int    // 0: no answer at all
		id   string // the id the answer must carry, as JSON
	}{
		{`not json`, CodeParseError, `null`},
		{`{"jsonrpc":"2.0","id":1,"method":"ping"`, CodeParseError, `null`},
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}}`, CodeParseError, `null`},
		{`"a string"`, CodeInvalidRequest, `null`},
		{`42`, CodeInvalidRequest, `null`},
		{`null`, CodeInvalidRequest, `null`},
		{`{}`, CodeInvalidRequest, `null`},
		{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, CodeInvalidRequest, `null`},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, CodeInvalidRequest, `null`},
		{`{"jsonrpc":"2.0","id":[1],"method":"ping"}`, CodeInvalidRequest, `null`},
		{`{"jsonrpc":"2.0","id":true,"method":"ping"}`, CodeInvalidRequest, `null`},
		{`{"jsonrpc":"1.0","id":5,"method":"ping"}`, CodeInvalidRequest, `5`},
		{`{"id":6,"method":"ping"}`, CodeInvalidRequest, `6`},
		{`{"jsonrpc":"2.0","id":7,"method":5}`, CodeInvalidRequest, `7`},
		{`{"jsonrpc":"2.0","id":8}`, CodeInvalidRequest, `8`},
		{`{"jsonrpc":"2.0","id":9,"method":"bogus"}`, CodeMethodNotFound, `9`},
		{`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":"x"}`, CodeInvalidParams, `10`},
		{`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":5}`, CodeInvalidParams, `11`},
		{`{"jsonrpc":"2.0","id":12,"method":"tools/call"}`, CodeInvalidParams, `12`},
		{`{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"nope"}}`, CodeInvalidParams, `13`},
		{`{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":5}}`, CodeInvalidParams, `14`},
		{`{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"arguments":{}}}`, CodeInvalidParams, `15`},
		{`{"jsonrpc":"2.0","id":16,"method":"tools/list","params":{"cursor":5}}`, CodeInvalidParams, `16`},
		{`{"jsonrpc":"2.0","id":17,"method":"tools/list","params":{"cursor":"never-issued"}}`, CodeInvalidParams, `17`},
		{`{"jsonrpc":"2.0","id":18,"method":"logging/setLevel","params":{"level":"loud"}}`, CodeInvalidParams, `18`},
		{`{"jsonrpc":"2.0","id":19,"method":"logging/setLevel"}`, CodeInvalidParams, `19`},
		{`{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"echo","_meta":{"progressToken":{"x":1}}}}`, CodeInvalidParams, `20`},
		{`{"jsonrpc":"2.0","id":21,"method":"server/discover"}`, CodeMethodNotFound, `21`},
		// A notification's name with an id is a request, and there is
		// no such method: it is answered, not silently dropped.
		{`{"jsonrpc":"2.0","id":22,"method":"notifications/initialized"}`, CodeMethodNotFound, `22`},
		// Ids are echoed exactly as sent.
		{`{"jsonrpc":"2.0","id":1.5,"method":"bogus"}`, CodeMethodNotFound, `1.5`},
		{`{"jsonrpc":"2.0","id":12345678901234567890123,"method":"bogus"}`, CodeMethodNotFound, `12345678901234567890123`},
		{`{"jsonrpc":"2.0","id":-0,"method":"bogus"}`, CodeMethodNotFound, `-0`},
		{`{"jsonrpc":"2.0","id":"\u0041b","method":"bogus"}`, CodeMethodNotFound, `"\u0041b"`},
		{`{"jsonrpc":"2.0","id":"","method":"bogus"}`, CodeMethodNotFound, `""`},
		// Nothing to answer: notifications (known or not, well formed
		// or not) and responses to requests the server never sent.
		{`{"jsonrpc":"2.0","method":"notifications/whatever","params":{"a":1}}`, 0, ``},
		{`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":999}}`, 0, ``},
		{`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":{"x":1}}}`, 0, ``},
		{`{"jsonrpc":"2.0","method":"notifications/cancelled","params":"junk"}`, 0, ``},
		{`{"jsonrpc":"2.0","method":"notifications/cancelled"}`, 0, ``},
		{`{"jsonrpc":"2.0","id":99,"result":{}}`, 0, ``},
		{`{"jsonrpc":"2.0","id":98,"error":{"code":1,"message":"no"}}`, 0, ``},
		{``, 0, ``},
		{`   `, 0, ``},
	} {
		p.send(c.line)
		if c.code == 0 {
			p.pingFence(fmt.Sprint("fence", i))
			continue
		}
		raw := p.nextRaw()
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatalf("%s: answer %q is not JSON", c.line, raw)
		}
		var e rpcError
		_ = json.Unmarshal(m["error"], &e)
		if e.Code != c.code || string(m["id"]) != c.id || string(m["jsonrpc"]) != `"2.0"` || e.Message == "" {
			t.Errorf("%s: answer %s, want code %d id %s", c.line, raw, c.code, c.id)
		}
	}
	p.pingFence("end") // still serving
}

func TestPerRequestProtocol(t *testing.T) {
	p := newPeer(t, nil)
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"0"}}`
	p.send(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + meta + `}}`)
	m := p.next()
	r, _ := m["result"].(map[string]any)
	if fmt.Sprint(r["supportedVersions"]) != fmt.Sprint(SupportedVersions) || r["resultType"] != "complete" || r["instructions"] != "be nice" ||
		!strings.Contains(fmt.Sprint(r["_meta"]), "name:test") {
		t.Fatalf("discover: %v", m)
	}
	// No initialize: every call carries the version.
	p.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{` + meta + `}}`)
	m = p.next()
	r, _ = m["result"].(map[string]any)
	if tl, _ := r["tools"].([]any); len(tl) != 2 || r["resultType"] != "complete" {
		t.Fatalf("tools/list: %v", m)
	}
	p.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"a":1},` + meta + `}}`)
	m = p.next()
	r, _ = m["result"].(map[string]any)
	if fmt.Sprint(r["structuredContent"]) != "map[a:1]" || r["resultType"] != "complete" {
		t.Fatalf("tools/call: %v", m)
	}
	for _, c := range []struct {
		line string
		code int
	}{
		{`{"jsonrpc":"2.0","id":4,"method":"ping","params":{` + meta + `}}`, CodeMethodNotFound},
		{`{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":"2025-03-26",` + meta + `}}`, CodeMethodNotFound},
		{`{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, CodeInvalidParams},
		{`{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":"me"}}}`, CodeInvalidParams},
		{`{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}`, CodeUnsupportedProtocolVersion},
		{`[{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{` + meta + `}}]`, CodeInvalidRequest},
	} {
		p.send(c.line)
		if m := p.next(); errCode(m) != c.code {
			t.Errorf("%s: %v, want %d", c.line, m, c.code)
		} else if c.code == CodeUnsupportedProtocolVersion && !strings.Contains(fmt.Sprint(m["error"]), "2025-11-25") {
			t.Errorf("the unsupported version error does not list the versions: %v", m)
		}
	}
}

func TestBatches(t *testing.T) {
	p := newPeer(t, nil)
	// Before initialize and in 2025-03-26, batches are JSON-RPC's.
	p.send(`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`)
	raw := p.nextRaw()
	var arr []map[string]any
	if err := json.Unmarshal([]byte(raw), &arr); err != nil || len(arr) != 2 {
		t.Fatalf("batch answer %s", raw)
	}
	p.send(`[]`)
	if m := p.next(); errCode(m) != CodeInvalidRequest {
		t.Fatalf("empty batch: %v", m)
	}
	p.send(`[1,2`)
	if m := p.next(); errCode(m) != CodeParseError {
		t.Fatalf("broken batch: %v", m)
	}
	p.send(`[{"jsonrpc":"2.0","method":"notifications/x"}]`)
	p.pingFence("notifications only: no answer")
	p.initialize("2025-03-26")
	p.send(`[{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"n":3}}},5,{"jsonrpc":"2.0","id":4,"method":"bogus"}]`)
	raw = p.nextRaw()
	arr = nil
	if err := json.Unmarshal([]byte(raw), &arr); err != nil || len(arr) != 3 {
		t.Fatalf("mixed batch answer %s", raw)
	}
	codes := map[int]bool{}
	for _, a := range arr {
		codes[errCode(a)] = true
	}
	if !codes[0] || !codes[CodeInvalidRequest] || !codes[CodeMethodNotFound] {
		t.Fatalf("mixed batch answer %s", raw)
	}
	// From 2025-06-18 on, batching is gone: one error, and the
	// connection goes on.
	q := newPeer(t, nil)
	q.initialize("2025-06-18")
	q.send(`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`)
	if m := q.next(); errCode(m) != CodeInvalidRequest || m["id"] != nil {
		t.Fatalf("batch in 2025-06-18: %v", m)
	}
	q.pingFence("after")
}

// TestHugeLine: a message far larger than any buffer arrives whole.
func TestHugeLine(t *testing.T) {
	p := newPeer(t, nil)
	p.initialize("2025-11-25")
	big := strings.Repeat("0123456789abcdef", 1<<18) // 4 MiB
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"s":"` + big + `"}}}`)
	m := p.next()
	r, _ := m["result"].(map[string]any)
	s, _ := r["structuredContent"].(map[string]any)
	if s["s"] != big {
		t.Fatalf("the 4 MiB argument came back with %d bytes", len(fmt.Sprint(s["s"])))
	}
}

// blocker is a handler whose "block" calls wait for their context.
type blocker struct {
	started chan string   // the call's first argument, when it runs
	ended   chan string   // when it has seen its context end
	release chan struct{} // closed: blocked calls return normally
}

func newBlocker() *blocker {
	return &blocker{started: make(chan string, 1024), ended: make(chan string, 1024), release: make(chan struct{})}
}

func (b *blocker) handle(ctx context.Context, c *Call) Result {
	var a struct{ N string }
	_ = json.Unmarshal(c.Arguments, &a)
	if c.Name != "block" {
		return Result{Text: "ok " + a.N}
	}
	b.started <- a.N
	select {
	case <-ctx.Done():
		b.ended <- a.N
		return Result{Text: "cancelled " + a.N, IsError: true}
	case <-b.release:
		return Result{Text: "released " + a.N}
	}
}

func recv(t *testing.T, ch chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(bound):
		t.Fatal("timed out")
	}
	return ""
}

func TestDuplicateInflightID(t *testing.T) {
	b := newBlocker()
	p := newPeer(t, b.handle)
	p.initialize("2025-11-25")
	p.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"block","arguments":{"n":"first"}}}`)
	recv(t, b.started)
	p.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"block","arguments":{"n":"second"}}}`)
	if m := p.next(); errCode(m) != CodeInvalidRequest || m["id"] != float64(7) {
		t.Fatalf("duplicate id: %v", m)
	}
	// "7" is another id than 7.
	p.send(`{"jsonrpc":"2.0","id":"7","method":"tools/call","params":{"name":"block","arguments":{"n":"third"}}}`)
	recv(t, b.started)
	close(b.release)
	got := map[any]bool{}
	for range 2 {
		m := p.next()
		got[m["id"]] = true
		if m["error"] != nil {
			t.Fatalf("%v", m)
		}
	}
	if !got[float64(7)] || !got["7"] {
		t.Fatalf("answers %v", got)
	}
	// Once answered, the id is free again.
	p.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
	if m := p.next(); m["result"] == nil {
		t.Fatalf("id reused after its answer: %v", m)
	}
}

func TestCancel(t *testing.T) {
	b := newBlocker()
	p := newPeer(t, b.handle)
	p.initialize("2025-11-25")
	p.send(`{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"block","arguments":{"n":"c1"}}}`)
	recv(t, b.started)
	p.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c1","reason":"user"}}`)
	if n := recv(t, b.ended); n != "c1" {
		t.Fatalf("ended %s", n)
	}
	// A cancelled call is not answered: the next line is the fence.
	p.pingFence("after-cancel")
	// Cancelling a finished or unknown call is a no-op.
	p.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c1"}}`)
	p.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":12345}}`)
	p.pingFence("after-unknown")
}

// TestCallRacesCancel sends calls each immediately followed by its
// cancellation: whichever wins, each call ends, gets at most one answer,
// and nothing deadlocks (run with -race).
func TestCallRacesCancel(t *testing.T) {
	var running atomic.Int32
	p := newPeer(t, func(ctx context.Context, c *Call) Result {
		running.Add(1)
		defer running.Add(-1)
		if c.Name == "block" {
			<-ctx.Done()
		}
		return Result{Text: "done"}
	})
	p.initialize("2025-11-25")
	const n = 200
	for i := range n {
		tool := "block"
		if i%2 == 0 {
			tool = "echo" // may finish before its cancel arrives
		}
		p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q}}`, i, tool))
		p.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, i))
	}
	p.send(`{"jsonrpc":"2.0","id":"fence","method":"ping"}`)
	seen := map[any]int{}
	for {
		m := p.next()
		if m["id"] == "fence" {
			break
		}
		seen[m["id"]]++
		if seen[m["id"]] > 1 {
			t.Fatalf("two answers for %v", m["id"])
		}
	}
	p.in.Close()
	if err := waitErr(t, p.done); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if r := running.Load(); r != 0 {
		t.Fatalf("%d handlers still running after Serve returned", r)
	}
}

func waitErr(t *testing.T, ch chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(bound):
		t.Fatal("Serve did not return")
	}
	return nil
}

// TestEOFMidCall: the client closes stdin while calls run; their
// contexts end, Serve waits for them and returns nil, and none is
// answered.
func TestEOFMidCall(t *testing.T) {
	b := newBlocker()
	p := newPeer(t, b.handle)
	p.initialize("2025-11-25")
	for i := range 3 {
		p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"block","arguments":{"n":"%d"}}}`, i, i))
		recv(t, b.started)
	}
	p.in.Close()
	for range 3 {
		recv(t, b.ended)
	}
	if err := waitErr(t, p.done); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if l, ok := <-p.lines; ok {
		t.Fatalf("answered after EOF: %s", l)
	}
}

// TestConcurrentCalls: calls run at the same time, and their many
// progress notifications and answers come out as whole lines.
func TestConcurrentCalls(t *testing.T) {
	const n = 20
	var wg sync.WaitGroup
	wg.Add(n)
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	p := newPeer(t, func(ctx context.Context, c *Call) Result {
		wg.Done()
		select {
		case <-all: // every call is running at once
		case <-ctx.Done():
			return Result{}
		}
		for i := range 50 {
			c.Progress(float64(i+1), strings.Repeat("x", 1000))
		}
		return Result{Text: strings.Repeat("y", 100000), Structured: map[string]any{"ok": true}}
	})
	p.initialize("2025-11-25")
	for i := range n {
		p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","_meta":{"progressToken":"t%d"}}}`, i, i))
	}
	answers, progress := 0, map[string]int{}
	for answers < n {
		m := p.next()
		if m["method"] == "notifications/progress" {
			pr := m["params"].(map[string]any)
			tok := pr["progressToken"].(string)
			progress[tok]++
			if pr["progress"] != float64(progress[tok]) {
				t.Fatalf("progress out of order: %v", pr)
			}
			continue
		}
		if m["result"] == nil {
			t.Fatalf("%v", m)
		}
		answers++
	}
	for i := range n {
		if progress[fmt.Sprint("t", i)] != 50 {
			t.Fatalf("progress %v", progress)
		}
	}
}

// TestClientNeverReads: with stdout never read, the writer blocks (the
// pipe's back-pressure), but reading goes on: a cancellation still
// reaches its call. Once the client goes away for good, Serve returns.
func TestClientNeverReads(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe() // nobody reads outR
	b := newBlocker()
	conn := New(outW, Options{Name: "t", Tools: []Tool{{Name: "block"}, {Name: "echo"}}, Handle: b.handle})
	done := make(chan error, 1)
	go func() { done <- conn.Serve(context.Background(), inR) }()
	write := func(s string) {
		t.Helper()
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	// Initialize is answered in line, and nobody reads the answer.
	write(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`)
	// Wait until initialize has been taken: the server is then blocked
	// writing its answer, since nobody reads.
	deadline := time.Now().Add(bound)
	for {
		conn.mu.Lock()
		ready := conn.initialized
		conn.mu.Unlock()
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("initialize not taken")
		}
		time.Sleep(time.Millisecond) // polling a flag: no event to wait on
	}
	outR.Close() // the client is gone: writes fail, nothing blocks
	write(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"n":"x"}}}`)
	recv(t, b.started)
	write(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	recv(t, b.ended)
	inW.Close()
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
}

// TestCancelWhileOutputBlocked: a call blocked writing a big answer to a
// client that does not read does not keep the server from reading the
// cancellation of another call.
func TestCancelWhileOutputBlocked(t *testing.T) {
	c := blockedConn(t)
	b, write, inW, sc, done := c.b, c.write, c.in, c.out, c.done
	// Now stop reading: this echo's answer blocks in the writer.
	write(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"n":"y"}}}`)
	write(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	if n := recv(t, b.ended); n != "x" {
		t.Fatal(n)
	}
	// Reading again unblocks the echo's answer.
	line, err := sc.ReadString('\n')
	if err != nil || !strings.Contains(line, `"id":2`) {
		t.Fatalf("%q %v", line, err)
	}
	inW.Close()
	go io.Copy(io.Discard, sc)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
}

func TestLogging(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	conn := New(outW, Options{Name: "t"})
	go func() { _ = conn.Serve(context.Background(), inR) }()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	lines := bufio.NewReader(outR)
	roundTrip := func(s string) string {
		t.Helper()
		go io.WriteString(inW, s+"\n")
		l, err := lines.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	roundTrip(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`)
	// No level set: no messages (the SDK's reading of the spec).
	conn.Log("emergency", "x", "dropped")
	roundTrip(`{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"warning"}}`)
	conn.Log("info", "x", "below the level")
	go conn.Log("error", "agentjob", map[string]any{"event": "failed"})
	l, err := lines.ReadString('\n')
	if err != nil || !strings.Contains(l, `"method":"notifications/message"`) || !strings.Contains(l, `"level":"error"`) ||
		!strings.Contains(l, `"logger":"agentjob"`) || !strings.Contains(l, `"event":"failed"`) {
		t.Fatalf("%q %v", l, err)
	}
}

func TestHandlerPanic(t *testing.T) {
	p := newPeer(t, func(ctx context.Context, c *Call) Result { panic("boom") })
	p.initialize("2025-11-25")
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`)
	m := p.next()
	r, _ := m["result"].(map[string]any)
	if r["isError"] != true {
		t.Fatalf("%v", m)
	}
	p.pingFence("alive")
}

func TestProgressToken(t *testing.T) {
	p := newPeer(t, func(ctx context.Context, c *Call) Result {
		c.Progress(1, "one")
		return Result{Text: fmt.Sprint(c.HasProgress)}
	})
	p.initialize("2025-11-25")
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"progressToken":17}}}`)
	raw := p.nextRaw()
	if !strings.Contains(raw, `"progressToken":17`) || !strings.Contains(raw, `"progress":1`) {
		t.Fatalf("progress %s", raw)
	}
	if m := p.next(); !strings.Contains(fmt.Sprint(m["result"]), "text:true") {
		t.Fatalf("%v", m)
	}
	p.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo"}}`)
	if m := p.next(); m["id"] != float64(2) || !strings.Contains(fmt.Sprint(m["result"]), "text:false") {
		t.Fatalf("without a token: %v", m)
	}
}

// enteredWriter tells, before each write, what it is about to write.
type enteredWriter struct {
	w       io.Writer
	entered chan string
}

func (e *enteredWriter) Write(b []byte) (int, error) {
	e.entered <- string(b)
	return e.w.Write(b)
}

// blockedClient is the client side of a connection that has been
// initialized and has call 1 (block "x") running.
type blockedClient struct {
	b       *blocker
	entered chan string    // what the server is about to write, as it starts each write
	write   func(string)   // sends a line
	in      io.WriteCloser // the client's end of stdin
	out     *bufio.Reader  // the server's stdout, read only when the test says so
	done    chan error     // Serve's result
}

// blockedConn serves a connection and brings it to where blockedClient
// says.
func blockedConn(t *testing.T) *blockedClient {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	t.Cleanup(func() { outR.Close() })
	c := &blockedClient{b: newBlocker(), entered: make(chan string, 16), in: inW, out: bufio.NewReader(outR), done: make(chan error, 1)}
	conn := New(&enteredWriter{w: outW, entered: c.entered}, Options{Name: "t", Tools: []Tool{{Name: "block"}, {Name: "echo"}}, Handle: c.b.handle})
	go func() { c.done <- conn.Serve(context.Background(), inR) }()
	c.write = func(s string) {
		t.Helper()
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	c.write(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`)
	recv(t, c.entered)
	if _, err := c.out.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	c.write(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"n":"x"}}}`)
	recv(t, c.b.started)
	return c
}

// TestEOFWhileWriteBlocked: the client closes stdin while it no longer
// reads stdout (it keeps the pipe open) and a call runs. The call is
// cancelled and Serve returns: an answer stuck in the writer must not
// keep the server from ending the calls in flight, which would leave
// their commands running for as long as the host lives. The answer stuck
// is another call's (written by its handler) or a ping's (written by the
// reading loop as it reads).
func TestEOFWhileWriteBlocked(t *testing.T) {
	for _, tc := range []struct{ name, msg string }{
		{"call", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"n":"y"}}}`},
		{"ping", `{"jsonrpc":"2.0","id":2,"method":"ping"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := blockedConn(t)
			c.write(tc.msg)
			if s := recv(t, c.entered); !strings.Contains(s, `"id":2`) {
				t.Fatalf("wrote %q", s)
			}
			c.in.Close()
			if n := recv(t, c.b.ended); n != "x" {
				t.Fatal(n)
			}
			if err := waitErr(t, c.done); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestNumericIDValue matches numeric ids by value, as a client whose
// numbers are doubles sees them: a cancel spelled 1.0 cancels the call
// with id 1, and 7.0 is in use while 7 is in flight; the answer keeps the
// id as the call spelled it.
func TestNumericIDValue(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"1", "1.0"}, {"1", "1e0"}, {"1", "10E-1"}, {"0", "-0"}, {"0", "-0.0"}, {"-3", "-3.00"},
		{"9007199254740993", "9007199254740993"}, {"0.5", "5e-1"},
	} {
		if numberKey(c.a) != numberKey(c.b) {
			t.Errorf("%s and %s differ: %s, %s", c.a, c.b, numberKey(c.a), numberKey(c.b))
		}
	}
	for _, c := range []struct{ a, b string }{
		{"1", "2"}, {"9007199254740993", "9007199254740992"}, {"0.5", "0.25"}, {"1", "-1"}, {"1e400", "2e400"},
	} {
		if numberKey(c.a) == numberKey(c.b) {
			t.Errorf("%s and %s are one id: %s", c.a, c.b, numberKey(c.a))
		}
	}

	b := newBlocker()
	p := newPeer(t, b.handle)
	p.initialize("2025-11-25")
	p.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"n":"one"}}}`)
	recv(t, b.started)
	p.send(`{"jsonrpc":"2.0","id":1.0,"method":"tools/call","params":{"name":"block","arguments":{"n":"again"}}}`)
	if m := p.next(); errCode(m) != CodeInvalidRequest || m["id"] != float64(1) {
		t.Fatalf("1.0 while 1 is in flight: %v", m)
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1e0}}`)
	if n := recv(t, b.ended); n != "one" {
		t.Fatalf("ended %s", n)
	}
	p.pingFence("after-cancel")
}
