package policy

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

// sharedDir finds ../shared beside the repository root, the directory that
// holds go.mod.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("no go.mod above the test directory, so no ../shared to read")
		}
		dir = parent
	}
}

func TestConformanceExample(t *testing.T) {
	path := filepath.Join(sharedDir(t), "conformance", "codex-execpolicy", "example.codexpolicy")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("conformance example not available: %v", err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatalf("the conformance example must load unchanged: %v", err)
	}
	if len(p.Rules) != 8 {
		t.Errorf("loaded %d rules, the file has 8", len(p.Rules))
	}
	// Unmatched commands must not pass as allowed by accident: with a
	// prompt default, every allow below comes from a rule.
	p.Default = Prompt
	cases := map[string]string{
		"git reset --hard":       Forbidden,
		"git reset --hard HEAD":  Forbidden,
		"cp a b":                 Prompt,
		"cp -r src dest":         Prompt,
		"ls":                     Allow,
		"ls -la /tmp":            Allow,
		"cat README.md":          Allow,
		"head -n 5 CHANGELOG":    Allow,
		"printenv PATH":          Allow,
		"pwd":                    Allow,
		"which python3":          Allow,
		"git reset --keep":       Prompt, // the default: no rule matches
		"ls && git reset --hard": Forbidden,
	}
	for script, want := range cases {
		d := p.Check(script)
		if d.Decision != want {
			t.Errorf("Check(%q) = %s, want %s (%+v)", script, d.Decision, want, d)
		}
	}
	d := p.Check("git reset --hard")
	c := d.Commands[0]
	if c.Rule != `["git", "reset", "--hard"]` || c.Justification != "destructive operation" ||
		!strings.HasSuffix(c.Source, "example.codexpolicy:4") {
		t.Errorf("git reset --hard decided by %+v, want the rule at line 4 with its justification", c)
	}
}

func TestLoadInvalid(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string // substrings of the message
	}{
		{"failing match example", `prefix_rule(pattern=["git", "push"], match=[["git", "pull"]])`,
			[]string{"bad.rules:1", `["git", "push"]`, `match example ["git", "pull"] does not match`}},
		{"failing string match example", "\n\nprefix_rule(\n  pattern=[\"ls\"],\n  match=[\"cat x\"],\n)",
			[]string{"bad.rules:3", `["ls"]`, `["cat", "x"]`}},
		{"failing not_match example", `prefix_rule(pattern=["git", ["push", "pull"]], decision="prompt", not_match=["git pull --rebase"])`,
			[]string{`["git", ["push", "pull"]]`, `not_match example ["git", "pull", "--rebase"] matches`}},
		{"unknown keyword", `prefix_rule(pattern=["ls"], decisions="allow")`,
			[]string{"bad.rules:1", "unexpected keyword argument", "decisions"}},
		{"unknown function", `prefix_rul(pattern=["ls"])`,
			[]string{"bad.rules:1", "undefined: prefix_rul"}},
		{"wrong type", `prefix_rule(pattern="ls")`,
			[]string{"bad.rules:1", "pattern must be a list"}},
		{"wrong decision type", `prefix_rule(pattern=["ls"], decision=1)`,
			[]string{"bad.rules:1", "decision"}},
		{"unknown decision", `prefix_rule(pattern=["ls"], decision="deny")`,
			[]string{"bad.rules:1", `"deny"`}},
		{"empty pattern", `prefix_rule(pattern=[])`,
			[]string{"pattern must not be empty"}},
		{"bad alternative", `prefix_rule(pattern=["git", [1]])`,
			[]string{"alternative must be a string"}},
		{"bad example", `prefix_rule(pattern=["ls"], match=[1])`,
			[]string{"match example 1"}},
		{"missing pattern", `prefix_rule(decision="allow")`,
			[]string{"missing argument for pattern"}},
		{"syntax error", "prefix_rule(pattern=[\"ls\"]\n",
			[]string{"bad.rules:"}},
		{"not starlark", "this is not a rules file",
			[]string{"bad.rules:1"}},
		{"load", `load("other.star", "x")`,
			[]string{"bad.rules:1"}},
		{"runaway loop", "def f():\n  for i in range(1000000000):\n    pass\nf()\n",
			[]string{"bad.rules:"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := LoadSource("bad.rules", []byte(tc.src))
			var e *result.Error
			if !errors.As(err, &e) || e.Code != result.CodePolicyInvalid {
				t.Fatalf("LoadSource = %v, %v; want a %s error", p, err, result.CodePolicyInvalid)
			}
			for _, w := range tc.want {
				if !strings.Contains(e.Message, w) {
					t.Errorf("message %q does not contain %q", e.Message, w)
				}
			}
			if e.Details["file"] != "bad.rules" {
				t.Errorf("details %v do not name the file", e.Details)
			}
		})
	}
}

// A failing example's details name the rule and the example, for callers
// that render them.
func TestLoadInvalidDetails(t *testing.T) {
	_, err := LoadSource("x.rules", []byte(`prefix_rule(pattern=["rm"], decision="forbidden", not_match=["rm -f x"])`))
	e := result.AsError(err)
	if e.Details["rule"] != `["rm"]` || !reflect.DeepEqual(e.Details["example"], []string{"rm", "-f", "x"}) || e.Details["line"] != int32(1) {
		t.Fatalf("details = %#v", e.Details)
	}
}

func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.rules")
	b := filepath.Join(dir, "b.rules")
	os.WriteFile(a, []byte(`prefix_rule(pattern=["rm"], decision="prompt")`), 0o600)
	os.WriteFile(b, []byte("# later files add rules\nprefix_rule(pattern=[\"rm\", \"-rf\"], decision=\"forbidden\")"), 0o600)
	p, err := Load(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Check("rm x").Decision; got != Prompt {
		t.Errorf("rm x = %s, want prompt", got)
	}
	d := p.Check("rm -rf x")
	if d.Decision != Forbidden || d.Commands[0].Source != b+":2" {
		t.Errorf("rm -rf x = %+v, want forbidden by %s:2", d, b)
	}
	_, err = Load(a, filepath.Join(dir, "missing.rules"))
	if e := result.AsError(err); e == nil || e.Code != result.CodePolicyInvalid || !strings.Contains(e.Message, "missing.rules") {
		t.Errorf("missing file: %v, want %s naming it", err, result.CodePolicyInvalid)
	}
}

func TestDecisions(t *testing.T) {
	p, err := LoadSource("t.rules", []byte(`
prefix_rule(pattern=["rm"], decision="prompt")
prefix_rule(pattern=["rm", ["-rf", "-fr"]], decision="forbidden", justification="recursive")
prefix_rule(pattern=["rm", "-rf"], decision="allow")
prefix_rule(pattern=["git"], decision="allow")
`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		script, want, rule string
	}{
		{"rm x", Prompt, `["rm"]`},
		// Three rules match; the strictest decides, whatever the order.
		{"rm -rf x", Forbidden, `["rm", ["-rf", "-fr"]]`},
		{"rm -fr x", Forbidden, `["rm", ["-rf", "-fr"]]`},
		{"/usr/bin/rm -rf x", Forbidden, `["rm", ["-rf", "-fr"]]`},
		{"git status", Allow, `["git"]`},
		{"make", Allow, ""},
	}
	for _, tc := range cases {
		d := p.Check(tc.script)
		if d.Decision != tc.want || d.Commands[0].Rule != tc.rule {
			t.Errorf("Check(%q) = %s by %q, want %s by %q", tc.script, d.Decision, d.Commands[0].Rule, tc.want, tc.rule)
		}
	}

	if err := p.SetDefault("prompt"); err != nil {
		t.Fatal(err)
	}
	if d := p.Check("make && git status"); d.Decision != Prompt || d.Commands[0].Rule != "" || d.Commands[1].Decision != Allow {
		t.Errorf("default prompt: %+v", d)
	}
	if err := p.SetDefault("yes"); result.AsError(err).Code != result.CodePolicyInvalid {
		t.Errorf("SetDefault(yes) = %v, want %s", err, result.CodePolicyInvalid)
	}
	p.Default = "nonsense" // set directly: fails closed
	if d := p.Check("make"); d.Decision != Prompt {
		t.Errorf("unknown default decided %s, want prompt", d.Decision)
	}

	if d := p.CheckArgv([]string{"sudo", "rm", "-rf", "/"}); d.Decision != Forbidden {
		t.Errorf("CheckArgv(sudo rm -rf /) = %+v", d)
	}
	// The shell runs what precedes a syntax error: refused with the
	// strictest decision the policy has, not merely prompted.
	if d := p.Check(`echo "unterminated`); d.Decision != Forbidden || len(d.Unresolved) != 1 || d.Unresolved[0].Kind != KindRefused {
		t.Errorf("unparseable script: %+v, want forbidden with the parse error", d)
	}
	if d := New().Check(`echo "unterminated`); d.Decision != Prompt {
		t.Errorf("unparseable script under an allow-only policy: %+v, want prompt", d)
	}
}

func TestNilPolicy(t *testing.T) {
	var p *Policy
	if d := p.Check("rm -rf /"); d.Decision != Allow || len(d.Commands) != 1 {
		t.Errorf("nil policy: %+v", d)
	}
	if d := p.Check("$X"); d.Decision != Prompt {
		t.Errorf("nil policy, unresolved: %+v", d)
	}
}

func TestDecisionErr(t *testing.T) {
	p := loadTestPolicy(t)
	if err := p.Check("ls").Err(); err != nil {
		t.Errorf("allow: %v", err)
	}
	e := result.AsError(p.Check("ls; rm -rf /").Err())
	if e.Code != result.CodePolicyDenied || !strings.Contains(e.Message, "rm -rf /") || !strings.Contains(e.Message, "deletes files") {
		t.Errorf("forbidden: %v %q", e.Code, e.Message)
	}
	e = result.AsError(p.Check("$CMD").Err())
	if e.Code != result.CodeApprovalRequired || !strings.Contains(e.Message, "parameter expansion") {
		t.Errorf("prompt: %v %q", e.Code, e.Message)
	}
}

func TestRuleMatches(t *testing.T) {
	r := Rule{Pattern: [][]string{{"git"}, {"push", "pull"}}}
	cases := []struct {
		argv []string
		want bool
	}{
		{[]string{"git", "push"}, true},
		{[]string{"git", "pull", "--rebase"}, true},
		{[]string{"git"}, false},
		{[]string{"git", "fetch"}, false},
		{[]string{"/usr/bin/git", "push"}, true},
		{[]string{"gitx", "push"}, false},
		{nil, false},
	}
	for _, tc := range cases {
		if got := r.Matches(tc.argv); got != tc.want {
			t.Errorf("Matches(%q) = %v, want %v", tc.argv, got, tc.want)
		}
	}
	path := Rule{Pattern: [][]string{{"/opt/bin/tool"}}}
	if !path.Matches([]string{"/opt/bin/tool"}) || path.Matches([]string{"tool"}) {
		t.Error("a rule written with a path matches that path only")
	}
}
