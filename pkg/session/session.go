// Package session keeps persistent shells for agents: one long-lived shell
// per session, owned by a small detached server process that listens on a
// Unix socket in the environment's state directory. cd, export, shell
// variables, functions, aliases and set -o options persist from one call to
// the next because every call is sourced into the same shell.
//
// The files, one job each:
//
//	server.go      lifecycle: start, accept loop, idle and exit watches, the end
//	shell.go       the shell protocol: the call line, the prompt that carries
//	               the status, the interrupt that stops a whole call
//	call.go        one call: the busy token, output pumps, timeout,
//	               cancellation, exec, reset, the bookkeeping after it
//	calldir.go     call files the shell cannot plant anything among
//	background.go  processes calls left running; bglog.go their bounded log
//	wire.go        client/server messages and the socket; auth*.go who may call
//	manager.go     the client side: start, call, status, list, stop, logs
//
// A call's command text is a file, so a syntax error in it cannot make the
// shell read the bookkeeping as part of a quoted string; its stdin is
// /dev/null or the caller's data, so it cannot swallow the next line; its
// output goes to per-call FIFOs that the server captures with the same
// bounded capture as a one-shot run, and, once the call has returned, into
// the session's background log for whatever still writes to them.
package session

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/pkg/policy"
	"github.com/agentplane/agentplane/pkg/sandbox"
	"github.com/agentplane/agentplane/pkg/state"
)

// Session states.
const (
	StateRunning = "running"
	StateEnded   = "ended"
)

// Reasons a session ended.
const (
	EndedExit          = "exit"           // the shell exited (exit, killed)
	EndedIdle          = "idle_timeout"   // no call for the idle timeout
	EndedStopped       = "stopped"        // session stop
	EndedServerDied    = "server_died"    // the server vanished without recording an end
	EndedRestartFailed = "restart_failed" // a shell that had to be replaced could not be started again
	EndedHostRestarted = "host_restarted" // the machine rebooted
)

// Kind is the handle kind of sessions.
const Kind = "ses"

// Spec is what a session is started with; written once to spec.json.
type Spec struct {
	Shell       string        `json:"shell"`
	ShellArgs   []string      `json:"shell_args,omitempty"`
	Cwd         string        `json:"cwd"`
	Env         []string      `json:"env"`
	IdleTimeout time.Duration `json:"idle_timeout"`
	// RecoverWait bounds the wait for an interrupted shell to answer a
	// probe before it is replaced (0: DefaultRecoverWait).
	RecoverWait time.Duration `json:"recover_wait,omitempty"`
	Name        string        `json:"name,omitempty"`
	Description string        `json:"description,omitempty"`
	// Sandbox, when not empty, confines the shell and everything it runs;
	// the server prepares it and releases it when the session ends.
	Sandbox *sandbox.Policy `json:"sandbox,omitempty"`
	// PolicyGuard traces the shell with the runtime policy guard for its
	// whole life: every exec any call makes is decided under that call's
	// policy (CallRequest.Policy).
	PolicyGuard bool `json:"policy_guard,omitempty"`
}

// Record is status.json, written only by the session's server.
type Record struct {
	State       string `json:"state"`
	ServerPID   int    `json:"server_pid"`
	ServerStart uint64 `json:"server_start"`
	ShellPID    int    `json:"shell_pid"`
	ShellStart  uint64 `json:"shell_start"`
	BootID      string `json:"boot_id"`
	Cwd         string `json:"cwd"`
	StartedAt   string `json:"started_at"`
	LastUsedAt  string `json:"last_used_at,omitempty"`
	EndedAt     string `json:"ended_at,omitempty"`
	EndedReason string `json:"ended_reason,omitempty"`
	ExitCode    *int   `json:"exit_code,omitempty"`
	Calls       int    `json:"calls"`
	Resets      int    `json:"resets"`
	// Sandbox is what the sandbox enforces (its report), if there is one.
	Sandbox map[string]any `json:"sandbox,omitempty"`
	// KeptIDs are the identities of the files the sandbox bound
	// read-only when the session started (Prepared.KeptIDs), never
	// recorded again: a control file renamed into place since, in a
	// directory the shell can write, may have been written by the shell
	// first (an editor's temporary file).
	KeptIDs map[string]string `json:"kept_ids,omitempty"`
	// Background lists the processes calls left running (cmd &).
	Background []BackgroundProc `json:"background,omitempty"`
}

// CallRequest is one command to run in a session.
type CallRequest struct {
	Command     string        `json:"command"`
	Stdin       *string       `json:"stdin,omitempty"`
	Timeout     time.Duration `json:"timeout"`
	KillAfter   time.Duration `json:"kill_after"`
	Drain       time.Duration `json:"drain"`
	MaxOutput   int           `json:"max_output"`
	Keep        string        `json:"keep"`
	Merge       bool          `json:"merge_output"`
	Raw         bool          `json:"raw"`
	Binary      string        `json:"binary,omitempty"`
	BusyTimeout time.Duration `json:"busy_timeout"`
	Stream      bool          `json:"stream"`
	Description string        `json:"description,omitempty"`
	// CancelSignal, when set, names the signal that cancelled the
	// caller: a cancelled call exits 128 + it (default SIGINT, the
	// signal the session interrupts a call with).
	CancelSignal func() syscall.Signal `json:"-"`
	// OnStart, when set, is told the shell's pid once the call is handed
	// to the shell (the stream's start event).
	OnStart func(pid int) `json:"-"`
	// Policy, when set, is enforced at run time on every exec of this
	// call; PolicyApproved lets its prompt-level execs run.
	Policy         *policy.Policy `json:"policy,omitempty"`
	PolicyApproved bool           `json:"policy_approved,omitempty"`
	// Sandbox is SandboxDigest of the session's sandbox as the caller
	// read it from the spec file and checked it (against the call's
	// flags and the sandbox_lock floor). The server refuses a call whose
	// caller checked another sandbox than the one its shell runs in: a
	// spec file rewritten since the start (from inside a writable root)
	// must not pass an unconfined session off as confined.
	Sandbox string `json:"sandbox,omitempty"`
}

// SandboxDigest names a session's sandbox policy (nil: none) for
// CallRequest.Sandbox.
func SandboxDigest(p *sandbox.Policy) string {
	b, _ := json.Marshal(p)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Manager starts, drives, inspects and stops the sessions of one
// environment.
type Manager struct {
	Dir *state.Dir
	// Exe is the executable that serves sessions; Start runs it with the
	// server argv it is given (whose first element is only argv[0]).
	Exe string
	// ReplyMargin is what a call allows a server beyond the call's own
	// bounds before it says session_unreachable (0: DefaultReplyMargin).
	ReplyMargin time.Duration
}

func (m *Manager) sessionDir(id string) string { return m.Dir.Join("sessions", id) }
