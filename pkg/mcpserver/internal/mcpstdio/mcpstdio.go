// Package mcpstdio is the Model Context Protocol server side over stdio:
// JSON-RPC 2.0, one message per line, as pkg/mcpserver needs it (tools,
// progress, logging). It replaces the MCP Go SDK in the shipped programs,
// whose package initialisation (encoding/gob, a JSON Schema library,
// net/http and its templates) cost every agentsh, agentjob and agentfs
// call about a millisecond and three megabytes of binary, whether or not
// it served MCP.
//
// What it speaks is what the SDK v1.8.0 server spoke to the same clients,
// checked by pkg/mcpserver's end-to-end tests that drive it with the
// official Go and JavaScript SDK clients: the versions 2024-11-05 to
// 2025-11-25 through initialize, and the 2026-07-28 per-request protocol
// (server/discover, the _meta triple on every call). Where the SDK broke
// the connection on bad input (a line that is not JSON, an id that is an
// object, an empty batch), this server answers the JSON-RPC error and
// reads on.
package mcpstdio

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Protocol versions, newest first. Versions from 2026-07-28 are per
// request (the version rides in each call's _meta); the older ones are
// negotiated once by initialize.
const (
	version20260728 = "2026-07-28"
	version20251125 = "2025-11-25"
	version20250618 = "2025-06-18"
)

// SupportedVersions are the protocol versions served, newest first.
var SupportedVersions = []string{version20260728, version20251125, version20250618, "2025-03-26", "2024-11-05"}

// JSON-RPC error codes (JSON-RPC 2.0 §5.1, and MCP's own).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
	// CodeUnsupportedProtocolVersion: a 2026-07-28 call named a version
	// this server does not speak; data lists the ones it does.
	CodeUnsupportedProtocolVersion = -32022
)

// _meta keys of the per-request protocol.
const (
	metaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	metaClientInfo         = "io.modelcontextprotocol/clientInfo"
	metaServerInfo         = "io.modelcontextprotocol/serverInfo"
)

// logLevels are MCP's logging levels (RFC 5424 severities), least severe
// first.
var logLevels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// Tool is one served tool as tools/list shows it.
type Tool struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	InputSchema map[string]any `json:"inputSchema"`
	Annotations map[string]any `json:"annotations,omitempty"`
}

// Result is a tool call's outcome.
type Result struct {
	Text       string
	Structured any
	IsError    bool
}

// Call is one tools/call being served.
type Call struct {
	Name      string
	Arguments json.RawMessage
	// HasProgress reports whether the client asked for progress
	// (params._meta.progressToken).
	HasProgress bool

	conn  *Conn
	token json.RawMessage
}

// Progress sends a progress notification for the call, if the client
// asked for progress; progress should grow from one call to the next.
func (c *Call) Progress(progress float64, message string) {
	if c.token == nil {
		return
	}
	c.conn.notify("notifications/progress", struct {
		Token    json.RawMessage `json:"progressToken"`
		Progress float64         `json:"progress"`
		Message  string          `json:"message,omitempty"`
	}{c.token, progress, message})
}

// Options describe the server.
type Options struct {
	Name, Version string
	Instructions  string
	Tools         []Tool
	// Handle runs a tool call; ctx ends when the client cancels the
	// call or the connection ends. It is called concurrently.
	Handle func(ctx context.Context, c *Call) Result
	// Log receives a line about protocol trouble (the server's stderr).
	Log func(format string, args ...any)
}

// Conn is one stdio connection.
type Conn struct {
	opts  Options
	tools map[string]bool

	// wsem is held by the write in progress (one message per write,
	// whole lines); done ends the waits for it when the connection ends,
	// so that an answer stuck in a write to a client that stopped
	// reading holds neither Serve nor the calls in flight.
	wsem     chan struct{}
	done     chan struct{}
	doneOnce sync.Once
	w        io.Writer
	closed   atomic.Bool // no more writes: the client hung up

	mu          sync.Mutex
	initialized bool   // initialize answered, or a per-request call seen
	version     string // negotiated by initialize ("" before)
	perRequest  bool   // the client speaks 2026-07-28
	logLevel    string // "" until logging/setLevel: no log messages
	inflight    map[string]*request
	calls       sync.WaitGroup
}

// request is a call being served, by its id.
type request struct {
	cancel    context.CancelFunc
	cancelled bool // by notifications/cancelled: its response is dropped
}

// New prepares a connection writing to w.
func New(w io.Writer, opts Options) *Conn {
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	c := &Conn{opts: opts, w: w, tools: map[string]bool{}, inflight: map[string]*request{},
		wsem: make(chan struct{}, 1), done: make(chan struct{})}
	for _, t := range opts.Tools {
		c.tools[t.Name] = true
	}
	return c
}

// eofWriteGrace is how long the answers to the messages read before the
// end of the input may take to be written before they are dropped.
const eofWriteGrace = 5 * time.Second

// Serve reads messages from r until it ends or ctx does, then cancels the
// calls in flight and waits for their handlers to return. The end of r is
// the client's normal goodbye and returns nil.
func (c *Conn) Serve(ctx context.Context, r io.Reader) error {
	connCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	lines := make(chan []byte)
	errc := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		// No limit on a line: a command carrying a 1 MiB heredoc is one
		// message. Memory is what the client sends in one line.
		br := bufio.NewReaderSize(r, 64<<10)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				select {
				case lines <- line:
				case <-stop:
					return
				}
			}
			if err != nil {
				errc <- err
				// The answers to what was read still go out, but a
				// client that hung up stdin and does not read stdout
				// must not keep the server writing to it: the loop
				// would never see the end and the calls in flight
				// would run on.
				select {
				case <-stop:
				case <-time.After(eofWriteGrace):
					c.doneOnce.Do(func() { close(c.done) })
				}
				return
			}
		}
	}()
	var err error
loop:
	for {
		select {
		case line := <-lines:
			c.handleLine(connCtx, line)
		case err = <-errc:
			break loop
		case <-ctx.Done():
			err = ctx.Err()
			break loop
		}
	}
	// The client is gone: calls in flight are cancelled and their
	// answers have nobody to go to.
	c.closed.Store(true)
	c.doneOnce.Do(func() { close(c.done) })
	cancel()
	c.calls.Wait()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// Log sends a notifications/message at level from logger, if the client
// has set a logging level and level is at or above it.
func (c *Conn) Log(level, logger string, data any) {
	c.mu.Lock()
	min := c.logLevel
	c.mu.Unlock()
	if min == "" || slices.Index(logLevels, level) < slices.Index(logLevels, min) {
		return
	}
	c.notify("notifications/message", struct {
		Level  string `json:"level"`
		Logger string `json:"logger,omitempty"`
		Data   any    `json:"data"`
	}{level, logger, data})
}

// message is one incoming JSON-RPC message, its members kept raw so that
// a missing member and a null one stay apart.
type message map[string]json.RawMessage

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *rpcError) Error() string { return e.Message }

func errorf(code int, format string, args ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// response is an outgoing JSON-RPC response.
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

var nullID = json.RawMessage("null")

func errorResponse(id json.RawMessage, e *rpcError) *response {
	if id == nil {
		id = nullID
	}
	return &response{JSONRPC: "2.0", ID: id, Error: e}
}

// reply receives a request's response exactly once: nil when there is
// none to send (the request was cancelled).
type reply func(*response)

func (c *Conn) handleLine(ctx context.Context, line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	if line[0] != '[' {
		c.handleMessage(ctx, line, func(r *response) { c.write(r) })
		return
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(line, &batch); err != nil {
		c.write(errorResponse(nil, errorf(CodeParseError, "parse error: %v", err)))
		return
	}
	if len(batch) == 0 {
		c.write(errorResponse(nil, errorf(CodeInvalidRequest, "invalid request: empty batch")))
		return
	}
	c.mu.Lock()
	version, perRequest := c.version, c.perRequest
	c.mu.Unlock()
	if perRequest {
		version = version20260728
	}
	if version >= version20250618 {
		c.write(errorResponse(nil, errorf(CodeInvalidRequest,
			"invalid request: JSON-RPC batching is not supported in %s and later (protocol version %s)", version20250618, version)))
		return
	}
	// The batch's answers go out together, once every request in it has
	// been answered (JSON-RPC 2.0 §6); notifications add none.
	b := &batchReply{c: c, pending: 1}
	for _, raw := range batch {
		b.mu.Lock()
		b.pending++
		b.mu.Unlock()
		c.handleMessage(ctx, raw, b.add)
	}
	b.add(nil) // the batch is all read
}

// batchReply collects a batch's responses.
type batchReply struct {
	c        *Conn
	mu       sync.Mutex
	pending  int // replies still due, plus one until the whole batch is read
	answered []*response
}

func (b *batchReply) add(r *response) {
	b.mu.Lock()
	if r != nil {
		b.answered = append(b.answered, r)
	}
	b.pending--
	done := b.pending == 0
	out := b.answered
	b.mu.Unlock()
	if done && len(out) > 0 {
		c := b.c
		c.writeValue(out)
	}
}

// handleMessage serves one message; reply is called once for every
// message except a valid notification or a response.
func (c *Conn) handleMessage(ctx context.Context, raw []byte, rep reply) {
	var m message
	if err := json.Unmarshal(raw, &m); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) || !json.Valid(raw) {
			rep(errorResponse(nil, errorf(CodeParseError, "parse error: %v", err)))
		} else {
			rep(errorResponse(nil, errorf(CodeInvalidRequest, "invalid request: a message is a JSON object")))
		}
		return
	}
	if m == nil {
		rep(errorResponse(nil, errorf(CodeInvalidRequest, "invalid request: a message is a JSON object")))
		return
	}
	idRaw, hasID := m["id"]
	id, idErr := checkID(idRaw)
	if hasID && idErr != nil {
		rep(errorResponse(nil, idErr))
		return
	}
	if v := string(m["jsonrpc"]); v != `"2.0"` {
		rep(errorResponse(id, errorf(CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`)))
		return
	}
	methodRaw, hasMethod := m["method"]
	if !hasMethod {
		if _, ok := m["result"]; ok && hasID {
			rep(nil) // a response to a request of ours: we send none
			return
		}
		if _, ok := m["error"]; ok && hasID {
			rep(nil)
			return
		}
		rep(errorResponse(id, errorf(CodeInvalidRequest, `invalid request: no "method"`)))
		return
	}
	var method string
	if err := json.Unmarshal(methodRaw, &method); err != nil {
		rep(errorResponse(id, errorf(CodeInvalidRequest, `invalid request: "method" must be a string`)))
		return
	}
	params := m["params"]
	if string(params) == "null" {
		params = nil
	}
	if params != nil && params[0] != '{' && params[0] != '[' {
		if hasID {
			rep(errorResponse(id, errorf(CodeInvalidParams, "invalid params: %q takes an object", method)))
		} else {
			rep(nil)
		}
		return
	}
	if !hasID {
		c.notification(method, params)
		rep(nil)
		return
	}
	c.request(ctx, id, method, params, rep)
}

// checkID accepts the ids MCP allows: a string or a number. Null is
// JSON-RPC's "unknown id" and MCP forbids it in requests.
func checkID(raw json.RawMessage) (json.RawMessage, *rpcError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, nil
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return raw, nil
		}
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		var n json.Number
		if json.Unmarshal(raw, &n) == nil {
			return raw, nil
		}
	}
	return nil, errorf(CodeInvalidRequest, "invalid request: an id is a string or a number, not %s", raw)
}

// idKey names a request id for the in-flight table: "1" and 1 are two
// ids, "a" spelled with an escape is still "a", and a number is its value,
// whatever its spelling (see numberKey).
func idKey(raw json.RawMessage) string {
	if raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return "s" + s
	}
	return "n" + numberKey(string(raw))
}

// numberKey is one spelling of a JSON number's value: 1, 1.0, 1e0 and
// 10E-1 are one id, as they are to a client whose numbers are doubles
// (JavaScript's, Python's json for 1.0). An integer written with digits
// only is its own key (exact beyond 2^53, where doubles are not; -0 is 0);
// any other number is the double it reads as, an integer one in integer
// digits, so that 2.0 is 2. A number no double holds keeps its text.
func numberKey(n string) string {
	digits := strings.TrimPrefix(n, "-")
	if digits != "" && strings.Trim(digits, "0123456789") == "" {
		if strings.Trim(digits, "0") == "" {
			return "0"
		}
		return n
	}
	f, err := strconv.ParseFloat(n, 64)
	if err != nil {
		return n
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func (c *Conn) notification(method string, params json.RawMessage) {
	switch method {
	case "notifications/cancelled":
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if params == nil || json.Unmarshal(params, &p) != nil {
			return
		}
		id, err := checkID(p.RequestID)
		if err != nil || id == nil {
			return
		}
		c.mu.Lock()
		if r := c.inflight[idKey(id)]; r != nil {
			r.cancelled = true
			r.cancel()
		}
		c.mu.Unlock()
	case "notifications/initialized", "notifications/roots/list_changed", "notifications/progress":
		// Nothing to do: calls are served from initialize on.
	default:
		// Unknown notifications are ignored (JSON-RPC: never answered).
	}
}

// perRequestMeta is a 2026-07-28 call's _meta triple.
type perRequestMeta struct {
	version string
}

// requestMeta finds the per-request protocol in a call's params._meta:
// nil when the call uses the negotiated one.
func requestMeta(params json.RawMessage) (*perRequestMeta, *rpcError) {
	if params == nil {
		return nil, nil
	}
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil || p.Meta == nil {
		return nil, nil
	}
	var v string
	if json.Unmarshal(p.Meta[metaProtocolVersion], &v) != nil || v < version20260728 {
		return nil, nil
	}
	if raw, ok := p.Meta[metaClientInfo]; ok && !isObject(raw) {
		return nil, errorf(CodeInvalidParams, "invalid _meta field %q", metaClientInfo)
	}
	if !isObject(p.Meta[metaClientCapabilities]) {
		return nil, errorf(CodeInvalidParams, "missing or invalid _meta field %q", metaClientCapabilities)
	}
	if !slices.Contains(SupportedVersions, v) {
		return nil, &rpcError{Code: CodeUnsupportedProtocolVersion, Message: "unsupported protocol version",
			Data: map[string]any{"supported": SupportedVersions, "requested": v}}
	}
	return &perRequestMeta{version: v}, nil
}

func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}

// removedPerRequest are the methods 2026-07-28 dropped: a call carrying
// that version's _meta may not use them.
var removedPerRequest = map[string]bool{"initialize": true, "ping": true, "logging/setLevel": true,
	"resources/subscribe": true, "resources/unsubscribe": true}

func (c *Conn) request(ctx context.Context, id json.RawMessage, method string, params json.RawMessage, rep reply) {
	meta, merr := requestMeta(params)
	if merr != nil {
		rep(errorResponse(id, merr))
		return
	}
	answer := func(res any, err *rpcError) {
		if err != nil {
			rep(errorResponse(id, err))
			return
		}
		if meta != nil {
			res = stampPerRequest(res, c.opts)
		}
		rep(&response{JSONRPC: "2.0", ID: id, Result: res})
	}
	switch {
	case meta != nil && removedPerRequest[method]:
		answer(nil, errorf(CodeMethodNotFound, "%q is not supported in protocol version %s", method, meta.version))
		return
	case method == "server/discover" && meta == nil:
		answer(nil, errorf(CodeMethodNotFound, "%q is only supported in protocol version %s and later", method, version20260728))
		return
	}
	c.mu.Lock()
	if meta != nil {
		c.initialized, c.perRequest = true, true
	}
	ready := c.initialized
	c.mu.Unlock()
	if !ready && method != "initialize" && method != "ping" {
		answer(nil, errorf(CodeInvalidRequest, "method %q is invalid during session initialization", method))
		return
	}
	switch method {
	case "initialize":
		answer(c.initialize(params))
	case "ping":
		answer(struct{}{}, nil)
	case "server/discover":
		answer(map[string]any{"supportedVersions": SupportedVersions, "capabilities": capabilities,
			"instructions": c.opts.Instructions, "ttlMs": 0, "cacheScope": "public"}, nil)
	case "logging/setLevel":
		answer(c.setLevel(params))
	case "tools/list":
		answer(c.listTools(params))
	case "resources/list":
		answer(map[string]any{"resources": []any{}, "ttlMs": 0, "cacheScope": "public"}, nil)
	case "resources/templates/list":
		answer(map[string]any{"resourceTemplates": []any{}, "ttlMs": 0, "cacheScope": "public"}, nil)
	case "prompts/list":
		answer(map[string]any{"prompts": []any{}, "ttlMs": 0, "cacheScope": "public"}, nil)
	case "tools/call":
		c.callTool(ctx, id, params, answer, rep)
	default:
		answer(nil, errorf(CodeMethodNotFound, "method not found: %q", method))
	}
}

// capabilities are what the server offers: tools and logging.
var capabilities = map[string]any{"logging": map[string]any{}, "tools": map[string]any{}}

// stampPerRequest marks a 2026-07-28 result: complete (no further round
// trip) and naming the server, as that version asks of every result but
// an empty one.
func stampPerRequest(res any, o Options) any {
	m, ok := res.(map[string]any)
	if !ok {
		return res
	}
	m["resultType"] = "complete"
	m["_meta"] = map[string]any{metaServerInfo: map[string]string{"name": o.Name, "version": o.Version}}
	return m
}

func (c *Conn) initialize(params json.RawMessage) (any, *rpcError) {
	var p struct {
		ProtocolVersion any `json:"protocolVersion"`
	}
	if params == nil {
		return nil, errorf(CodeInvalidParams, `invalid params: initialize needs "params"`)
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, errorf(CodeInvalidParams, "invalid params: %v", err)
	}
	asked, ok := p.ProtocolVersion.(string)
	if !ok {
		return nil, errorf(CodeInvalidParams, `invalid params: "protocolVersion" must be a string`)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.version != "" {
		return nil, errorf(CodeInvalidRequest, `duplicate "initialize" received`)
	}
	c.version = negotiate(asked)
	c.initialized = true
	return map[string]any{
		"protocolVersion": c.version,
		"capabilities":    capabilities,
		"serverInfo":      map[string]string{"name": c.opts.Name, "version": c.opts.Version},
		"instructions":    c.opts.Instructions,
	}, nil
}

// negotiate answers initialize's version: the client's when served,
// else the newest served through initialize (2026-07-28 is per request
// and never negotiated this way).
func negotiate(asked string) string {
	if slices.Contains(SupportedVersions, asked) && asked < version20260728 {
		return asked
	}
	return version20251125
}

func (c *Conn) setLevel(params json.RawMessage) (any, *rpcError) {
	var p struct {
		Level string `json:"level"`
	}
	if params == nil || json.Unmarshal(params, &p) != nil || !slices.Contains(logLevels, p.Level) {
		return nil, errorf(CodeInvalidParams, "invalid params: level must be one of %v", logLevels)
	}
	c.mu.Lock()
	c.logLevel = p.Level
	c.mu.Unlock()
	return struct{}{}, nil
}

func (c *Conn) listTools(params json.RawMessage) (any, *rpcError) {
	var p struct {
		Cursor *string `json:"cursor"`
	}
	if params != nil {
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, errorf(CodeInvalidParams, `invalid params: "cursor" must be a string`)
		}
	}
	// One page holds every tool, so no cursor was ever handed out.
	if p.Cursor != nil && *p.Cursor != "" {
		return nil, errorf(CodeInvalidParams, "invalid params: unknown cursor %q", *p.Cursor)
	}
	tools := c.opts.Tools
	if tools == nil {
		tools = []Tool{}
	}
	return map[string]any{"tools": tools, "ttlMs": 0, "cacheScope": "public"}, nil
}

func (c *Conn) callTool(ctx context.Context, id json.RawMessage, params json.RawMessage, answer func(any, *rpcError), rep reply) {
	var p struct {
		Name      *string         `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Meta      struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	if params == nil {
		answer(nil, errorf(CodeInvalidParams, `invalid params: tools/call needs "params"`))
		return
	}
	if err := json.Unmarshal(params, &p); err != nil {
		answer(nil, errorf(CodeInvalidParams, "invalid params: %v", err))
		return
	}
	if p.Name == nil {
		answer(nil, errorf(CodeInvalidParams, `invalid params: tools/call needs a "name"`))
		return
	}
	if !c.tools[*p.Name] {
		answer(nil, errorf(CodeInvalidParams, "unknown tool %q", *p.Name))
		return
	}
	token := p.Meta.ProgressToken
	if string(token) == "null" {
		token = nil
	}
	if token != nil {
		if _, err := checkID(token); err != nil {
			answer(nil, errorf(CodeInvalidParams, "invalid params: a progress token is a string or a number"))
			return
		}
	}
	key := idKey(id)
	callCtx, cancel := context.WithCancel(ctx)
	r := &request{cancel: cancel}
	c.mu.Lock()
	if c.inflight[key] != nil {
		c.mu.Unlock()
		cancel()
		answer(nil, errorf(CodeInvalidRequest, "invalid request: id %s is already in use by a call in flight", id))
		return
	}
	c.inflight[key] = r
	c.calls.Add(1)
	c.mu.Unlock()
	call := &Call{Name: *p.Name, Arguments: p.Arguments, HasProgress: token != nil, conn: c, token: token}
	go func() {
		defer c.calls.Done()
		defer cancel()
		res := c.run(callCtx, call)
		c.mu.Lock()
		delete(c.inflight, key)
		dropped := r.cancelled
		c.mu.Unlock()
		if dropped {
			// The client cancelled it and expects no answer (MCP
			// cancellation: the receiver SHOULD NOT respond).
			rep(nil)
			return
		}
		out := map[string]any{"content": []any{map[string]string{"type": "text", "text": res.Text}}}
		if res.Structured != nil {
			out["structuredContent"] = res.Structured
		}
		if res.IsError {
			out["isError"] = true
		}
		answer(out, nil)
	}()
}

// run calls the handler, turning a panic into a tool error rather than
// the end of every call on the connection.
func (c *Conn) run(ctx context.Context, call *Call) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			c.opts.Log("tool %s panicked: %v", call.Name, p)
			res = Result{Text: fmt.Sprintf("%s: internal error: %v", call.Name, p), IsError: true}
		}
	}()
	return c.opts.Handle(ctx, call)
}

func (c *Conn) notify(method string, params any) {
	c.writeValue(struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  any    `json:"params"`
	}{"2.0", method, params})
}

func (c *Conn) write(r *response) {
	if r != nil {
		c.writeValue(r)
	}
}

// writeValue writes one message as one line. Writes are serialized, so
// lines never interleave; a client that stops reading blocks the writer
// (the pipe's back-pressure), not the reading of its cancellations.
func (c *Conn) writeValue(v any) {
	b, err := marshal(v)
	if err != nil {
		c.opts.Log("cannot encode a message: %v", err)
		b, _ = marshal(errorResponse(nil, errorf(CodeInternalError, "internal error: cannot encode the answer: %v", err)))
	}
	b = append(b, '\n')
	select {
	case c.wsem <- struct{}{}:
	case <-c.done:
		return
	}
	if c.closed.Load() {
		<-c.wsem
		return
	}
	// The write runs on its own, holding wsem until it returns: a write
	// blocked on a client that stopped reading then keeps only itself
	// waiting once the connection has ended.
	written := make(chan struct{})
	go func() {
		defer close(written)
		defer func() { <-c.wsem }()
		if _, err := c.w.Write(b); err != nil {
			c.closed.Store(true)
			c.opts.Log("cannot write to the client: %v", err)
		}
	}()
	select {
	case <-written:
	case <-c.done:
	}
}

// marshal encodes without HTML escaping: results carry command output.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
