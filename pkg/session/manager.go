package session

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/pkg/launch"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox"
	"github.com/agentplane/agentplane/pkg/state"
)

// Info is what status and list report about a session.
type Info struct {
	Session     string `json:"session"`
	Name        string `json:"name,omitempty"`
	Status      string `json:"status"`
	Pid         int    `json:"pid,omitempty"`
	Cwd         string `json:"cwd"`
	Shell       string `json:"shell"`
	StartedAt   string `json:"started_at,omitempty"`
	LastUsedAt  string `json:"last_used_at,omitempty"`
	EndedAt     string `json:"ended_at,omitempty"`
	EndedReason string `json:"ended_reason,omitempty"`
	Calls       int    `json:"calls"`
	Resets      int    `json:"resets,omitempty"`
	IdleTimeout int64  `json:"idle_timeout_ms"`
	Description string `json:"description,omitempty"`
	// Background lists the processes calls left running, and the last
	// ones that exited.
	Background []BackgroundInfo `json:"background"`
	Sandbox    any              `json:"sandbox,omitempty"`
}

// BackgroundInfo is one background process as status reports it.
type BackgroundInfo struct {
	PID      int    `json:"pid"`
	Command  string `json:"command"`
	Status   string `json:"status"` // running, exited
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
}

// Start creates a session and its server. serverArgv is the command line
// that runs Serve for the new id (the CLI re-executes itself with a hidden
// subcommand); the id is appended to it. Start returns once the shell
// answers, or with the reason it did not start.
func (m *Manager) Start(spec Spec, serverArgv []string) (*Info, error) {
	if st, err := os.Stat(spec.Cwd); err != nil || !st.IsDir() {
		return nil, result.Errorf(result.CodeCwdNotFound, "working directory %s does not exist", spec.Cwd)
	}
	n, err := m.Dir.NextID(Kind)
	if err != nil {
		return nil, result.Errorf(result.CodeSessionStartFailed, "cannot allocate a session id: %v", err)
	}
	id := strconv.FormatUint(n, 10)
	sdir := m.sessionDir(id)
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		return nil, result.Errorf(result.CodeSessionStartFailed, "cannot create %s: %v", sdir, err)
	}
	if err := state.WriteJSONAtomic(filepath.Join(sdir, "spec.json"), spec, 0o600); err != nil {
		return nil, result.Errorf(result.CodeSessionStartFailed, "cannot write the session spec: %v", err)
	}
	argv := append(append([]string(nil), serverArgv...), id)
	exe := m.Exe
	if exe == "" {
		exe = argv[0]
	}
	cmd := exec.Command(exe)
	cmd.Args = argv
	cmd.Dir = "/"
	// The server's own diagnostics (a panic) must not be lost.
	if logf, err := os.OpenFile(filepath.Join(sdir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
		cmd.Stderr = logf
		defer logf.Close()
	}
	// Detached (launch.Start): it outlives the CLI, the caller's terminal,
	// the caller's tree and the guard of an agentsh command that starts it.
	if _, _, err := launch.Start(context.Background(), cmd); err != nil {
		if errors.Is(err, launch.ErrNoAnswer) {
			return nil, result.Errorf(result.CodeSessionStartFailed, "the session server exited before it was ready")
		}
		var refused *result.Error
		if errors.As(err, &refused) {
			return nil, refused
		}
		return nil, result.Errorf(result.CodeSessionStartFailed, "cannot start the session server: %v", err)
	}
	return m.Status(m.Dir.Mint(Kind, id))
}

// resolve turns a handle (or a session name) into an id.
func (m *Manager) resolve(handleOrName string) (string, error) {
	id, err := m.Dir.Parse(Kind, handleOrName)
	if err == nil {
		if _, serr := os.Stat(m.sessionDir(id)); serr != nil {
			return "", result.Errorf(result.CodeSessionEnded, "session %s no longer exists", handleOrName)
		}
		return id, nil
	}
	// A name: the newest session with that name.
	entries, _ := os.ReadDir(m.Dir.Join("sessions"))
	best := uint64(0)
	for _, e := range entries {
		n, perr := strconv.ParseUint(e.Name(), 10, 64)
		if perr != nil || n <= best {
			continue
		}
		var spec Spec
		if state.ReadJSON(filepath.Join(m.sessionDir(e.Name()), "spec.json"), &spec) == nil && spec.Name == handleOrName && spec.Name != "" {
			best = n
		}
	}
	if best > 0 {
		return strconv.FormatUint(best, 10), nil
	}
	return "", err
}

// Spec returns the spec a session was started with.
func (m *Manager) Spec(handle string) (*Spec, error) {
	id, err := m.resolve(handle)
	if err != nil {
		return nil, err
	}
	var spec Spec
	if err := state.ReadJSON(filepath.Join(m.sessionDir(id), "spec.json"), &spec); err != nil {
		return nil, result.Errorf(result.CodeSessionEnded, "session %s has no readable spec", handle)
	}
	return &spec, nil
}

// CallSandbox returns what a call's client holds its own sandbox flags
// to: the session's sandbox (nil for none) and the cwd it started in. It
// reads spec.json as Spec does, but with gjson, and the policy is decoded
// by encoding/json only when there is one: the first decode of a process
// touches encoding/json's code and builds its decoders, 0.3 to 0.5 ms of
// each call's client, which otherwise decodes nothing with it (see
// parseReply). TestCallSandbox keeps it equal to Spec.
func (m *Manager) CallSandbox(handle string) (*sandbox.Policy, string, error) {
	id, err := m.resolve(handle)
	if err != nil {
		return nil, "", err
	}
	unreadable := result.Errorf(result.CodeSessionEnded, "session %s has no readable spec", handle)
	b, err := state.ReadFile(filepath.Join(m.sessionDir(id), "spec.json"))
	if err != nil || !gjson.ValidBytes(b) {
		return nil, "", unreadable
	}
	head := gjson.ParseBytes(b)
	if !head.IsObject() {
		return nil, "", unreadable
	}
	cwd := head.Get("cwd")
	if cwd.Exists() && cwd.Type != gjson.String && cwd.Type != gjson.Null {
		return nil, "", unreadable
	}
	sb := head.Get("sandbox")
	if !sb.Exists() || sb.Type == gjson.Null {
		return nil, cwd.String(), nil
	}
	var pol sandbox.Policy
	if err := json.Unmarshal([]byte(sb.Raw), &pol); err != nil {
		return nil, "", unreadable
	}
	return &pol, cwd.String(), nil
}

// Kept is what a session's sandbox keeps from its shell, as the server
// recorded it in the state directory, which the shell cannot write.
type Kept struct {
	// Protected are the real paths its mounts bind read-only (the
	// report's "protected": a link's target as it was at the start).
	Protected []string
	// Writable are the real paths the shell may write (the report's
	// "writable").
	Writable []string
	// IDs are the protected files' identities at the session's start.
	IDs map[string]string
}

// SandboxKept reads what the session's sandbox keeps (Kept).
func (m *Manager) SandboxKept(handle string) (Kept, error) {
	id, err := m.resolve(handle)
	if err != nil {
		return Kept{}, err
	}
	b, err := state.ReadFile(filepath.Join(m.sessionDir(id), "status.json"))
	if err != nil || !gjson.ValidBytes(b) {
		return Kept{}, result.Errorf(result.CodeSessionEnded, "session %s has no readable record", handle)
	}
	strs := func(path string) []string {
		var out []string
		for _, p := range gjson.GetBytes(b, path).Array() {
			if p.Type == gjson.String {
				out = append(out, p.Str)
			}
		}
		return out
	}
	k := Kept{Protected: strs("sandbox.protected"), Writable: strs("sandbox.writable"), IDs: map[string]string{}}
	gjson.GetBytes(b, "kept_ids").ForEach(func(key, v gjson.Result) bool {
		if v.Type == gjson.String {
			k.IDs[key.Str] = v.Str
		}
		return true
	})
	return k, nil
}

// Status reports a session, telling the truth about a server that is gone.
func (m *Manager) Status(handle string) (*Info, error) {
	id, err := m.resolve(handle)
	if err != nil {
		return nil, err
	}
	// A session whose server died is ended now, with what it left running:
	// status never says ended while one of its processes runs.
	m.reapDead(id, "")
	return m.info(id)
}

func (m *Manager) info(id string) (*Info, error) {
	sdir := m.sessionDir(id)
	var spec Spec
	if err := state.ReadJSON(filepath.Join(sdir, "spec.json"), &spec); err != nil {
		return nil, result.Errorf(result.CodeSessionEnded, "session %s has no readable spec", id)
	}
	var rec Record
	_ = state.ReadJSON(filepath.Join(sdir, "status.json"), &rec)
	if rec.State != StateEnded && deadReason(rec) == "" {
		// The server writes its record off the calls' path: a caller
		// that has its answer must find its call counted, so a live
		// server is asked.
		if live, ok := liveRecord(sdir); ok {
			rec = live
		}
	}
	info := &Info{
		Session: m.Dir.Mint(Kind, id), Name: spec.Name, Shell: spec.Shell, Cwd: rec.Cwd,
		Pid: rec.ShellPID, StartedAt: rec.StartedAt, LastUsedAt: rec.LastUsedAt, EndedAt: rec.EndedAt,
		EndedReason: rec.EndedReason, Calls: rec.Calls, Resets: rec.Resets,
		IdleTimeout: spec.IdleTimeout.Milliseconds(), Description: spec.Description,
	}
	if info.Cwd == "" {
		info.Cwd = spec.Cwd
	}
	info.Status = rec.State
	if rec.State != StateEnded {
		// A server that is still cleaning up (the reason is recorded, the
		// end not yet) reports running until everything is dead.
		info.EndedReason = ""
		info.Status = StateRunning
		if reason := deadReason(rec); reason != "" {
			if err := unrecorded(sdir, reason); err != nil {
				return nil, err
			}
			info.Status, info.EndedReason = StateEnded, reason
		}
	}
	if rec.Sandbox != nil {
		info.Sandbox = rec.Sandbox
	} else {
		info.Sandbox = map[string]any{"mode": "none"}
	}
	info.Background = []BackgroundInfo{}
	for _, b := range rec.Background {
		st, code, sig := b.Status, b.ExitCode, b.Signal
		if st == StateRunning && !proctree.Alive(b.PID, b.Start) {
			st = "exited"
		}
		info.Background = append(info.Background, BackgroundInfo{PID: b.PID, Command: b.Command, Status: st, ExitCode: code, Signal: sig})
	}
	if info.Status == StateEnded {
		info.Pid = 0
	}
	return info, nil
}

// liveRecord asks the server of the session in sdir for its record.
func liveRecord(sdir string) (Record, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := dial(ctx, filepath.Join(sdir, "sock"))
	if err != nil {
		return Record{}, false
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	if err := json.NewEncoder(conn).Encode(message{Op: "status", Token: readToken(sdir)}); err != nil {
		return Record{}, false
	}
	var m message
	var rec Record
	if err := json.NewDecoder(conn).Decode(&m); err != nil || m.Type != "status" || json.Unmarshal(m.Result, &rec) != nil {
		return Record{}, false
	}
	return rec, true
}

// unrecorded is the error of a session whose record says running and whose
// server is gone (reason server_died) when its directory cannot be
// written: the server could record nothing since (its calls, its end: a
// stop, an exit, an idle end), and the session's end is not known, only
// that it ended. Nil otherwise.
func unrecorded(sdir, reason string) error {
	if reason != EndedServerDied {
		return nil
	}
	err := dirWritable(sdir)
	if err == nil {
		return nil
	}
	return result.Errorf(result.CodeStateDir, "the session's server is gone, and its directory %s cannot be written (%v): how the session ended, and what it did since the directory became unwritable, was never recorded", sdir, err).
		With("hint", "make the state directory writable again; the session has ended")
}

// deadReason returns why a session whose record says running is in fact
// over, or "" if its server lives.
func deadReason(rec Record) string {
	switch (proctree.Owner{PID: rec.ServerPID, Start: rec.ServerStart, Boot: rec.BootID}).Check() {
	case proctree.OwnerHostRestarted:
		return EndedHostRestarted
	case proctree.OwnerDied:
		return EndedServerDied
	}
	return ""
}

// List returns every session of the environment, newest first.
func (m *Manager) List() ([]*Info, error) {
	entries, err := os.ReadDir(m.Dir.Join("sessions"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var ids []uint64
	for _, e := range entries {
		if n, err := strconv.ParseUint(e.Name(), 10, 64); err == nil {
			ids = append(ids, n)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] > ids[j] })
	out := []*Info{}
	for _, n := range ids {
		info, err := m.info(strconv.FormatUint(n, 10))
		if e := result.AsError(err); e != nil && e.Code == result.CodeStateDir {
			// Not a session to leave out: one whose end is unknown.
			return nil, err
		}
		if err == nil {
			out = append(out, info)
		}
	}
	return out, nil
}

// Stop ends a session and kills everything it started. Stopping an ended
// session is not an error. It works without the socket: a server that
// still runs is told by SIGTERM (after its identity is checked by pid and
// start time), and one that does not answer is killed with its shell.
func (m *Manager) Stop(ctx context.Context, handle string) (*Info, error) {
	id, err := m.resolve(handle)
	if err != nil {
		return nil, err
	}
	sdir := m.sessionDir(id)
	if conn, err := dial(ctx, filepath.Join(sdir, "sock")); err == nil {
		_ = json.NewEncoder(conn).Encode(message{Op: "stop", Token: readToken(sdir)})
		// The server answers once the shell and its children are gone.
		line, _ := bufio.NewReader(conn).ReadBytes('\n')
		conn.Close()
		var msg message
		if json.Unmarshal(line, &msg) == nil && msg.Type == "error" && msg.Error != nil {
			return nil, msg.Error.err()
		}
		// The server records its end before it answers; one that could
		// not (an unwritable directory) is still exiting: it is waited
		// for, so that the verdict below is on a server that is gone.
		var rec Record
		if state.ReadJSON(filepath.Join(sdir, "status.json"), &rec) == nil && rec.State != StateEnded && len(line) > 0 {
			wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			_ = proctree.Wait(wctx, proctree.ID{PID: rec.ServerPID, Start: rec.ServerStart})
			cancel()
		}
		info, err := m.info(id)
		if e := result.AsError(err); e != nil && e.Code == result.CodeStateDir && len(line) > 0 {
			// The server answered the stop: it stopped, but could not
			// record it.
			return nil, result.Errorf(result.CodeStateDir, "the session was stopped, but its end could not be recorded: %s", e.Message).With("hint", e.Details["hint"])
		}
		return info, err
	}
	var rec Record
	if state.ReadJSON(filepath.Join(sdir, "status.json"), &rec) == nil && rec.State != StateEnded && deadReason(rec) == "" {
		server := proctree.ID{PID: rec.ServerPID, Start: rec.ServerStart}
		if server.Alive() {
			_ = syscall.Kill(server.PID, syscall.SIGTERM)
			wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			_ = proctree.Wait(wctx, server)
			cancel()
			if server.Alive() {
				_ = syscall.Kill(server.PID, syscall.SIGKILL)
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_ = proctree.Wait(wctx, server)
				cancel()
			}
		}
		m.reapDead(id, EndedStopped)
	} else {
		m.reapDead(id, "")
	}
	return m.info(id)
}

// reapDead cleans up after a server that died without ending its session:
// the shell (if it is provably still the same process) and its tree are
// killed and the end is recorded, by the one who noticed. reason, when
// set, is recorded instead of the verdict on the server.
func (m *Manager) reapDead(id, reason string) {
	sdir := m.sessionDir(id)
	unlock, err := state.Lock(filepath.Join(sdir, "status.lock"))
	if err != nil {
		return
	}
	defer unlock()
	var rec Record
	if state.ReadJSON(filepath.Join(sdir, "status.json"), &rec) != nil {
		return
	}
	verdict := deadReason(rec)
	if verdict == "" {
		return
	}
	if rec.ShellPID > 0 {
		killSession(rec.ShellPID, rec.ShellStart)
	}
	if rec.State == StateEnded {
		return
	}
	if reason == "" {
		reason = verdict
	}
	rec.State, rec.EndedReason, rec.EndedAt = StateEnded, reason, result.FormatTime(time.Now())
	for i := range rec.Background {
		if rec.Background[i].Status == StateRunning {
			rec.Background[i].Status = "exited"
		}
	}
	_ = state.WriteJSONAtomic(filepath.Join(sdir, "status.json"), rec, 0o600)
	_ = os.Remove(filepath.Join(sdir, "sock"))
}

// Logs reads the session's background log (what processes left running
// by its calls wrote after their call returned).
func (m *Manager) Logs(handle string, req LogsRequest) (*LogsResult, *Info, error) {
	id, err := m.resolve(handle)
	if err != nil {
		return nil, nil, err
	}
	out, err := readLog(m.sessionDir(id), req)
	if err != nil {
		return nil, nil, err
	}
	info, err := m.info(id)
	return out, info, err
}

// Call runs one command in a session. onEvent receives streamed output
// events ("stdout", "stderr" or "output" and the text) when req.Stream is
// set. Cancelling ctx interrupts the command like a timeout does and still
// returns its result, with status cancelled.
func (m *Manager) Call(ctx context.Context, handle string, req CallRequest, onEvent func(stream, data string)) (json.RawMessage, error) {
	d := m.Dial(handle)
	defer d.Close()
	return d.Call(ctx, req, onEvent)
}

// Dialed is a connection to a session's server being made in the
// background (Dial), so that a caller's own checks and the connection
// overlap: nothing reaches the server before Call sends the request.
type Dialed struct {
	m    *Manager
	done chan struct{} // closed once the fields below are set
	id   string
	err  error // the handle names no session
	conn net.Conn
	// token is the session's secret, read meanwhile too.
	token string
}

// Dial starts resolving handle and connecting to its session's server.
// The caller must Close what it returns.
func (m *Manager) Dial(handle string) *Dialed {
	d := &Dialed{m: m, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		if d.id, d.err = m.resolve(handle); d.err != nil {
			return
		}
		sdir := m.sessionDir(d.id)
		dctx, cancelDial := context.WithTimeout(context.Background(), 10*time.Second)
		d.conn, _ = dial(dctx, filepath.Join(sdir, "sock"))
		cancelDial()
		if d.conn != nil {
			d.token = readToken(sdir)
		}
	}()
	return d
}

// Close closes the connection, sent on or not, without waiting for a dial
// still under way (a call refused by its own checks returns at once).
func (d *Dialed) Close() {
	closeConn := func() {
		if d.conn != nil {
			d.conn.Close()
		}
	}
	select {
	case <-d.done:
		closeConn()
	default:
		go func() { <-d.done; closeConn() }()
	}
}

// Call sends the request on the connection Dial made and waits for its
// result, as Manager.Call does.
func (d *Dialed) Call(ctx context.Context, req CallRequest, onEvent func(stream, data string)) (json.RawMessage, error) {
	<-d.done
	if d.err != nil {
		return nil, d.err
	}
	m, id := d.m, d.id
	sdir := m.sessionDir(id)
	ended := func() error {
		var rec Record
		readable := state.ReadJSON(filepath.Join(sdir, "status.json"), &rec) == nil
		if readable && rec.State != StateEnded && deadReason(rec) == "" && rec.EndedReason == "" {
			// The server runs but cannot be reached: say so now rather
			// than wait for it.
			return result.Errorf(result.CodeSessionUnreachable, "the session's server runs but its socket cannot be reached").
				With("hint", "stop it with 'agentsh session stop' and start a new one")
		}
		if readable && rec.State != StateEnded && deadReason(rec) == "" {
			// A server that is cleaning up is waited for, so that a
			// caller who sees session_ended finds everything already dead.
			wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = proctree.Wait(wctx, proctree.ID{PID: rec.ServerPID, Start: rec.ServerStart})
			cancel()
		}
		m.reapDead(id, "")
		info, ierr := m.info(id)
		if e := result.AsError(ierr); e != nil && e.Code == result.CodeStateDir {
			return ierr
		}
		reason := EndedServerDied
		if ierr == nil && info.EndedReason != "" {
			reason = info.EndedReason
		}
		return result.Errorf(result.CodeSessionEnded, "the session has ended (%s)", reason).With("ended_reason", reason).
			With("hint", "start a new one with 'agentsh session start'")
	}
	conn := d.conn
	if conn == nil {
		return nil, ended()
	}
	line, err := runRequest(d.token, &req)
	if err != nil {
		return nil, result.Errorf(result.CodeInternal, "cannot encode the call: %v", err)
	}
	if _, err := conn.Write(line); err != nil {
		return nil, ended()
	}
	// The client keeps its own deadline, so that a server that stopped
	// answering (SIGSTOPped, wedged) cannot hold the caller past the
	// call's own bounds: with a timeout, the busy wait, the timeout, the
	// grace and a margin for bringing the shell back; after a
	// cancellation, the grace and that margin.
	var deadline time.Time
	replyMargin := m.replyMargin()
	if req.Timeout > 0 {
		deadline = time.Now().Add(req.BusyTimeout + req.Timeout + req.KillAfter + replyMargin)
		_ = conn.SetReadDeadline(deadline)
	}
	stop := context.AfterFunc(ctx, func() {
		sig := 0
		if req.CancelSignal != nil {
			sig = int(req.CancelSignal())
		}
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		_ = json.NewEncoder(conn).Encode(message{Op: "cancel", Signal: sig})
		if d := time.Now().Add(req.KillAfter + replyMargin); deadline.IsZero() || d.Before(deadline) {
			_ = conn.SetReadDeadline(d)
		}
	})
	defer stop()
	r := bufio.NewReaderSize(conn, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			if msg, ok := parseReply(line); ok {
				switch msg.Type {
				case "result":
					return msg.Result, nil
				case "error":
					if msg.Error != nil {
						return nil, msg.Error.err()
					}
				case "start":
					if req.OnStart != nil && msg.Started != nil {
						req.OnStart(*msg.Started)
					}
				default:
					if onEvent != nil && msg.Data != "" {
						onEvent(msg.Type, msg.Data)
					}
				}
			}
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return nil, result.Errorf(result.CodeSessionUnreachable, "the session's server did not answer in time (it is stopped or hung); the call's outcome is unknown").
				With("hint", "stop it with 'agentsh session stop' and start a new one")
		}
		if err != nil {
			return nil, ended()
		}
	}
}

// DefaultReplyMargin is what the client allows a server beyond a call's
// own bounds: an interrupt's probes and, at worst, a shell restarted.
const DefaultReplyMargin = 10 * time.Second

func (m *Manager) replyMargin() time.Duration {
	if m.ReplyMargin > 0 {
		return m.ReplyMargin
	}
	return DefaultReplyMargin
}

// killSession kills what is left of a shell whose server died: the shell
// itself if it is provably the same process, its descendants, and every
// process still in its Unix session (the shell called setsid, so its
// background jobs carry its pid as their session id even after the shell
// exited and they were reparented away). A PID is not reused while it
// names a live session, so members started after the shell are ours.
func killSession(shellPID int, shellStart uint64) {
	shell := proctree.ID{PID: shellPID, Start: shellStart}
	tree := proctree.Tree{Main: shell, Session: shell}
	if shell.Alive() {
		tree.Root = shellPID
	}
	// Stop promises the session's processes are gone when it returns.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tree.Kill(ctx)
}
