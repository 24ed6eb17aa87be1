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
		Annotations: map[string]string{clikit.AnnotTool: env.Program.Name + "_check", clikit.AnnotArgs: "argv..."},
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
