// Package clikit is what the three agentplane command trees share: the Main
// harness that turns every invocation into one JSON object on stdout, the
// --pretty/--query/--request/--config flags, configuration through viper
// (flags > request > environment > config file > defaults), the mapping of
// error codes to exit statuses, and tool schemas generated from the same
// flag definitions that parse requests.
package clikit

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/pkg/result"
)

// Version is the release of the agentplane programs.
const Version = "0.1.0"

// Flag annotations understood by the harness.
const (
	// AnnotConfig marks a flag whose default may come from the environment
	// or the config file. Flags without it are per-call only.
	AnnotConfig = "agentplane/config"
	// AnnotObject marks a repeatable K=V flag that a request gives as a
	// JSON object.
	AnnotObject = "agentplane/object"
	// AnnotNoRequest hides a flag from requests and schemas.
	AnnotNoRequest = "agentplane/no-request"
	// AnnotRequired marks a request key the schema lists as required.
	AnnotRequired = "agentplane/required"
)

// Command annotations.
const (
	// AnnotTool names the command's operation in tool schemas.
	AnnotTool = "agentplane/tool"
	// AnnotArgs names the positional arguments as request keys, comma
	// separated; a trailing "..." makes the last one variadic.
	AnnotArgs = "agentplane/args"
	// AnnotHints declares what the operation does to the world (Hints),
	// for MCP tool annotations. Every tool has it.
	AnnotHints = "agentplane/hints"
	// AnnotToolDoc is the tool's description for a model, about its own
	// arguments, where the help text speaks of flags and exit statuses.
	AnnotToolDoc = "agentplane/tool-doc"
	// AnnotProtocolStdout marks a command whose stdout is a protocol
	// channel (mcp): its failures are reported on stderr instead.
	AnnotProtocolStdout = "agentplane/protocol-stdout"
)

// Program describes one of the programs for Main.
type Program struct {
	Name  string
	Short string
	Long  string
	// ExitCode maps an error code to the program's exit status.
	ExitCode func(code string) int
	// Build adds the program's own flags and subcommands to root.
	Build func(root *cobra.Command, env *Env)
	// Signals, if set, receives the SIGINT and SIGTERM the program caught
	// before Main (agentsh's package early): Main treats them as its own.
	Signals <-chan os.Signal
	// ExitStatus documents the exit codes: {code, meaning} rows for the
	// man pages, in order.
	ExitStatus [][2]string
}

// Env is the per-invocation context handed to every command: the streams,
// the process environment, the parsed global flags and the request.
type Env struct {
	Program *Program
	In      io.Reader
	Out     io.Writer
	Err     io.Writer
	// LookupEnv reads the process environment (os.LookupEnv in Main).
	LookupEnv func(string) (string, bool)
	// Environ lists the process environment (os.Environ in Main).
	Environ func() []string
	// Ctx is cancelled when the process receives SIGINT or SIGTERM.
	Ctx context.Context

	Pretty      bool
	Query       string
	RequestFile string
	ConfigFile  string
	// SystemConfig is the system-wide config file ("": DefaultSystemConfig),
	// which no environment variable moves (ConfigFiles). Tests name
	// another.
	SystemConfig string
	Verbose      bool
	// Description is the caller's stated intent, from --description or
	// the request's "description" key.
	Description string

	// Request holds the keys of --request that were not flags, for
	// commands that read structured values (the "command" of agentsh).
	Request map[string]any
	// fromRequest marks the flags the request set.
	fromRequest map[string]bool

	// ExitZero makes every printed result exit 0 (agentsh --exit-zero).
	ExitZero bool
	// StreamResult marks the final result as the last line of an NDJSON
	// stream (agentsh --stream): it carries "type": "result" first, so a
	// reader tells it from the events without looking for success.
	StreamResult bool

	// helpText fills help text derived from the whole tree (HelpText);
	// it runs before help, a man page or a schema is rendered, never on
	// a plain call.
	helpText []func()

	cfg       configSource
	outcome   *Outcome
	outMu     sync.Mutex
	sigMu     sync.Mutex
	gotSignal os.Signal
}

// Outcome is what a command produced: the value to print and the exit status.
type Outcome struct {
	Value any
	Exit  int
}

// Getenv returns the variable's value or "".
func (e *Env) Getenv(k string) string {
	v, _ := e.LookupEnv(k)
	return v
}

// Signal returns the signal that cancelled Ctx, if any.
func (e *Env) Signal() os.Signal {
	e.sigMu.Lock()
	defer e.sigMu.Unlock()
	return e.gotSignal
}

// Logf writes a diagnostic for humans to stderr, only with --verbose.
func (e *Env) Logf(format string, args ...any) {
	if e.Verbose {
		fmt.Fprintf(e.Err, e.Program.Name+": "+format+"\n", args...)
	}
}

// Emit writes one NDJSON line (a streaming event) to stdout. With --query
// only the final result is printed, so events are dropped.
func (e *Env) Emit(v any) error {
	if e.Query != "" {
		return nil
	}
	b, err := result.Marshal(v)
	if err != nil {
		return err
	}
	e.outMu.Lock()
	defer e.outMu.Unlock()
	_, err = e.Out.Write(append(b, '\n'))
	return err
}

// Action adapts a command body to cobra. The body returns the result value
// and exit status, or an error that becomes a JSON failure.
func (e *Env) Action(body func(cmd *cobra.Command, args []string) (*Outcome, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		out, err := body(cmd, args)
		if err != nil {
			return err
		}
		e.outcome = out
		return nil
	}
}

// Main runs a program with the given arguments and streams and returns the
// exit status. It is the only function that decides what reaches stdout.
func Main(p *Program, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := &Env{Program: p, In: stdin, Out: stdout, Err: stderr, LookupEnv: os.LookupEnv, Environ: os.Environ, Ctx: ctx}

	var sigs chan os.Signal
	if p.Signals == nil {
		sigs = make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(sigs)
	}
	go func() {
		var s os.Signal
		select {
		case s = <-sigs:
		case s = <-p.Signals: // a nil channel: never
		case <-ctx.Done():
			return
		}
		env.sigMu.Lock()
		env.gotSignal = s
		env.sigMu.Unlock()
		cancel()
	}()
	return Run(env, args)
}

// Run executes the program's command tree in env. Tests and the MCP server
// call it directly with their own streams.
func Run(env *Env, args []string) int {
	root := buildRoot(env)
	if wantsVersion(args) {
		root.Version = versionString()
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err != nil && cmd != nil && cmd.Annotations[AnnotProtocolStdout] != "" {
		return env.failOnStderr(err)
	}
	if err == nil && env.outcome == nil {
		// --help, --version or a help topic: human text was printed.
		return 0
	}
	if err != nil {
		code := env.fail(err)
		if env.ExitZero {
			return 0
		}
		return code
	}
	if err := env.print(env.outcome.Value); err != nil {
		fmt.Fprintf(env.Err, "%s: error: %v\n", env.Program.Name, err)
		return env.Program.ExitCode(result.CodeInternal)
	}
	if env.ExitZero {
		return 0
	}
	return env.outcome.Exit
}

// failOnStderr reports a failure of a command whose stdout is a protocol
// channel (an MCP server): a JSON object there would be a malformed
// message, so the reason goes to stderr, which hosts show, as
// "PROGRAM: error: MESSAGE" with a hint line and the error object.
func (e *Env) failOnStderr(err error) int {
	re := result.AsError(err)
	fmt.Fprintf(e.Err, "%s: error: %s\n", e.Program.Name, re.Message)
	if h, ok := re.Details["hint"].(string); ok && h != "" {
		fmt.Fprintf(e.Err, "hint: %s\n", h)
	}
	if b, merr := result.Marshal(result.Failure(re)); merr == nil {
		fmt.Fprintf(e.Err, "%s\n", b)
	}
	return e.Program.ExitCode(re.Code)
}

func (e *Env) fail(err error) int {
	re := result.AsError(err)
	if re.Code == result.CodeUsage && e.Request != nil {
		// The request was read and applied, so what the body found wrong
		// is the request (a missing or conflicting key): its code says so.
		// Errors of the command line itself come before the request is
		// applied, and stay usage errors.
		re.Code = result.CodeInvalidRequest
	}
	if _, own := re.Details["hint"]; re.Code == result.CodeUsage && !own {
		re.With("hint", "run '"+e.Program.Name+" --help' for usage")
	}
	_ = e.print(result.Failure(re))
	return e.Program.ExitCode(re.Code)
}

// print writes the final result, applying --query and --pretty.
func (e *Env) print(v any) error {
	e.outMu.Lock()
	defer e.outMu.Unlock()
	if obj, ok := v.(*result.Object); ok && e.StreamResult {
		v = obj.WithFirst("type", "result")
	}
	if e.Query == "" {
		return result.Write(e.Out, v, e.Pretty)
	}
	b, err := result.Marshal(v)
	if err != nil {
		return err
	}
	r := gjson.GetBytes(b, e.Query)
	if !r.Exists() {
		return nil
	}
	var s string
	if r.Type == gjson.String {
		s = r.Str
	} else {
		s = r.Raw
	}
	_, err = io.WriteString(e.Out, s+"\n")
	return err
}

// NewRoot builds the program's command tree with the shared flags and its
// whole help text. It is exported so that tests, the MCP server and the
// docs generator can build the tree without a subprocess.
func NewRoot(env *Env) *cobra.Command {
	root := buildRoot(env)
	root.Version = versionString()
	env.fillHelpText()
	return root
}

// buildRoot builds the tree and leaves the help text derived from it (the
// mcp command's lists, HelpText) to be filled by the first help shown: a
// plain call never renders it, and deriving it walks every flag of every
// tool (about a millisecond of every call's CPU).
func buildRoot(env *Env) *cobra.Command {
	p := env.Program
	root := &cobra.Command{
		Use:           p.Name,
		Short:         p.Short,
		Long:          p.Long,
		Version:       Version, // with the revision once it is shown (wantsVersion)
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetIn(env.In)
	root.SetOut(env.Out)
	root.SetErr(env.Err)
	root.SetVersionTemplate("{{.Name}} version {{.Version}}\n")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &result.Error{Code: result.CodeUsage, Message: err.Error(), Err: err}
	})

	pf := root.PersistentFlags()
	pf.BoolVar(&env.Pretty, "pretty", false, "indent the JSON result")
	pf.StringVarP(&env.Query, "query", "q", "", "print only the value at this gjson `PATH` of the result, raw")
	pf.StringVar(&env.RequestFile, "request", "", "read the operation as a JSON object from `FILE` (- for stdin)")
	pf.StringVar(&env.ConfigFile, "config", "", "read configuration from `FILE` instead of the user's config file")
	pf.BoolVar(&env.Verbose, "verbose", false, "write diagnostics for humans to stderr")
	pf.StringVar(&env.Description, "description", "", "the human-readable intent of this call, recorded for approval prompts and audit logs")
	MarkFlags(pf, NoRequest, "pretty", "query", "request", "config", "verbose")
	MarkFlags(pf, Operator, "config")

	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		return env.prepare(cmd)
	}
	p.Build(root, env)
	addSchemaCmd(root, env)
	markGroups(root, env)
	typeArgErrors(root)
	// Every command inherits the root's help function (cobra looks it up
	// through the parents), --help and the help command alike.
	help := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		env.fillHelpText()
		help(c, args)
	})
	return root
}

// HelpText registers f to fill help text derived from the marks of every
// command (the mcp command's lists), once the whole tree is built and
// whatever order the commands were added in. f runs before the first help
// is shown and before NewRoot returns (man pages, schemas, the MCP
// server's tool list); a plain call never runs it.
func (e *Env) HelpText(f func()) { e.helpText = append(e.helpText, f) }

func (e *Env) fillHelpText() {
	hooks := e.helpText
	e.helpText = nil
	for _, f := range hooks {
		f()
	}
}

// typeArgErrors makes cobra's argument checks return usage errors as typed
// values, so the harness never recognises them by their text. A command
// without a check gets cobra's own default made explicit: a root with
// subcommands refuses an unknown one, anything else takes any arguments.
func typeArgErrors(c *cobra.Command) {
	for _, sub := range c.Commands() {
		typeArgErrors(sub)
	}
	check := c.Args
	if check == nil {
		if c.HasParent() || !c.HasSubCommands() {
			check = cobra.ArbitraryArgs
		} else {
			check = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
				}
				return nil
			}
		}
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return &result.Error{Code: result.CodeUsage, Message: err.Error(), Err: err}
		}
		return nil
	}
}

// markGroups makes a command that only groups subcommands (the root of
// agentjob, agentsh session, …) answer a bare call with a usage error
// instead of human help on stdout.
func markGroups(c *cobra.Command, env *Env) {
	for _, sub := range c.Commands() {
		markGroups(sub, env)
	}
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			var names []string
			for _, s := range cmd.Commands() {
				if s.IsAvailableCommand() {
					names = append(names, s.Name())
				}
			}
			if len(args) > 0 {
				return result.Errorf(result.CodeUsage, "unknown command %q for %q", args[0], cmd.CommandPath()).With("commands", names)
			}
			return result.Errorf(result.CodeUsage, "%s needs a subcommand: %s", cmd.CommandPath(), strings.Join(names, ", ")).With("commands", names)
		}
	}
}

// wantsVersion reports whether args ask for --version, the one output
// that shows the build's revision: reading it (debug.ReadBuildInfo parses
// the module list) is left out of every other call.
func wantsVersion(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--version" || strings.HasPrefix(a, "--version=") {
			return true
		}
	}
	return false
}

// versionString is the version with the build's VCS revision, if known.
func versionString() string {
	v := Version
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
	}
	return v
}

// prepare runs before every command: it applies the request, then the
// environment and config file, to the flags the command line left unset.
func (e *Env) prepare(cmd *cobra.Command) error {
	set := map[string]bool{}
	cmd.Flags().Visit(func(f *pflag.Flag) { set[f.Name] = true })
	if e.RequestFile != "" {
		if err := e.applyRequest(cmd, set); err != nil {
			return err
		}
	}
	return e.applyConfig(cmd, set)
}

// FlagChanged reports whether the named flag was set on the command line,
// by the request, or by configuration.
func FlagChanged(cmd *cobra.Command, name string) bool {
	f := cmd.Flags().Lookup(name)
	return f != nil && f.Changed
}
