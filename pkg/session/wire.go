package session

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/state"
)

// The wire between client and server: one JSON object per line on the
// session's Unix socket. The client's first message names the operation
// and carries the session secret; the server checks the secret and the
// peer's credentials (see auth_linux.go) before it does anything.
type message struct {
	Op      string          `json:"op,omitempty"` // client: run, cancel, stop, status
	Token   string          `json:"token,omitempty"`
	Call    *CallRequest    `json:"call,omitempty"`
	Signal  int             `json:"signal,omitempty"` // cancel: the signal the caller got
	Type    string          `json:"type,omitempty"`   // server: stdout, stderr, output, result, error, stopped, status
	Data    string          `json:"data,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *wireError      `json:"error,omitempty"`
	Started *int            `json:"started,omitempty"` // pid of the shell, when the call begins
}

// reply is what a client reads from the server: message's server fields
// alone. encoding/json builds the encoders of every field of a struct it
// decodes into, so decoding into message would reflect on CallRequest and
// all it reaches, in each client process; TestReplyFields keeps the two
// alike.
type reply struct {
	Type    string          `json:"type,omitempty"`
	Data    string          `json:"data,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *wireError      `json:"error,omitempty"`
	Started *int            `json:"started,omitempty"`
}

// parseReply reads one line from the server as json.Unmarshal into reply
// would (ok false where it would fail), with gjson: a call's client then
// decodes nothing with encoding/json (but an error's details), whose first
// use in a process is 0.3 to 0.5 ms of code and decoders touched for the
// first time. TestParseReply holds it to json.Unmarshal.
func parseReply(line []byte) (reply, bool) {
	var r reply
	if !gjson.ValidBytes(line) {
		return r, false
	}
	v := gjson.ParseBytes(line)
	if !v.IsObject() {
		return r, v.Type == gjson.Null
	}
	ok := true
	str := func(key string, dst *string) {
		switch f := v.Get(key); f.Type {
		case gjson.String:
			*dst = f.Str
		case gjson.Null:
		default:
			if f.Exists() {
				ok = false
			}
		}
	}
	str("type", &r.Type)
	str("data", &r.Data)
	if f := v.Get("result"); f.Exists() {
		r.Result = json.RawMessage(f.Raw)
	}
	if f := v.Get("started"); f.Exists() && f.Type != gjson.Null {
		n, err := strconv.Atoi(f.Raw)
		if f.Type != gjson.Number || err != nil {
			return reply{}, false
		}
		r.Started = &n
	}
	if f := v.Get("error"); f.Exists() && f.Type != gjson.Null {
		var e wireError
		if err := json.Unmarshal([]byte(f.Raw), &e); err != nil {
			return reply{}, false
		}
		r.Error = &e
	}
	if !ok {
		return reply{}, false
	}
	return r, true
}

type wireError struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

func toWire(err error) *wireError {
	e := result.AsError(err)
	return &wireError{Code: e.Code, Message: e.Message, Details: e.Details}
}

func (w *wireError) err() *result.Error {
	return &result.Error{Code: w.Code, Message: w.Message, Details: w.Details}
}

// runRequest is a client's first message of a call, what json.Marshal of
// message{Op: "run", Token: token, Call: req} writes, built field by field:
// encoding/json reflecting on message, CallRequest and every type they
// reach was about a third of a millisecond of each client process, which
// does it once. TestRunRequestWire holds it to CallRequest's tags.
func runRequest(token string, req *CallRequest) ([]byte, error) {
	call := result.New().Set("command", req.Command)
	if req.Stdin != nil {
		call.Set("stdin", *req.Stdin)
	}
	call.Set("timeout", int64(req.Timeout)).Set("kill_after", int64(req.KillAfter)).Set("drain", int64(req.Drain)).
		Set("max_output", req.MaxOutput).Set("keep", req.Keep).Set("merge_output", req.Merge).Set("raw", req.Raw)
	if req.Binary != "" {
		call.Set("binary", req.Binary)
	}
	call.Set("busy_timeout", int64(req.BusyTimeout)).Set("stream", req.Stream)
	if req.Description != "" {
		call.Set("description", req.Description)
	}
	if req.Policy != nil {
		call.Set("policy", req.Policy)
	}
	if req.PolicyApproved {
		call.Set("policy_approved", true)
	}
	if req.Sandbox != "" {
		call.Set("sandbox", req.Sandbox)
	}
	b, err := result.Marshal(result.New().Set("op", "run").Set("token", token).Set("call", call))
	return append(b, '\n'), err
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

// sendResult sends a call's result, b being what result.Marshal made of
// it: the line message{Type: "result", Result: b} would be, without
// encoding/json checking and compacting b once more (a scan of the whole
// result, the command's output included).
func (l *lineWriter) sendResult(b []byte) error {
	line := make([]byte, 0, len(resultPrefix)+len(b)+2)
	line = append(append(append(line, resultPrefix...), b...), '}', '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.w.Write(line)
	return err
}

const resultPrefix = `{"type":"result","result":`

// tokenFile held the session secret beside the socket in earlier
// versions; tokenPath is where it is now. A client must present it: a
// process that cannot read it cannot drive the session even if it can
// reach the socket.
const tokenFile = "token"

// tokenPath is the file of the session secret of the session whose
// directory is sdir (STATE/sessions/ID): STATE/session-tokens/ID, 0600.
func tokenPath(sdir string) string {
	return filepath.Join(filepath.Dir(filepath.Dir(sdir)), state.SessionTokens, filepath.Base(sdir))
}

func readToken(sdir string) string {
	b, err := os.ReadFile(tokenPath(sdir))
	if errors.Is(err, fs.ErrNotExist) {
		b, err = os.ReadFile(filepath.Join(sdir, tokenFile)) // a session of an earlier version
	}
	if err != nil {
		return ""
	}
	return string(b)
}

// listenUnix listens on path; a path longer than a socket address allows
// is reached through a shorter name for its directory (longSocketAddr).
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
	const max = 100 // sun_path is 108 bytes on Linux, 104 on macOS, including the NUL
	if len(path) <= max {
		return path, func() {}, nil
	}
	return longSocketAddr(path)
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
