package policy

import (
	"strings"

	"github.com/agentplane/agentplane/pkg/result"
)

// Decision is the verdict on a script or argv, with the reasons for it.
type Decision struct {
	// Decision is the strictest decision over all commands, and at least
	// Prompt when anything is unresolved.
	Decision   string            `json:"decision"`
	Commands   []CommandDecision `json:"commands"`
	Unresolved []Unresolved      `json:"unresolved"`
}

// CommandDecision is the verdict on one extracted command.
type CommandDecision struct {
	Argv     []string `json:"argv"`
	Decision string   `json:"decision"`
	// Rule is the pattern of the deciding rule as text, or "" when the
	// policy's default decided.
	Rule          string `json:"rule"`
	Justification string `json:"justification"`
	// Source is the deciding rule's "file:line", or "" for the default.
	Source string `json:"source"`
}

// Check decides a shell string. A string that does not parse is decided
// Prompt, with the parse error as an unresolved item: what it would run is
// unknown.
func (p *Policy) Check(script string) Decision {
	cmds, unres, err := Extract(script)
	return p.decideExtracted(script, cmds, unres, err)
}

// CheckStdin decides a shell string run with stdin as its standard input:
// a shell in it that reads its script from there has stdin decided as
// that script.
func (p *Policy) CheckStdin(script, stdin string) Decision {
	cmds, unres, err := ExtractStdin(script, stdin)
	return p.decideExtracted(script, cmds, unres, err)
}

// CheckArgvStdin is CheckArgv for an argv run with stdin as its input.
func (p *Policy) CheckArgvStdin(argv []string, stdin string) Decision {
	cmds, unres := ExtractArgvStdin(argv, stdin)
	return p.decide(cmds, unres)
}

func (p *Policy) decideExtracted(script string, cmds []Command, unres []Unresolved, err error) Decision {
	if err != nil {
		// The shell runs what precedes a syntax error, and a string too
		// long or too deep to read may hold anything: refused, not guessed.
		unres = append(unres, Unresolved{Text: script, Reason: err.Error(), Kind: KindRefused})
	}
	return p.decide(cmds, unres)
}

// CheckArgv decides an argv run without a shell. Wrappers in it (sudo, env,
// bash -c, ...) are looked into as in Check.
func (p *Policy) CheckArgv(argv []string) Decision {
	cmds, unres := ExtractArgv(argv)
	return p.decide(cmds, unres)
}

func (p *Policy) decide(cmds []Command, unres []Unresolved) Decision {
	d := Decision{Decision: Allow, Commands: []CommandDecision{}, Unresolved: []Unresolved{}}
	strictest := p.strictest()
	raise := func(to string) {
		if rank(to) > rank(d.Decision) {
			d.Decision = to
		}
	}
	note := func(u Unresolved) {
		switch u.Kind {
		case KindCouldMatch:
			// Only a rule (or default) stricter than allow can be matched.
			if strictest == Allow {
				return
			}
			raise(Prompt)
		case KindRefused:
			// Beyond the limits anything could run: the strictest the
			// policy can decide, never less than prompt.
			raise(strictest)
			raise(Prompt)
		default:
			raise(Prompt)
		}
		d.Unresolved = append(d.Unresolved, u)
	}
	for _, u := range unres {
		note(u)
	}
	for _, c := range cmds {
		cd := p.decideArgv(c.Argv)
		raise(cd.Decision)
		d.Commands = append(d.Commands, cd)
		if c.wild == nil || p == nil {
			continue
		}
		// Words known only at run time could complete a stricter rule.
		for i := range p.Rules {
			r := &p.Rules[i]
			if rank(r.Decision) > rank(cd.Decision) && r.couldMatch(c) {
				note(Unresolved{Text: strings.Join(c.Argv, " "), Kind: KindCouldMatch,
					Reason: "words known only at run time could make it match the " + r.Decision + " rule " + r.PatternText()})
				break
			}
		}
	}
	return d
}

// strictest is the strictest decision the policy can make.
func (p *Policy) strictest() string {
	s := p.defaultDecision()
	if p != nil {
		for _, r := range p.Rules {
			if rank(r.Decision) > rank(s) {
				s = r.Decision
			}
		}
	}
	return s
}

// Merge combines the decisions on two strings that one call runs (a job and
// its readiness command): the strictest decision, every command and every
// unresolved item. Either may be nil.
func Merge(a, b *Decision) *Decision {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	d := Decision{Decision: a.Decision, Commands: append(append([]CommandDecision{}, a.Commands...), b.Commands...),
		Unresolved: append(append([]Unresolved{}, a.Unresolved...), b.Unresolved...)}
	if rank(b.Decision) > rank(d.Decision) {
		d.Decision = b.Decision
	}
	return &d
}

// DecideExec decides one argv exactly as a program receives it, without
// looking into wrappers or shell strings: the runtime enforcer calls it for
// every image a process executes, where a wrapper's inner command is itself
// an exec that gets decided in its turn.
func (p *Policy) DecideExec(argv []string) CommandDecision { return p.decideArgv(argv) }

// Stricter reports whether decision a is stricter than b.
func Stricter(a, b string) bool { return rank(a) > rank(b) }

// decideArgv applies the strictest matching rule, the first of equals, or
// the default.
func (p *Policy) decideArgv(argv []string) CommandDecision {
	var best *Rule
	if p != nil {
		for i := range p.Rules {
			r := &p.Rules[i]
			if r.Matches(argv) && (best == nil || rank(r.Decision) > rank(best.Decision)) {
				best = r
			}
		}
	}
	if best == nil {
		return CommandDecision{Argv: argv, Decision: p.defaultDecision()}
	}
	return CommandDecision{Argv: argv, Decision: best.Decision, Rule: best.PatternText(),
		Justification: best.Justification, Source: best.Source}
}

func (p *Policy) defaultDecision() string {
	if p == nil || p.Default == "" {
		return Allow
	}
	if rank(p.Default) < 0 {
		return Prompt
	}
	return p.Default
}

// Err returns nil for an Allow decision, a result.CodePolicyDenied error for Forbidden and
// a result.CodeApprovalRequired error for Prompt, naming the first command (or
// unresolved item) responsible. The details carry the decision's commands and
// unresolved items, so a caller can report them as they are.
func (d Decision) Err() error {
	var code, verb string
	switch d.Decision {
	case Allow:
		return nil
	case Forbidden:
		code, verb = result.CodePolicyDenied, "is forbidden by the policy"
	default:
		code, verb = result.CodeApprovalRequired, "needs approval"
	}
	what := ""
	for _, c := range d.Commands {
		if c.Decision == d.Decision {
			what = strings.Join(c.Argv, " ")
			if c.Justification != "" {
				verb += ": " + c.Justification
			}
			break
		}
	}
	if what == "" && len(d.Unresolved) > 0 {
		u := d.Unresolved[0]
		what = u.Text
		verb += " (" + u.Reason + ")"
	}
	if what == "" {
		what = "the command"
	}
	return result.Errorf(code, "%s %s", what, verb).
		With("decision", d.Decision).With("commands", d.Commands).With("unresolved", d.Unresolved)
}
