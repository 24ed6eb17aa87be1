// Package mcpcmd is the "mcp" subcommand that agentsh, agentjob and agentfs
// share: it parses the server's own flags, resolves the binaries that run
// the calls and hands everything to pkg/mcpserver.
package mcpcmd

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/fsflags"
	"github.com/agentplane/agentplane/pkg/cli/guard"
	"github.com/agentplane/agentplane/pkg/cli/sandboxflags"
	"github.com/agentplane/agentplane/pkg/mcpserver"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/run"
)

// Options are the mcp command's flags.
type Options struct {
	// All serves agentjob's and agentfs's tools too (agentsh only).
	All bool
	// Describe prints this program's tool set as JSON instead of serving:
	// how agentsh --all learns the other programs' tools.
	Describe bool
	// EventInterval and EventBurst limit job notifications.
	EventInterval time.Duration
	EventBurst    int
	// SessionIdle is how long a session started through the server lives
	// without a call, also after the connection that started it closed;
	// 0 stops sessions when their connection closes.
	SessionIdle time.Duration
	// operator holds the operator flags as given, name -> values.
	operator map[string]*[]string
}

// long is the help text of the mcp command, the man page's description;
// {{settings}} stands for the server's settings, {{server}} for the
// arguments the server owns and {{files}} for those that name a local file
// (Long).
const long = `Serve this program's operations as Model Context Protocol tools over stdio
(newline-delimited JSON-RPC on stdin and stdout), for MCP hosts such as editors and
agent frameworks. agentsh mcp --all also serves agentjob's and agentfs's tools
(found beside agentsh, else on PATH).

Tools: the same names, descriptions, input schemas and annotations (readOnlyHint,
destructiveHint, idempotentHint, openWorldHint, as each operation declares them)
as 'schema --format mcp', except that the server's settings are not tool
arguments (below). A result is the CLI's JSON object as structured content, with
a one-line summary and the same JSON as text. isError is true only when the tool
could not do what was asked: invalid arguments, a refusal (policy, sandbox, root,
deny), a session or job that is gone, an internal failure; the object carries
the stable error code. A command that ran and exited non-zero or timed out, a
wait whose job failed or whose timeout passed, and a job started with wait_ready
that ended before it was ready, are normal results (isError false) whose object
says success false and why. A null argument means the
argument is not given, as OpenAI's strict mode sends it.

Each call runs as a subprocess of the program (PROGRAM ... --request -), so the
CLI's guarantees hold per call: agentsh kills every process the command started,
bounds its capture, and a client's cancellation (notifications/cancelled) sends
SIGINT to the call, which reports status cancelled with nothing left running.

Settings: {{settings}}, --state-dir and --config are the server's, given as flags
here or through the environment and config file like the CLI's. They are
passed to every call as flags and a tool call cannot set them: an argument
naming one is refused with invalid_request. With --sandbox workspace-write and no --workspace, the workspace
is the server's working directory, not a call's cwd. {{server}}
Arguments that name a local file the program would open itself, unconfined
({{files}}), are refused: they would read past --deny-read and --root or write
outside the sandbox; give the content inline.

A session keeps the sandbox it was started with: the server's sandbox applies to
the sessions started through it, and a session handle from elsewhere in the same
environment runs with its own. Give the server a state directory of its own
(--state-dir) to keep other sessions out of reach.

Progress: an agentsh_run call with a progress token gets progress notifications
with the bytes of output so far (at most one per 200ms); agentjob_wait gets one
per state change of the jobs it waits for.

Job notifications (servers that include agentjob): every lifecycle event of the
environment while the server runs (started, ready, exited, failed, stopped,
timeout, restarted, lost) is sent as a logging notification (notifications/message,
logger "agentjob", level info, or warning for failed, timeout and lost; data:
type, event, seq, time, handle, name, exit_code, signal, reason, restarts,
coalesced). The client receives them after it sets a logging level (logging/setLevel
info). Limits: at most one notification per job per --event-interval (default 1s),
the first at once and later ones coalesced into the latest state (coalesced counts
the events folded in), and at most --event-burst (default 20) for all jobs together
per interval.

Sessions: a session started through the server outlives the connection that
started it, so a host that opens one connection (one server) per tool call finds
it again; it stops itself after --session-idle-timeout (default 30m) without a
call, the bound on the idle_timeout a call may ask for. With
--session-idle-timeout 0 the server stops the sessions a connection started when
that connection closes, unless they were started with the extra argument
detached true.

A server that cannot start (a bad setting, agentjob or agentfs missing for
--all) writes "PROGRAM: error: ..." and the JSON error object to stderr, which
hosts show, and exits non-zero; stdout stays the MCP connection's.`

// A settingGroup is one function that declares operator settings on the
// programs' commands, named as the help text names its flags.
type settingGroup struct {
	name    string
	declare func(*pflag.FlagSet)
}

// settingGroups are the declarations of the operator's settings in the
// three programs, beside clikit's --config and --state-dir: the server
// declares the same flags by calling them, so that a setting added to one
// of them, or marked there, is the server's without a list to update (a
// test checks that the programs mark no other flag clikit.Operator).
func settingGroups() []settingGroup {
	return []settingGroup{
		{"the sandbox flags", func(fs *pflag.FlagSet) {
			sandboxflags.AddFlags(fs, new(sandboxflags.Options))
			sandboxflags.AddLockFlag(fs)
		}},
		{"the command policy", func(fs *pflag.FlagSet) { guard.AddFlags(fs, new(guard.Options)) }},
		{"agentfs's boundary", func(fs *pflag.FlagSet) { fsflags.AddFlags(fs, new(fsflags.Boundary)) }},
	}
}

// serverFlags returns, per group, the flags marked clikit.Operator, in
// the order they are declared.
func serverFlags() [][]*pflag.Flag {
	var out [][]*pflag.Flag
	for _, g := range settingGroups() {
		fs := pflag.NewFlagSet(g.name, pflag.ContinueOnError)
		fs.SortFlags = false
		g.declare(fs)
		var group []*pflag.Flag
		fs.VisitAll(func(f *pflag.Flag) {
			if clikit.HasMark(f, clikit.Operator) {
				group = append(group, f)
			}
		})
		out = append(out, group)
	}
	return out
}

// OperatorFlags returns the names of the flags the three programs mark
// clikit.Operator outside clikit's own (--config, --state-dir), from the
// functions that declare them.
func OperatorFlags() []string {
	var out []string
	for _, g := range serverFlags() {
		for _, f := range g {
			out = append(out, f.Name)
		}
	}
	return out
}

// ServerFlags returns the names of the operator's settings the server
// takes as its own flags and forwards to every call: OperatorFlags but
// those marked clikit.NotForwarded.
func ServerFlags() []string {
	var out []string
	for _, g := range serverFlags() {
		for _, f := range g {
			if !clikit.HasMark(f, clikit.NotForwarded) {
				out = append(out, f.Name)
			}
		}
	}
	return out
}

// Long is the help text of the mcp command of the program whose tree is
// root: the server's settings as the groups that declare them name them,
// and the arguments its tools refuse from the marks of their flags
// (clikit.ServerOwned, clikit.LocalFile, clikit.FileRef). A nil root
// (before the tree is built) leaves those two lists out.
func Long(root *cobra.Command) string {
	var groups []string
	for i, g := range serverFlags() {
		var names []string
		for _, f := range g {
			if !clikit.HasMark(f, clikit.NotForwarded) {
				names = append(names, "--"+f.Name)
			}
		}
		groups = append(groups, settingGroups()[i].name+" ("+strings.Join(names, ", ")+")")
	}
	text := strings.Replace(long, "{{settings}}", strings.Join(groups, ", "), 1)
	server, files := refusedArgs(root)
	text = strings.Replace(text, "{{server}}", server, 1)
	text = strings.Replace(text, "{{files}}", files, 1)
	// Refill the paragraph that now holds the lists.
	start := strings.Index(text, "Settings: ")
	end := start + strings.Index(text[start:], "\n\n")
	return text[:start] + fill(text[start:end], 84) + text[end:]
}

// refusedArgs words the arguments of root's tools that the server owns and
// those that name a local file, from the marks on their flags.
func refusedArgs(root *cobra.Command) (server, files string) {
	if root == nil {
		return "", "..."
	}
	keys := func(m clikit.Mark, suffix string) []string {
		var out []string
		for _, t := range clikit.Tools(root) {
			// The command's own flags and its parents' persistent ones,
			// read without InheritedFlags, which would merge them into
			// the command (and change its usage line).
			sets := []*pflag.FlagSet{t.Command.Flags()}
			for c := t.Command; c != nil; c = c.Parent() {
				sets = append(sets, c.PersistentFlags())
			}
			for _, fs := range sets {
				fs.VisitAll(func(f *pflag.Flag) {
					if k := clikit.ConfigKey(f.Name) + suffix; clikit.HasMark(f, m) && !slices.Contains(out, k) {
						out = append(out, k)
					}
				})
			}
		}
		return out
	}
	if owned := keys(clikit.ServerOwned, ""); len(owned) > 0 {
		verb := "argument is"
		if len(owned) > 1 {
			verb = "arguments are"
		}
		server = "The " + andList(owned) + " " + verb + " the server's too."
	}
	local := append(keys(clikit.LocalFile, ""), keys(clikit.FileRef, ` "@FILE"`)...)
	if len(local) == 0 {
		local = []string{"none among this program's tools"}
	}
	files = strings.Join(local, ", ")
	if root.Name() == "agentsh" {
		// --all serves the other programs' tools, refused by their marks.
		files += "; with --all also agentjob's and agentfs's, which their mcp pages name"
	}
	return server, files
}

// andList joins words as prose: "a", "a and b", "a, b and c".
func andList(w []string) string {
	if len(w) < 2 {
		return strings.Join(w, "")
	}
	return strings.Join(w[:len(w)-1], ", ") + " and " + w[len(w)-1]
}

// fill wraps the words of s into lines of at most width columns.
func fill(s string, width int) string {
	var b strings.Builder
	n := 0
	for _, w := range strings.Fields(s) {
		switch {
		case n == 0:
		case n+1+len(w) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

// NewCmd builds the mcp command of env's program. root is the program's
// root command (its persistent flags are already defined); stateDir is the
// program's --state-dir value; allowAll adds --all (agentsh).
func NewCmd(root *cobra.Command, env *clikit.Env, stateDir *string, allowAll bool) *cobra.Command {
	o := &Options{operator: map[string]*[]string{}}
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve this program's operations as MCP tools over stdio",
		// Long is derived from every command's flags when help is first shown (HelpText).
		Args: cobra.NoArgs,
		// stdout is the MCP connection: a server that cannot start says
		// why on stderr.
		Annotations: map[string]string{clikit.AnnotProtocolStdout: "true"},
	}
	f := cmd.Flags()
	if allowAll {
		f.BoolVar(&o.All, "all", false, "also serve agentjob's and agentfs's tools")
	}
	f.BoolVar(&o.Describe, "describe", false, "print the tool set as JSON instead of serving")
	_ = f.MarkHidden("describe")
	f.Var(clikit.DurationValue{D: &o.EventInterval}, "event-interval", "at most one job notification per job per `D` (default 1s)")
	f.IntVar(&o.EventBurst, "event-burst", mcpserver.DefaultEventBurst, "at most `N` job notifications for all jobs together per interval")
	o.SessionIdle = mcpserver.DefaultSessionIdle
	f.Var(clikit.DurationValue{D: &o.SessionIdle}, "session-idle-timeout", "sessions started through the server stop after `D` without a call, "+
		"also after the connection that started them closed (0 = stop them when their connection closes)")
	clikit.MarkFlags(f, clikit.Configurable, "session-idle-timeout")
	// config and state-dir are the program's own persistent flags, which
	// the command inherits.
	for _, n := range ServerFlags() {
		vals := new([]string)
		o.operator[n] = vals
		// A local flag shadows the program's persistent one of the same
		// name (agentfs --root): the server forwards the value verbatim
		// and the subprocess resolves it as the CLI would.
		f.StringArrayVar(vals, n, nil, "the server's --"+n+" for every call whose command has it")
	}
	// The lists of refused arguments come from every command's flags.
	env.HelpText(func() { cmd.Long = Long(root) })
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		return serve(cmd, env, o, *stateDir)
	})
	return cmd
}

func serve(cmd *cobra.Command, env *clikit.Env, o *Options, stateDir string) (*clikit.Outcome, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, result.Errorf(result.CodeInternal, "cannot find this program's executable: %v", err)
	}
	d, err := env.OpenStateDir(stateDir)
	if err != nil {
		return nil, err
	}
	wd, ok := run.Cwd("")
	if !ok {
		return nil, result.Errorf(result.CodeInternal, "cannot read the working directory")
	}
	var flags []mcpserver.Flag
	var forward []string // the same settings as flags of another program's mcp --describe
	for _, n := range ServerFlags() {
		vals, ok := o.operator[n]
		if !ok || !clikit.FlagChanged(cmd, n) {
			continue
		}
		flags = append(flags, mcpserver.Flag{Name: n, Values: *vals})
		for _, v := range *vals {
			forward = append(forward, "--"+n+"="+v)
		}
	}
	dopts := mcpserver.DescribeOptions{
		Executable: self, Flags: flags, ConfigFile: env.ConfigFile, StateDir: d.Path(), Workdir: wd,
		LookupEnv: env.LookupEnv, Environ: env.Environ,
	}
	own, err := mcpserver.Describe(env.Program, dopts)
	if err != nil {
		return nil, err
	}
	if o.Describe {
		b, err := json.Marshal(own)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		obj := result.New().Set("success", true)
		for _, k := range []string{"program", "executable", "tools"} {
			obj.Set(k, m[k])
		}
		return &clikit.Outcome{Value: obj}, nil
	}
	sets := []*mcpserver.ToolSet{own}
	if o.All {
		for _, name := range []string{"agentjob", "agentfs"} {
			args := append([]string{"mcp", "--describe", "--state-dir=" + d.Path()}, forward...)
			if env.ConfigFile != "" {
				args = append(args, "--config="+env.ConfigFile)
			}
			set, err := describeOther(env, self, name, args)
			if err != nil {
				return nil, err
			}
			sets = append(sets, set)
		}
	}
	srv, err := mcpserver.New(mcpserver.Config{
		Sets: sets, StateDir: d.Path(), Environ: env.Environ,
		EventInterval: o.EventInterval, EventBurst: o.EventBurst, SessionIdle: o.SessionIdle,
		Log: env.Err, Verbose: env.Verbose,
	})
	if err != nil {
		return nil, err
	}
	if err := srv.Serve(env.Ctx, env.In, env.Out); err != nil {
		return nil, result.Errorf(result.CodeInternal, "the MCP connection failed: %v", err)
	}
	// Nothing more goes to stdout: it was the MCP connection.
	return nil, nil
}

// describeOther asks another agentplane program for its tool set, with the
// same operator settings, so that agentsh need not link its command tree.
func describeOther(env *clikit.Env, self, name string, args []string) (*mcpserver.ToolSet, error) {
	exe, err := findProgram(self, name)
	if err != nil {
		return nil, err
	}
	c := exec.CommandContext(env.Ctx, exe, args...)
	c.Env = env.Environ()
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	var set struct {
		mcpserver.ToolSet
		Success bool `json:"success"`
		Error   struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	jerr := json.Unmarshal(out, &set)
	if jerr != nil {
		// A program that cannot describe itself says why on stderr, its
		// last line the error object.
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		_ = json.Unmarshal([]byte(lines[len(lines)-1]), &set)
	}
	if jerr != nil || !set.Success {
		if set.Error.Code != "" {
			return nil, result.Errorf(set.Error.Code, "%s: %s", name, set.Error.Message)
		}
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			first, _, _ := strings.Cut(msg, "\n")
			return nil, result.Errorf(result.CodeInternal, "cannot list %s's tools (%s): %s", name, exe, first)
		}
		return nil, result.Errorf(result.CodeInternal, "cannot list %s's tools (%s): %v", name, exe, errors.Join(err, jerr))
	}
	set.Executable = exe
	return &set.ToolSet, nil
}

// findProgram finds a sibling program: beside this executable first (an
// installation keeps the three together), else on PATH.
func findProgram(self, name string) (string, error) {
	p := filepath.Join(filepath.Dir(self), name)
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return p, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", result.Errorf(result.CodeInternal, "cannot use %s: %v", p, err)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", result.Errorf(result.CodeUsage, "mcp --all needs %s beside %s or on PATH", name, self).
			With("hint", "install the three programs into one directory")
	}
	if !strings.Contains(p, "/") {
		p, _ = filepath.Abs(p)
	}
	return p, nil
}
