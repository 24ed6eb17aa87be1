// Package guard is the command policy as the CLIs apply it: the --policy,
// --policy-default and --approved flags, and the decision made before
// anything runs. agentsh (one-shot and sessions) and agentjob start share
// it, so command screening does not change with the backend.
package guard

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/policy"
	"github.com/agentplane/agentplane/pkg/result"
)

// Options are the policy flags.
type Options struct {
	Files    []string
	Default  string
	Approved bool
}

// AddFlags adds the policy flags. The policy files and default come from
// the operator (flags, AGENTPLANE_POLICY, the user config), never from a
// request: a model's tool call cannot choose its own rules or approve itself.
func AddFlags(fs *pflag.FlagSet, o *Options) {
	fs.StringArrayVar(&o.Files, "policy", nil, "decide commands with the prefix rules in `FILE` (repeatable)")
	fs.Var(clikit.EnumValue{S: &o.Default, Allowed: []string{"", policy.Allow, policy.Prompt, policy.Forbidden}}, "policy-default", "decision for commands no rule matches: allow (default), prompt or forbidden")
	fs.BoolVar(&o.Approved, "approved", false, "a human approved this call: run commands the policy says to prompt for (never forbidden ones)")
	for _, n := range []string{"policy", "policy-default"} {
		_ = fs.SetAnnotation(n, clikit.AnnotConfig, []string{"true"})
	}
	for _, n := range []string{"policy", "policy-default", "approved"} {
		_ = fs.SetAnnotation(n, clikit.AnnotNoRequest, []string{"true"})
	}
}

// Load reads the rules, or returns nil when no policy is in force.
func (o *Options) Load() (*policy.Policy, error) {
	if len(o.Files) == 0 && o.Default == "" {
		return nil, nil
	}
	p, err := policy.Load(o.Files...)
	if err != nil {
		return nil, err
	}
	if o.Default != "" {
		p.SetDefault(o.Default)
	}
	return p, nil
}

// Decide checks a shell string (script != "") or an argv against the
// policy. It returns the decision (nil without a policy) and, when the call
// may not run, the error to report: policy_denied for forbidden (never
// overridable), approval_required for prompt without --approved.
func (o *Options) Decide(script string, argv []string) (*policy.Decision, error) {
	p, err := o.Load()
	if err != nil || p == nil {
		return nil, err
	}
	var d policy.Decision
	if script != "" {
		d = p.Check(script)
	} else {
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

// Object renders a decision as the value of a result's "policy" field.
func Object(d *policy.Decision) *result.Object {
	obj := result.New()
	Report(obj, d)
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

WHAT IS CHECKED
The command string is parsed with a real shell parser (mvdan.cc/sh) and every simple command it would run is matched: both sides of && || ; and &, every pipeline stage, subshells and groups, if/while/for/case, $(...) and backticks anywhere, process substitutions, bash -c/sh -c bodies and heredocs fed to a shell (recursively), and the commands run by wrappers (sudo, doas, env, xargs, nice, ionice, timeout, nohup, stdbuf, time, command, exec, setsid, chroot, busybox, find -exec). Quotes and escapes are resolved, so \rm, "r"m and $'\x72m' are all rm; a path such as /bin/rm also matches a rule for rm. The strictest decision over all commands wins (forbidden > prompt > allow).

LIMITS
What cannot be known without running the command needs approval (prompt, with the reason in unresolved): a command name that comes from a variable or a substitution, eval, source of a computed path, functions defined in the string, curl ... | sh. The policy does not look inside scripts run from files, the code passed to python -c or perl -e, remote ssh commands or git aliases. It is a screen for honest mistakes and approval prompts, not a sandbox: combine it with --sandbox for containment.`
