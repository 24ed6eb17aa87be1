// Package guard is the command policy as the CLIs apply it: the --policy,
// --policy-default and --approved flags, and the decision made before
// anything runs. agentsh (one-shot and sessions) and agentjob start share
// it, so command screening does not change with the backend.
package guard

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentplane/agentplane/internal/ctlfile"
	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/execguard"
	"github.com/agentplane/agentplane/pkg/policy"
	"github.com/agentplane/agentplane/pkg/result"
)

// Options are the policy flags.
type Options struct {
	Files    []string
	Default  string
	Approved bool
	// Enforce is runtime (the default with a policy) or static.
	Enforce string

	loaded *policy.Policy // the policy read by the first Load
}

// AddFlags adds the policy flags. The policy files and default come from
// the operator (flags, AGENTPLANE_POLICY, the user config), never from a
// request: a model's tool call cannot choose its own rules or approve itself.
func AddFlags(fs *pflag.FlagSet, o *Options) {
	AddPolicyFlags(fs, o)
	fs.BoolVar(&o.Approved, "approved", false, "a human approved this call: run commands the policy says to prompt for (never forbidden ones)")
	clikit.MarkFlags(fs, clikit.NoRequest, "approved")
	clikit.MarkFlags(fs, clikit.Operator, "approved")
	clikit.MarkFlags(fs, clikit.NotForwarded, "approved")
}

// AddPolicyFlags adds the flags that choose the policy, without
// --approved: for operations that run nothing by themselves (session start).
func AddPolicyFlags(fs *pflag.FlagSet, o *Options) {
	fs.StringArrayVar(&o.Files, "policy", nil, "decide commands with the prefix rules in `FILE` (repeatable)")
	fs.Var(clikit.EnumValue{S: &o.Default, Allowed: []string{"", policy.Allow, policy.Prompt, policy.Forbidden}}, "policy-default", "decision for commands no rule matches: allow (default), prompt or forbidden")
	fs.Var(clikit.EnumValue{S: &o.Enforce, Allowed: []string{"", execguard.EnforceRuntime, execguard.EnforceStatic}}, "policy-enforce",
		"runtime (default with a policy): also decide every program the command executes while it runs; static: decide the command string before the call only")
	clikit.MarkFlags(fs, clikit.Configurable, "policy", "policy-default", "policy-enforce")
	clikit.MarkFlags(fs, clikit.NoRequest, "policy", "policy-default", "policy-enforce")
	clikit.MarkFlags(fs, clikit.Operator, "policy", "policy-default")
}

// Load reads the rules, or returns nil when no policy is in force.
func (o *Options) Load() (*policy.Policy, error) {
	if len(o.Files) == 0 && o.Default == "" {
		return nil, nil
	}
	if o.loaded != nil {
		return o.loaded, nil
	}
	p, err := policy.Load(o.paths()...)
	if err != nil {
		return nil, err
	}
	if o.Default != "" {
		p.SetDefault(o.Default)
	}
	o.loaded = p
	return p, nil
}

// Read are the rule files as Load read them (none before Load).
func (o *Options) Read() []ctlfile.File {
	if o.loaded == nil {
		return nil
	}
	return o.loaded.Read
}

// ControlFiles are the rule files a call could read, absolute, each once:
// the call's own (its --policy files as named, and where Load read them: a
// link's target), then those every source of
// configuration names (AGENTPLANE_POLICY, the config files' policy), which
// a flag shadows for this call only: the next call without it reads them.
// The sandbox keeps them all read-only, and agentfs under the lock refuses
// to change them.
func ControlFiles(env *clikit.Env, o *Options) []string {
	var files []string
	if o != nil {
		files = o.Files
	}
	var out []string
	add := func(f string) {
		if abs := ctlfile.Abs(expandHome(f)); f != "" && !slices.Contains(out, abs) {
			out = append(out, abs)
		}
	}
	for _, f := range files {
		add(f)
	}
	if o != nil && o.Active() {
		// And where the files Load read are (a link's target).
		_, _ = o.Load() // a file that cannot be read fails the call elsewhere
		for _, f := range o.Read() {
			add(f.Real)
		}
	}
	var probe Options
	fs := pflag.NewFlagSet("probe", pflag.ContinueOnError)
	AddPolicyFlags(fs, &probe)
	sources, _ := env.Sources() // an unreadable file fails the call elsewhere
	for _, src := range sources {
		if v, ok := src.Lookup(fs.Lookup("policy")); ok {
			for _, f := range v {
				add(f)
			}
		}
	}
	return out
}

// paths are the rule files as given, a leading ~/ being the home
// directory's (as in --allow-write): left as it is, it would name a
// directory ~ below wherever the call runs, which a command could plant.
func (o *Options) paths() []string {
	out := make([]string, len(o.Files))
	for i, f := range o.Files {
		out[i] = expandHome(f)
	}
	return out
}

func expandHome(p string) string {
	if strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[2:])
		}
	}
	return p
}

// Active reports whether a policy is in force.
func (o *Options) Active() bool { return len(o.Files) > 0 || o.Default != "" }

// Runtime prepares the runtime guard for one run of a command, or returns
// nil when no policy is in force or the operator chose static enforcement.
// self is the program's executable, which routes execguard.Command.
// Where the kernel cannot trace, the error is policy_unavailable.
func (o *Options) Runtime(self string) (*execguard.Guard, error) {
	if o.Enforce == execguard.EnforceStatic {
		return nil, nil
	}
	p, err := o.Load()
	if err != nil || p == nil {
		return nil, err
	}
	return execguard.Prepare(p, o.Approved, self)
}

// RuntimePolicy returns the policy to enforce at run time, or nil when no
// policy is in force or enforcement is static; for a job, whose supervisor
// prepares the guard of each run itself.
func (o *Options) RuntimePolicy() (*policy.Policy, error) {
	if o.Enforce == execguard.EnforceStatic {
		return nil, nil
	}
	p, err := o.Load()
	if err != nil || p == nil {
		return nil, err
	}
	return p, execguard.Available()
}

// Wrap puts argv (run as path, "" to look argv[0] up) under the runtime
// guard g, returning what the runner executes: self with the guard's argv,
// and the extra files (the command's own, files, then the guard's).
// sandboxed says argv starts the program's own sandbox helper.
func Wrap(g *execguard.Guard, path string, argv []string, files []*os.File, sandboxed bool) (string, []string, []*os.File) {
	if sandboxed {
		g.TrustFirst()
	}
	return g.Wrap(path, argv, files)
}

// Decide checks a shell string (script != "") or an argv against the
// policy. It returns the decision (nil without a policy) and, when the call
// may not run, the error to report: policy_denied for forbidden (never
// overridable), approval_required for prompt without --approved.
func (o *Options) Decide(script string, argv []string) (*policy.Decision, error) {
	return o.DecideInput(script, argv, nil)
}

// DecideInput is Decide for a call that feeds stdin (nil: none) to the
// command: a shell that reads its script from standard input has stdin
// decided as that script.
func (o *Options) DecideInput(script string, argv []string, stdin *string) (*policy.Decision, error) {
	p, err := o.Load()
	if err != nil || p == nil {
		return nil, err
	}
	var d policy.Decision
	switch {
	case script != "" && stdin != nil:
		d = p.CheckStdin(script, *stdin)
	case script != "":
		d = p.Check(script)
	case stdin != nil:
		d = p.CheckArgvStdin(argv, *stdin)
	default:
		d = p.CheckArgv(argv)
	}
	switch d.Decision {
	case policy.Allow:
		return &d, nil
	case policy.Prompt:
		if o.Approved {
			return &d, nil
		}
	}
	err = d.Err()
	if re, ok := err.(*result.Error); ok {
		re.With("decision", d.Decision).With("commands", d.Commands).With("unresolved", d.Unresolved)
		if d.Decision == policy.Prompt {
			re.With("hint", "ask a human; run it again with --approved if they agree")
		}
	}
	return &d, err
}

// StdinText returns what a call feeds the command on stdin, for the
// policy: the --stdin string, or the --stdin-file contents up to the size
// the policy reads (nil when there is none, or it cannot be read, in
// which case a shell reading it stays unresolved).
func StdinText(stdin []byte, file string) *string {
	switch {
	case stdin != nil:
		s := string(stdin)
		return &s
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return nil
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, policy.MaxScriptBytes+1))
		if err != nil || len(b) > policy.MaxScriptBytes {
			return nil
		}
		s := string(b)
		return &s
	}
	return nil
}

// NewCmdCheck builds `PROGRAM check -c STRING | -- ARGV`: the decision,
// without running anything. Exit status: 0 allow, 1 prompt, 2 forbidden.
func NewCmdCheck(env *clikit.Env) *cobra.Command {
	var script string
	o := &Options{}
	cmd := &cobra.Command{
		Use:   "check (-c STRING | -- PROGRAM [ARG...])",
		Short: "Decide a command against the policy without running it",
		Long: "Print the policy's decision on a shell string or an argv without running anything: every " +
			"command it would run, the decision for each and the rule that made it. Exit status 0 allow, " +
			"1 prompt, 2 forbidden.",
		Annotations: map[string]string{
			clikit.AnnotTool:  env.Program.Name + "_check",
			clikit.AnnotHints: clikit.Hints{ReadOnly: true, Idempotent: true}.String(),
			clikit.AnnotToolDoc: "Decide a command against the command policy without running it: every command it " +
				"would run, the decision for each (allow, prompt or forbidden) and the rule that made it.",
			clikit.AnnotArgs:      "argv...",
			clikit.AnnotManNotes:  policyLanguage,
			clikit.AnnotManResult: checkResult,
		},
		Example: "  " + env.Program.Name + " check --policy rules.star -c 'git status && git reset --hard'\n" +
			"  " + env.Program.Name + " check --policy rules.star -- rm -rf build || echo 'needs a human'",
	}
	cmd.Flags().StringVarP(&script, "command", "c", "", "the shell `STRING` to decide")
	cmd.Flags().SetInterspersed(false)
	AddFlags(cmd.Flags(), o)
	_ = cmd.Flags().MarkHidden("approved")
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		argv, err := env.Positional(cmd, args, 0)
		if err != nil {
			return nil, err
		}
		if (script == "") == (len(argv) == 0) {
			return nil, result.Errorf(result.CodeUsage, "give either -c STRING or -- PROGRAM [ARG...]")
		}
		p, err := o.Load()
		if err != nil {
			return nil, err
		}
		if p == nil {
			p = policy.New()
		}
		var d policy.Decision
		if script != "" {
			d = p.Check(script)
		} else {
			d = p.CheckArgv(argv)
		}
		exit := 0
		switch d.Decision {
		case policy.Prompt:
			exit = 1
		case policy.Forbidden:
			exit = 2
		}
		obj := result.New().Set("success", true)
		Report(obj, &d)
		if script != "" {
			obj.Set("command", script)
		} else {
			obj.Set("command", argv)
		}
		return &clikit.Outcome{Value: obj, Exit: exit}, nil
	})
	return cmd
}

// Report adds the decision's fields to a result object: decision,
// commands (each with its decision and rule) and unresolved.
func Report(obj *result.Object, d *policy.Decision) {
	cmds, unres := d.Commands, d.Unresolved
	if cmds == nil {
		cmds = []policy.CommandDecision{}
	}
	if unres == nil {
		unres = []policy.Unresolved{}
	}
	obj.Set("decision", d.Decision).Set("commands", cmds).Set("unresolved", unres)
}

// Object renders a decision as the value of a result's "policy" field,
// with what the runtime guard decided (rt, nil when it was not enforced)
// as "runtime" and the enforcement as "enforce".
func Object(d *policy.Decision, rt *execguard.Report) *result.Object {
	obj := result.New()
	Report(obj, d)
	if rt != nil {
		obj.Set("enforce", execguard.EnforceRuntime).Set("runtime", rt)
	} else {
		obj.Set("enforce", execguard.EnforceStatic)
	}
	return obj
}

const checkResult = `decision: allow, prompt or forbidden (the strictest over all commands)
commands: every simple command found, with argv, decision, rule, justification and source
unresolved: what could not be known without running it, with the reason
command: the string or argv checked`

// policyLanguage is the man page's description of the rules and their
// limits.
const policyLanguage = `THE POLICY LANGUAGE
A rules file is Starlark with one function, prefix_rule(pattern=[...], decision="allow"|"prompt"|"forbidden", justification="...", match=[...], not_match=[...]), the format of the Codex CLI's exec policy, so existing files load unchanged. pattern is a prefix of the argv; an element may be a list of alternatives (["git", ["push", "fetch"]]). decision defaults to allow. match and not_match are examples (argv lists, or strings split like a shell would) checked when the file loads: a failing example makes the file invalid (policy_invalid, naming the rule and the example). Commands no rule matches get --policy-default (allow unless configured). Rules come from --policy FILE (repeatable), AGENTPLANE_POLICY (comma-separated) or the policy key of the user config, never from the workspace, and never from a request.

WHAT IS CHECKED BEFORE THE CALL
The command string is parsed as bash parses it (mvdan.cc/sh) and every simple command it could run is matched: both sides of && || ; and &, every pipeline stage, subshells and groups, if/while/for/case, $(...) and backticks anywhere, process substitutions, bash -c/sh -c bodies, heredocs and here-strings fed to a shell (bash, sh -s, . /dev/stdin, bash /dev/stdin), --stdin given to a shell, recursively, and the commands run by wrappers (sudo, doas, env including env -S as env splits it, xargs, nice, ionice, timeout, nohup, stdbuf, time, command, exec, setsid, chroot, busybox, taskset, chrt, flock, strace, prlimit, ld.so PROGRAM, valgrind, su -c, runuser -c, sg, script -c, watch, find -exec, tar --to-command, ssh -o ProxyCommand, rsync -e). Abbreviated long options (timeout --sig, env --split) are read as the program reads them; an option that cannot be resolved needs approval. Quotes and escapes are resolved, so \rm, "r"m and $'\x72m' are all rm, and $'git\0' is git; braces are expanded ({push,pull}); git's global options (-C, -c, --git-dir) and dashed commands (git-push) are seen through; a prompt or forbidden rule's long options match their abbreviations (--har is --hard); a path such as /bin/rm also matches a rule for rm. The strictest decision over all commands wins (forbidden > prompt > allow).

What cannot be known before the call needs approval (prompt, with the reason in unresolved): a command name that comes from a variable or a substitution, eval, source of a computed path, functions defined in the string, a shell reading a pipe (curl ... | sh) or a process substitution, words that a variable, a glob, xargs or find -exec supply where a prompt or forbidden rule has a word, programs that run commands in their own language (sed e, awk system(), make --eval, git -c, vim -c, parallel, unshare, …), variables set in the string that a program runs or loads as code (GIT_SSH_COMMAND, EDITOR, PAGER, SHELL and the like are decided as the commands they hold; GIT_CONFIG_*, NODE_OPTIONS, MAKEFLAGS, LD_PRELOAD and the like, also through env X=v and sudo X=v, need approval), and bash turning data into code (PS4 with set -x, ${X@P}, BASH_ENV, BASH_FUNC_* given to env, arithmetic on a variable the string does not set to a number, subscripts evaluated by unset, printf -v or read, namerefs, ${!v}, declare -i, hash -p, mapfile -C, fc, compgen -F; a quoted '(...)' given to declare -a is parsed as the array assignment it is). A string too long, nested too deep, with too many commands, that does not parse, or with a heredoc that bash would end earlier than the parser, is refused with the strictest decision the policy can make: a limit never turns forbidden into prompt.

WHILE IT RUNS
With a policy, --policy-enforce runtime (the default) also decides every program image the command or any descendant executes, on its real argv (/proc/PID/cmdline at the PTRACE_EVENT_EXEC stop), after the exec and before the image's first instruction: through xargs, find -exec, make, an interpreter's system(), a script written in the same call, a renamed copy of a program (recognised by its file), a #! script (whose interpreter the kernel runs with the script's path for argv[0]: decided as the script with its arguments too). A forbidden exec, and a prompt-level one in a call without --approved, is killed there with the rest of the call's tree; the call fails with policy_denied or approval_required naming the argv, its parent chain and the rule. The result's policy.runtime and the audit log record what was decided. Sessions started with a policy in force have their shell traced for its life and decide each call's execs with that call's policy and --approved (a refused exec is killed, the call fails and is interrupted as a cancellation interrupts it, which can come after the shell has gone on to the next command of the line; the session lives on); jobs do so on every run, restart and --ready-cmd. Where the kernel cannot trace (agentplane itself under strace or gdb, ptrace forbidden), the call fails with policy_unavailable unless --policy-enforce static. A detached job or session started from inside a policed call does not outlive it. Under a policy, the shell and code-injecting environment variables (BASH_ENV, ENV, BASH_FUNC_*, LD_*, PYTHONSTARTUP, NODE_OPTIONS, PERL5OPT, GIT_CONFIG_*, TAR_OPTIONS, GOFLAGS, PATH, HOME, …) are operator settings: a flag, request or tool call that sets them is invalid_request.

LIMITS
Neither layer sees what a program does without executing another program: shell builtins (echo > file, cd, read), a program's own network calls and file writes, a git alias or hook that runs inside git, an interpreter's own code, the contents of a script file before it runs. At run time, a process of the tree that rewrites another's memory through /proc/PID/mem between the decision and the moment the program reads its argv is not stopped without a sandbox (process_vm_writev is refused to the whole tree), and a command can kill the tracer without a sandbox (which kills the tree; policy.runtime then says interrupted, with execs counting every image it let run). The policy is a screen and a run-time gate on programs, not a sandbox: combine it with --sandbox for containment of files, network and processes.`

// injecting names the environment variables that make a program run code
// the policy never sees as a command: a shell's startup file, shell
// functions, a preloaded library, an interpreter's startup options, git
// configuration (which can name programs to run), the lookup path of
// command names, and the configuration directories programs read.
var injecting = struct {
	names    map[string]bool
	prefixes []string
}{
	names: map[string]bool{
		"BASH_ENV": true, "ENV": true, "SHELLOPTS": true, "BASHOPTS": true, "PS4": true, "PS0": true,
		"PROMPT_COMMAND": true, "IFS": true, "PATH": true, "HOME": true, "XDG_CONFIG_HOME": true,
		"ZDOTDIR": true, "SHELL": true, "EDITOR": true, "VISUAL": true, "PAGER": true, "MANPAGER": true,
		"LESSOPEN": true, "LESSCLOSE": true, "GCONV_PATH": true, "PYTHONSTARTUP": true, "PYTHONPATH": true,
		"PYTHONHOME": true, "PYTHONINSPECT": true, "NODE_OPTIONS": true, "NODE_PATH": true, "PERL5OPT": true,
		"PERL5LIB": true, "PERLLIB": true, "PERL5DB": true, "RUBYOPT": true, "RUBYLIB": true,
		"JAVA_TOOL_OPTIONS": true, "_JAVA_OPTIONS": true, "JDK_JAVA_OPTIONS": true, "MAKEFLAGS": true,
		"MFLAGS": true, "GNUMAKEFLAGS": true, "RUSTC_WRAPPER": true, "SSH_ASKPASS": true, "SUDO_ASKPASS": true,
		"GIT_EXEC_PATH": true, "GIT_SSH": true, "GIT_SSH_COMMAND": true, "GIT_PROXY_COMMAND": true,
		"GIT_ASKPASS": true, "GIT_EDITOR": true, "GIT_SEQUENCE_EDITOR": true, "GIT_PAGER": true,
		"GIT_EXTERNAL_DIFF": true, "GIT_DIR": true, "GIT_TEMPLATE_DIR": true,
		// Options that name a program to run (tar --to-command, go
		// -toolexec), prompts bash expands, editors, pagers and browsers
		// programs start, and files or modules interpreters and libraries
		// load as code.
		"TAR_OPTIONS": true, "GOFLAGS": true, "PS1": true, "PS2": true, "PS3": true, "FCEDIT": true,
		"BROWSER": true, "SYSTEMD_PAGER": true, "SYSTEMD_EDITOR": true, "PYTHONUSERBASE": true,
		"BASH_LOADABLES_PATH": true, "OPENSSL_CONF": true, "OPENSSL_ENGINES": true, "OPENSSL_MODULES": true,
		"LUA_INIT": true, "LUA_PATH": true, "LUA_CPATH": true, "PHPRC": true, "PHP_INI_SCAN_DIR": true,
		"DOTNET_STARTUP_HOOKS": true, "MAVEN_OPTS": true, "GRADLE_OPTS": true, "RUSTC": true,
		"RUSTC_WORKSPACE_WRAPPER": true, "CARGO_BUILD_RUSTC_WRAPPER": true,
	},
	prefixes: []string{"BASH_FUNC_", "LD_", "GIT_CONFIG", "NPM_CONFIG_", "npm_config_", "DYLD_", "LUA_INIT_"},
}

// InjectsCode reports whether setting the environment variable key can make
// a command run code that no policy check sees.
func InjectsCode(key string) bool {
	if injecting.names[key] {
		return true
	}
	for _, p := range injecting.prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// CheckSurface refuses, while a policy is in force, the settings of a call
// that change what runs behind the policy's back: the shell program (flag
// shellFlag) and code-injecting environment variables (flag envFlag). They
// stay operator settings: a value the environment or config file gives the
// flag is accepted, one that a request, a tool call or the command line
// adds is invalid_request. Pass "" for a flag the command does not have.
func (o *Options) CheckSurface(env *clikit.Env, cmd *cobra.Command, shellFlag, envFlag string) error {
	if !o.Active() {
		return nil
	}
	if f := cmd.Flags().Lookup(shellFlag); shellFlag != "" && f != nil && f.Changed {
		vals, ok := env.Configured(cmd, shellFlag)
		if !ok || len(vals) == 0 || vals[len(vals)-1] != f.Value.String() {
			return result.Errorf(result.CodeInvalidRequest,
				"%q is an operator setting while a command policy is in force: the policy decides the command as the default shell runs it", strings.ReplaceAll(shellFlag, "-", "_")).
				With("key", strings.ReplaceAll(shellFlag, "-", "_"))
		}
	}
	if envFlag == "" || cmd.Flags().Lookup(envFlag) == nil {
		return nil
	}
	vals, _ := cmd.Flags().GetStringArray(envFlag)
	configured, _ := env.Configured(cmd, envFlag)
	return o.CheckEnv(vals, configured)
}

// CheckEnv refuses, while a policy is in force, K=V settings in vals whose
// variable injects code (InjectsCode), unless the operator configured that
// exact setting (configured).
func (o *Options) CheckEnv(vals, configured []string) error {
	if !o.Active() {
		return nil
	}
	for _, kv := range vals {
		k, _, _ := strings.Cut(kv, "=")
		if InjectsCode(k) && !slices.Contains(configured, kv) {
			return result.Errorf(result.CodeInvalidRequest,
				"the environment variable %s is an operator setting while a command policy is in force: it can make a command run code the policy never sees", k).
				With("key", "env").With("variable", k)
		}
	}
	return nil
}
