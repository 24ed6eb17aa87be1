// Package mcpserver serves agentplane operations as Model Context Protocol
// tools over one stdio connection.
//
// Every tool call runs as a subprocess of the program that owns the
// operation (agentsh, agentjob or agentfs), given the call's arguments as a
// JSON request on stdin and the operator's settings as flags. The CLIs'
// guarantees are per process: agentsh is a child subreaper that kills every
// descendant of its command, bounds its capture and turns SIGINT into a
// "cancelled" result. Running calls inside this long-lived server would
// share one process between calls and lose all of that; a subprocess per
// call keeps them, and a client's cancellation becomes SIGINT to that
// subprocess, exactly what a shell user's Ctrl-C does.
//
// The operator's settings (sandbox, limits, command policy, agentfs root and
// deny list, state directory, config file) are the server's: the arguments
// naming them are removed from the tools' input schemas and refused in
// calls, and the server's values are passed as flags, which override a
// request (CONTRACT §1).
//
// The MCP protocol itself (JSON-RPC over stdio, version negotiation,
// cancellation, progress, logging) is internal/mcpstdio, written here
// rather than taken from the MCP Go SDK: the SDK's package initialisation
// (encoding/gob, jsonschema-go, net/http and html/template pieces) cost
// every agentsh, agentjob and agentfs call about a millisecond and its
// binary three megabytes, since the mcp command is linked into each
// program. The SDK stays a test dependency: e2e_test.go drives the real
// "mcp" commands with the official Go SDK client, and js_test.go with the
// JavaScript SDK's, so that they, not this package's reading of the spec,
// decide whether the server speaks MCP.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/mcpserver/internal/mcpstdio"
	"github.com/agentplane/agentplane/pkg/result"
)

// DefaultEventInterval is the shortest time between two job notifications
// about the same job; events in between coalesce into the latest one.
const DefaultEventInterval = time.Second

// DefaultEventBurst bounds the job notifications of all jobs together in
// one DefaultEventInterval, so that many flapping jobs cannot flood the
// client either; events over the bound wait for the next interval.
const DefaultEventBurst = 20

// DefaultSessionIdle is how long a session started through the server
// lives without a call, by default: long enough for a host that opens one
// connection per tool call (and so one server per call over stdio) to find
// its session again, short enough that a host that went away does not
// leave shells running for long.
const DefaultSessionIdle = 30 * time.Minute

// DetachedKey is the extra argument of agentsh_session_start: a session
// started with it true outlives the connection.
const DetachedKey = "detached"

// Flag is one operator setting forwarded to every call whose command has
// the flag. Values holds one entry per occurrence (repeatable flags).
type Flag struct {
	Name   string   `json:"name"`
	Values []string `json:"values"`
}

// ToolSet is what one program serves: its tools and the binary that runs
// them. A program describes itself (Describe), in process or through its
// hidden "mcp --describe", so that agentsh can serve agentjob's and
// agentfs's tools without linking their command trees.
type ToolSet struct {
	Program    string     `json:"program"`
	Executable string     `json:"executable"`
	Tools      []ToolSpec `json:"tools"`
}

// ToolSpec is one served operation.
type ToolSpec struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"input_schema"`
	// Path is the subcommand below the program ("session", "start").
	Path []string `json:"path"`
	// Flags carry the operator's settings to the subprocess.
	Flags []string `json:"flags"`
	// Hints are what the operation does, declared on its command; they
	// become the tool's MCP annotations.
	Hints *clikit.Hints `json:"hints"`
	// Operator are the request keys of the command's flags marked
	// clikit.Operator: the server refuses them as arguments.
	Operator []string `json:"operator,omitempty"`
	// Files are the request keys of the command's flags marked
	// clikit.LocalFile: the server refuses them as arguments too.
	Files []string `json:"files,omitempty"`
	// Server are the request keys of the command's flags marked
	// clikit.ServerOwned: refused as arguments as well.
	Server []string `json:"server,omitempty"`
	// FileRefs are the request keys of the command's flags marked
	// clikit.FileRef: an "@FILE" value of one is refused.
	FileRefs []string `json:"file_refs,omitempty"`
}

// Config is what the server needs to know.
type Config struct {
	// Sets are the served programs.
	Sets []*ToolSet
	// StateDir is the environment whose event log the server follows
	// for job notifications ("" for none).
	StateDir string
	// Environ lists the server's environment; calls inherit it.
	Environ func() []string
	// EventInterval and EventBurst limit job notifications (defaults
	// DefaultEventInterval, DefaultEventBurst).
	EventInterval time.Duration
	EventBurst    int
	// SessionIdle is the longest a session started through the server
	// lives without a call (the session's idle timeout is clamped to it),
	// and sessions outlive the connection that started them. 0 stops them
	// when that connection closes, unless started detached.
	SessionIdle time.Duration
	// Log receives diagnostics for humans (the server's stderr).
	Log io.Writer
	// Verbose also logs every call.
	Verbose bool
}

// DescribeOptions are the operator's settings a program's tools are
// described with.
type DescribeOptions struct {
	Executable string
	Flags      []Flag
	ConfigFile string
	StateDir   string
	// Workdir is the server's working directory: the workspace of a
	// workspace-write sandbox that names none, so that a call's cwd
	// argument cannot move the writable area.
	Workdir   string
	LookupEnv func(string) (string, bool)
	Environ   func() []string
}

// tool is one served operation with the program that runs it.
type tool struct {
	ToolSpec
	program    string
	executable string
}

// Server serves one MCP connection.
type Server struct {
	cfg     Config
	tools   []*tool
	refused map[string]string
	logMu   sync.Mutex

	sessMu   sync.Mutex
	sessions map[string]bool // sessions to stop when the connection closes

	connCtx context.Context
	// inflight counts running calls, so that Serve returns only after
	// their subprocesses have reported.
	inflight sync.WaitGroup
}

// New prepares a server for the given tool sets.
func New(cfg Config) (*Server, error) {
	if cfg.EventInterval <= 0 {
		cfg.EventInterval = DefaultEventInterval
	}
	if cfg.EventBurst <= 0 {
		cfg.EventBurst = DefaultEventBurst
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Environ == nil {
		cfg.Environ = func() []string { return nil }
	}
	s := &Server{cfg: cfg, refused: map[string]string{}, sessions: map[string]bool{}}
	for _, set := range cfg.Sets {
		for _, spec := range set.Tools {
			for _, k := range spec.Operator {
				s.refused[k] = whyOperator
			}
			for _, k := range spec.Files {
				s.refused[k] = whyFile
			}
			for _, k := range spec.Server {
				s.refused[k] = whyServer
			}
		}
	}
	seen := map[string]bool{}
	for _, set := range cfg.Sets {
		if set.Executable == "" {
			return nil, result.Errorf(result.CodeUsage, "no executable for %s", set.Program)
		}
		for _, spec := range set.Tools {
			if seen[spec.Name] {
				return nil, result.Errorf(result.CodeUsage, "tool %s is served twice", spec.Name)
			}
			if spec.Hints == nil {
				return nil, result.Errorf(result.CodeInternal, "tool %s declares no hints (readOnly, destructive, idempotent, openWorld)", spec.Name)
			}
			seen[spec.Name] = true
			s.tools = append(s.tools, &tool{ToolSpec: spec, program: set.Program, executable: set.Executable})
		}
	}
	return s, nil
}

// Why a key is refused, as the hint of the invalid_request error.
const (
	whyOperator = "the server's operator sets it; leave it out and the server's setting applies"
	whyServer   = "the MCP server sets it itself or it has no meaning over MCP"
	whyFile     = "it names a file the program would read or write itself, outside the sandbox and the root; give the content inline"
)

// refusedMarks are the marks whose flags a tool call may not give, with
// why, as the hint of the invalid_request error.
func refusedMarks() []struct {
	mark clikit.Mark
	why  string
} {
	return []struct {
		mark clikit.Mark
		why  string
	}{{clikit.ServerOwned, whyServer}, {clikit.LocalFile, whyFile}, {clikit.Operator, whyOperator}}
}

// Describe lists a program's tools as the server offers them, with the
// operator's settings turned into the flags each command accepts. A value
// its command's parser rejects is an error here, at start-up, rather than
// on every call.
func Describe(p *clikit.Program, o DescribeOptions) (*ToolSet, error) {
	if o.LookupEnv == nil {
		o.LookupEnv = func(string) (string, bool) { return "", false }
	}
	if o.Environ == nil {
		o.Environ = func() []string { return nil }
	}
	env := &clikit.Env{Program: p, LookupEnv: o.LookupEnv, Environ: o.Environ, ConfigFile: o.ConfigFile, Ctx: context.Background()}
	root := clikit.NewRoot(env)
	refused := map[string]string{}
	for _, r := range refusedMarks() {
		for _, n := range clikit.MarkedFlags(root, r.mark) {
			refused[clikit.ConfigKey(n)] = r.why
		}
	}
	set := &ToolSet{Program: p.Name, Executable: o.Executable}
	for _, t := range clikit.Tools(root) {
		flags, err := operatorArgs(env, t, o)
		if err != nil {
			return nil, err
		}
		set.Tools = append(set.Tools, ToolSpec{
			Name: t.Name, Description: t.Description, InputSchema: toolSchema(t, refused),
			Path: strings.Fields(t.Command.CommandPath())[1:], Flags: flags, Hints: t.Hints,
			Operator: markedKeys(t, clikit.Operator), Files: markedKeys(t, clikit.LocalFile), Server: markedKeys(t, clikit.ServerOwned),
			FileRefs: markedKeys(t, clikit.FileRef),
		})
	}
	return set, nil
}

// markedKeys returns the request keys of t's flags marked m.
func markedKeys(t clikit.Tool, m clikit.Mark) []string {
	var keys []string
	seen := map[string]bool{}
	for _, fs := range []*pflag.FlagSet{t.Command.Flags(), t.Command.InheritedFlags()} {
		fs.VisitAll(func(f *pflag.Flag) {
			if clikit.HasMark(f, m) && !seen[f.Name] {
				seen[f.Name] = true
				keys = append(keys, clikit.ConfigKey(f.Name))
			}
		})
	}
	sort.Strings(keys)
	return keys
}

// lookupFlag finds a flag of a command, its own or inherited.
func lookupFlag(t clikit.Tool, name string) *pflag.Flag {
	for _, fs := range []*pflag.FlagSet{t.Command.Flags(), t.Command.PersistentFlags(), t.Command.InheritedFlags()} {
		if f := fs.Lookup(name); f != nil {
			return f
		}
	}
	return nil
}

// operatorArgs returns the flags that carry the operator's settings to one
// command.
func operatorArgs(env *clikit.Env, t clikit.Tool, o DescribeOptions) ([]string, error) {
	var args []string
	given := map[string][]string{}
	for _, fl := range o.Flags {
		f := lookupFlag(t, fl.Name)
		if f == nil {
			continue
		}
		for _, v := range fl.Values {
			if err := f.Value.Set(v); err != nil {
				return nil, result.Errorf(result.CodeUsage, "invalid argument %q for --%s: %v", v, fl.Name, err)
			}
			args = append(args, "--"+fl.Name+"="+v)
		}
		given[fl.Name] = fl.Values
	}
	if o.ConfigFile != "" && given["config"] == nil {
		args = append(args, "--config="+o.ConfigFile)
	}
	if o.StateDir != "" && lookupFlag(t, "state-dir") != nil && given["state-dir"] == nil {
		args = append(args, "--state-dir="+o.StateDir)
	}
	// A workspace-write sandbox without a workspace writes under the
	// command's cwd, which is a tool argument: pin it to the server's
	// directory so that the client cannot widen it with "cwd": "/".
	if lookupFlag(t, "workspace") != nil && o.Workdir != "" {
		mode := effective(env, t, given, "sandbox")
		ws := effective(env, t, given, "workspace")
		if mode == "workspace-write" && ws == "" {
			args = append(args, "--workspace="+o.Workdir)
		}
	}
	return args, nil
}

// effective is an operator setting as the subprocess will see it: the
// server's flag, else the environment or config file.
func effective(env *clikit.Env, t clikit.Tool, given map[string][]string, name string) string {
	if v := given[name]; len(v) > 0 {
		return v[len(v)-1]
	}
	if v, ok := env.Configured(t.Command, name); ok && len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// toolSchema is the tool's request schema without the keys a client may
// not set, plus the MCP-only arguments.
func toolSchema(t clikit.Tool, refused map[string]string) map[string]any {
	props := map[string]any{}
	if p, ok := t.Schema["properties"].(map[string]any); ok {
		for k, v := range p {
			// A key another tool's command owns for the server (agentsh
			// --stream) is this tool's own argument where its flag is not
			// so marked (agentjob logs --stream names a stream).
			if refused[k] == "" || refused[k] == whyServer && !clikit.HasMark(lookupFlag(t, strings.ReplaceAll(k, "_", "-")), clikit.ServerOwned) {
				props[k] = v
			}
		}
	}
	if t.Name == "agentsh_session_start" {
		props[DetachedKey] = map[string]any{"type": "boolean",
			"description": "keep the session after this connection closes even where the server stops sessions with their connection"}
	}
	var required []string
	req, _ := t.Schema["required"].([]string)
	for _, r := range req {
		if _, ok := props[r]; ok {
			required = append(required, r)
		}
	}
	return clikit.ObjectSchema(props, required)
}

// Serve speaks MCP on in/out until the client disconnects or ctx ends,
// then waits for the calls in flight and stops the sessions this
// connection started (unless detached). A Server serves one connection:
// stdio has exactly one, and the sessions it owns are per connection.
func (s *Server) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	tools := make([]mcpstdio.Tool, 0, len(s.tools))
	byName := map[string]*tool{}
	for _, t := range s.tools {
		// The annotations are the command's hints (clikit.Hints.MCP).
		tools = append(tools, mcpstdio.Tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, Annotations: t.Hints.MCP()})
		byName[t.Name] = t
	}
	conn := mcpstdio.New(out, mcpstdio.Options{
		Name: s.name(), Version: clikit.Version, Instructions: s.instructions(), Tools: tools,
		Handle: func(ctx context.Context, c *mcpstdio.Call) mcpstdio.Result { return s.handle(ctx, byName[c.Name], c) },
		Log:    s.logf,
	})
	// Calls outlive neither the connection nor the server: when either
	// ends, their contexts end and their subprocesses get SIGINT.
	connCtx, endConn := context.WithCancel(ctx)
	defer endConn()
	s.connCtx = connCtx
	var wg sync.WaitGroup
	if s.servesJobs() && s.cfg.StateDir != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.followEvents(connCtx, conn)
		}()
	}
	err := conn.Serve(connCtx, in)
	endConn()
	s.inflight.Wait()
	wg.Wait()
	s.stopSessions()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = nil
	}
	return err
}

func (s *Server) name() string {
	var names []string
	for _, set := range s.cfg.Sets {
		names = append(names, set.Program)
	}
	return strings.Join(names, "+")
}

func (s *Server) servesJobs() bool {
	for _, set := range s.cfg.Sets {
		if set.Program == "agentjob" {
			return true
		}
	}
	return false
}

func (s *Server) instructions() string {
	var b strings.Builder
	b.WriteString("agentplane: every tool returns the same JSON result object as the CLI (structured content); " +
		"success false marks a tool error whose error.code is stable. The sandbox, command policy and file root " +
		"are set by the server's operator and cannot be changed through tool arguments.")
	if s.servesJobs() {
		b.WriteString(" Job lifecycle events (started, ready, exited, failed, stopped, timeout, restarted, lost) arrive as " +
			"logging notifications from logger \"agentjob\" once the client sets a logging level of info or lower.")
	}
	return b.String()
}

// logf writes a diagnostic to the server's stderr.
func (s *Server) logf(format string, args ...any) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.cfg.Log, s.name()+" mcp: "+format+"\n", args...)
}

// trackSession remembers a session this connection started.
func (s *Server) trackSession(h string, track bool) {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	if track {
		s.sessions[h] = true
	} else {
		delete(s.sessions, h)
	}
}

// stopSessions stops the sessions this connection started, when the
// server's sessions end with their connection (SessionIdle 0); otherwise
// they live on until idle for SessionIdle, for the host's next connection.
// It runs after the connection is gone, so it has a context of its own.
func (s *Server) stopSessions() {
	if s.cfg.SessionIdle > 0 {
		return
	}
	s.sessMu.Lock()
	handles := make([]string, 0, len(s.sessions))
	for h := range s.sessions {
		handles = append(handles, h)
	}
	s.sessions = map[string]bool{}
	s.sessMu.Unlock()
	sort.Strings(handles)
	var stop *tool
	for _, t := range s.tools {
		if t.Name == "agentsh_session_stop" {
			stop = t
		}
	}
	if stop == nil {
		return
	}
	for _, h := range handles {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := s.exec(ctx, stop, map[string]any{"session": h}, nil)
		cancel()
		if err != nil || res["success"] != true {
			s.logf("could not stop session %s: %v %v", h, err, res["error"])
		}
	}
}
