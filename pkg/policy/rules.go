package policy

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/mattn/go-shellwords"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"github.com/agentplane/agentplane/internal/ctlfile"
	"github.com/agentplane/agentplane/pkg/result"
)

// Decisions, from the most permissive to the strictest.
const (
	Allow     = "allow"
	Prompt    = "prompt"
	Forbidden = "forbidden"
)

// maxSteps bounds the Starlark evaluation of one rules file, so a file that
// computes its rules cannot stall the program that loads it.
const maxSteps = 10_000_000

// Rule is one prefix_rule from a rules file.
type Rule struct {
	// Pattern is the token prefix; each element lists the alternatives
	// accepted at that position.
	Pattern       [][]string
	Decision      string
	Justification string
	// Source is where the rule was written, "file:line".
	Source string
}

// Policy is a set of rules and the decision for commands no rule matches.
// The zero value, and a nil *Policy, allow everything. Once loaded, a Policy
// may be used by concurrent Check calls; loading more rules is not safe
// concurrently with checks.
type Policy struct {
	Rules []Rule
	// Default decides commands that no rule matches: Allow, Prompt or
	// Forbidden. Empty means Allow; any other value is treated as Prompt,
	// failing closed.
	Default string
	// Read are the rule files as they were read (AddFile): which files
	// the rules came from, for a check that no sandboxed command could
	// have written them. Not sent anywhere.
	Read []ctlfile.File `json:"-"`
}

// New returns an empty policy whose default is Allow.
func New() *Policy { return &Policy{Default: Allow} }

// Load reads rules files in order into a new policy.
func Load(files ...string) (*Policy, error) {
	p := New()
	for _, f := range files {
		if err := p.AddFile(f); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// LoadSource reads one rules file given as bytes; name is used in messages
// and in the Source of the rules.
func LoadSource(name string, src []byte) (*Policy, error) {
	p := New()
	if err := p.AddSource(name, src); err != nil {
		return nil, err
	}
	return p, nil
}

// AddFile reads a rules file and appends its rules to p.
func (p *Policy) AddFile(path string) error {
	f, err := ctlfile.Read(path)
	if err != nil {
		return result.Errorf(result.CodePolicyInvalid, "cannot read policy file %s: %v", path, unwrapPathError(err)).
			With("file", path).Wrap(err)
	}
	if err := p.AddSource(path, f.Data); err != nil {
		return err
	}
	f.Data = nil
	p.Read = append(p.Read, f)
	return nil
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// SetDefault sets the decision for unmatched commands after checking it.
func (p *Policy) SetDefault(decision string) error {
	if rank(decision) < 0 {
		return result.Errorf(result.CodePolicyInvalid, "default decision %q is not allow, prompt or forbidden", decision).
			With("decision", decision)
	}
	p.Default = decision
	return nil
}

// AddSource evaluates one rules file and appends its rules to p. On error p
// is unchanged.
func (p *Policy) AddSource(name string, src []byte) error {
	var rules []Rule
	var failure *result.Error
	prefixRule := func(thread *starlark.Thread, fn *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		pos := thread.CallFrame(1).Pos
		r, err := parseRule(name, pos, fn.Name(), args, kwargs)
		if err != nil {
			failure = err
			return nil, err
		}
		rules = append(rules, r)
		return starlark.None, nil
	}
	thread := &starlark.Thread{
		Name: name,
		// Rules files are data: printing would reach the process's stderr,
		// which engines never write to.
		Print: func(*starlark.Thread, string) {},
	}
	thread.SetMaxExecutionSteps(maxSteps)
	predeclared := starlark.StringDict{"prefix_rule": starlark.NewBuiltin("prefix_rule", prefixRule)}
	_, err := starlark.ExecFileOptions(&syntax.FileOptions{}, thread, name, src, predeclared)
	if failure != nil {
		return failure
	}
	if err != nil {
		return starlarkError(name, err)
	}
	p.Rules = append(p.Rules, rules...)
	return nil
}

// starlarkError turns a Starlark syntax, resolve or evaluation error into a
// policy_invalid error that leads with its position.
func starlarkError(name string, err error) *result.Error {
	msg := err.Error()
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		for i := len(ee.CallStack) - 1; i >= 0; i-- {
			if pos := ee.CallStack[i].Pos; pos.IsValid() {
				msg = fmt.Sprintf("%s: %s", pos, ee.Msg)
				break
			}
		}
	}
	if !strings.HasPrefix(msg, name) {
		msg = name + ": " + msg
	}
	return result.Errorf(result.CodePolicyInvalid, "invalid policy: %s", msg).With("file", name).Wrap(err)
}

// parseRule builds and checks one rule from the arguments of prefix_rule.
func parseRule(file string, pos syntax.Position, fname string, args starlark.Tuple, kwargs []starlark.Tuple) (Rule, *result.Error) {
	where := fmt.Sprintf("%s:%d", file, pos.Line)
	invalid := func(format string, a ...any) *result.Error {
		return result.Errorf(result.CodePolicyInvalid, "invalid policy: %s: %s", pos, fmt.Sprintf(format, a...)).
			With("file", file).With("line", pos.Line)
	}
	var patternV, matchV, notMatchV starlark.Value
	decision, justification := Allow, ""
	if err := starlark.UnpackArgs(fname, args, kwargs,
		"pattern", &patternV,
		"decision?", &decision,
		"justification?", &justification,
		"match?", &matchV,
		"not_match?", &notMatchV,
	); err != nil {
		return Rule{}, invalid("%v", err)
	}
	r := Rule{Decision: decision, Justification: justification, Source: where}
	if rank(decision) < 0 {
		return Rule{}, invalid("%s: decision %q is not allow, prompt or forbidden", fname, decision)
	}
	elems, ok := listItems(patternV)
	if !ok {
		return Rule{}, invalid("%s: pattern must be a list, not %s", fname, patternV.Type())
	}
	if len(elems) == 0 {
		return Rule{}, invalid("%s: pattern must not be empty", fname)
	}
	for i, e := range elems {
		if s, ok := starlark.AsString(e); ok {
			r.Pattern = append(r.Pattern, []string{s})
			continue
		}
		alts, ok := listItems(e)
		if !ok || len(alts) == 0 {
			return Rule{}, invalid("%s: pattern element %d must be a string or a non-empty list of strings, not %s", fname, i, e.Type())
		}
		var set []string
		for _, a := range alts {
			s, ok := starlark.AsString(a)
			if !ok {
				return Rule{}, invalid("%s: pattern element %d: alternative must be a string, not %s", fname, i, a.Type())
			}
			set = append(set, s)
		}
		r.Pattern = append(r.Pattern, set)
	}
	for _, ex := range []struct {
		kw    string
		v     starlark.Value
		match bool
	}{{"match", matchV, true}, {"not_match", notMatchV, false}} {
		if ex.v == nil || ex.v == starlark.None {
			continue
		}
		items, ok := listItems(ex.v)
		if !ok {
			return Rule{}, invalid("%s: %s must be a list, not %s", fname, ex.kw, ex.v.Type())
		}
		for _, item := range items {
			argv, err := exampleArgv(item)
			if err != nil {
				return Rule{}, invalid("%s: rule %s: %s example %s: %v", fname, r.PatternText(), ex.kw, item, err).
					With("rule", r.PatternText()).With("example", item.String())
			}
			if r.Matches(argv) != ex.match {
				verb := "does not match"
				if !ex.match {
					verb = "matches"
				}
				return Rule{}, result.Errorf(result.CodePolicyInvalid,
					"invalid policy: %s: rule %s: %s example %s %s the rule", where, r.PatternText(), ex.kw, quoteArgv(argv), verb).
					With("file", file).With("line", pos.Line).
					With("rule", r.PatternText()).With("example", argv)
			}
		}
	}
	return r, nil
}

// listItems returns the elements of a Starlark list or tuple.
func listItems(v starlark.Value) ([]starlark.Value, bool) {
	switch v := v.(type) {
	case *starlark.List:
		out := make([]starlark.Value, v.Len())
		for i := range out {
			out[i] = v.Index(i)
		}
		return out, true
	case starlark.Tuple:
		return v, true
	}
	return nil, false
}

// exampleArgv converts a match/not_match example, a list of strings or a
// command line, to an argv.
func exampleArgv(v starlark.Value) ([]string, error) {
	if s, ok := starlark.AsString(v); ok {
		argv, err := shellwords.Parse(s)
		if err != nil {
			return nil, err
		}
		if len(argv) == 0 {
			return nil, errors.New("empty command")
		}
		return argv, nil
	}
	items, ok := listItems(v)
	if !ok {
		return nil, fmt.Errorf("must be a string or a list of strings, not %s", v.Type())
	}
	if len(items) == 0 {
		return nil, errors.New("empty command")
	}
	argv := make([]string, len(items))
	for i, it := range items {
		s, ok := starlark.AsString(it)
		if !ok {
			return nil, fmt.Errorf("element %d must be a string, not %s", i, it.Type())
		}
		argv[i] = s
	}
	return argv, nil
}

// Matches reports whether the rule's pattern is a prefix of argv. When
// argv[0] is a path, its base name is tried as well, so a rule for rm also
// covers /bin/rm.
func (r *Rule) Matches(argv []string) bool {
	for _, f := range forms(argv) {
		if r.matchesExactly(f) {
			return true
		}
		if len(f) > 0 && strings.Contains(f[0], "/") {
			alt := append([]string{baseName(f[0])}, f[1:]...)
			if r.matchesExactly(alt) {
				return true
			}
		}
	}
	return false
}

func (r *Rule) matchesExactly(argv []string) bool {
	if len(r.Pattern) == 0 || len(argv) < len(r.Pattern) {
		return false
	}
	for i, alts := range r.Pattern {
		ok := false
		for _, a := range alts {
			if tokenMatches(argv[i], a, r.Decision != Allow) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// couldMatch reports whether the rule would match c once the words known
// only at run time are known: each of the rule's positions is either a
// wild word, past c.open (unknown words may follow), or matches.
func (r *Rule) couldMatch(c Command) bool {
	argv := c.Argv
	if len(argv) > 0 && strings.Contains(argv[0], "/") {
		argv = append([]string{baseName(argv[0])}, argv[1:]...)
	}
	for i, alts := range r.Pattern {
		if i >= c.open {
			return true
		}
		if i >= len(argv) {
			return false
		}
		if i < len(c.wild) && c.wild[i] {
			continue
		}
		ok := false
		for _, a := range alts {
			if tokenMatches(argv[i], a, r.Decision != Allow) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// PatternText renders the pattern as it is written in a rules file, for
// messages and decisions: ["git", ["push", "fetch"]].
func (r *Rule) PatternText() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, alts := range r.Pattern {
		if i > 0 {
			b.WriteString(", ")
		}
		if len(alts) == 1 {
			b.WriteString(strconv.Quote(alts[0]))
			continue
		}
		b.WriteByte('[')
		for j, a := range alts {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.Quote(a))
		}
		b.WriteByte(']')
	}
	b.WriteByte(']')
	return b.String()
}

func quoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = strconv.Quote(a)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// rank orders decisions by strictness; -1 for an unknown decision.
func rank(decision string) int {
	switch decision {
	case Allow:
		return 0
	case Prompt:
		return 1
	case Forbidden:
		return 2
	}
	return -1
}
