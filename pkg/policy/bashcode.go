package policy

import (
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// This file holds what bash does with data that makes it code, and where
// bash reads a string differently from the parser: brace expansion (done
// here exactly), heredoc ends, prompt and arithmetic expansion, variables
// that bash itself runs.

// maxBraceWords bounds the words one brace expansion may produce before it
// is treated as unknown instead.
const maxBraceWords = 256

// words resolves a word into the words brace expansion makes of it.
//
// Brace expansion is static: {push,pull} is two words, decided as such
// rather than guessed at. The parser's tree is left as it is (its walker
// does not know brace nodes): a copy of the word is split.
func (u *unit) words(w *syntax.Word) []token {
	if !hasBraceLit(w) {
		return []token{u.word(w)}
	}
	w = &syntax.Word{Parts: append([]syntax.WordPart(nil), w.Parts...)}
	if !syntax.SplitBraces(w) {
		return []token{u.word(w)}
	}
	var out []token
	n := 0
	for ew, err := range expand.BracesSeq(nil, w) {
		if err != nil || n >= maxBraceWords {
			t := u.word(w)
			t.wild, t.split = true, true
			if t.pattern == "" {
				t.pattern = reasonBrace
			}
			return []token{t}
		}
		n++
		out = append(out, u.word(ew))
	}
	return out
}

func hasBraceLit(w *syntax.Word) bool {
	for _, p := range w.Parts {
		if l, ok := p.(*syntax.Lit); ok && strings.Contains(l.Value, "{") {
			return true
		}
	}
	return false
}

// codeVars are variables whose value bash itself runs or expands as code.
var codeVars = map[string]string{
	"PS0": "is expanded as a prompt", "PS1": "is expanded as a prompt", "PS2": "is expanded as a prompt",
	"PS3": "is expanded as a prompt", "PS4": "is expanded before each traced command (set -x)",
	"PROMPT_COMMAND": "runs before each prompt", "BASH_ENV": "names a script every bash started later runs",
	"ENV": "names a script a POSIX shell runs", "SHELLOPTS": "sets options of every bash started later",
}

// assignments examines the assignments of a simple command (FOO=bar cmd,
// or bare FOO=bar).
func (x *extractor) assignments(c *syntax.CallExpr, u *unit) {
	for _, a := range c.Assigns {
		x.assignment(a, u, u.source(c))
	}
}

// declaration examines declare, export, local, readonly and typeset.
func (x *extractor) declaration(c *syntax.DeclClause, u *unit) {
	flags := declFlags(c, u)
	text := u.source(c)
	for _, a := range c.Args {
		if a.Name == nil && a.Value != nil {
			t := u.word(a.Value)
			if strings.HasPrefix(t.text, "-") || strings.HasPrefix(t.text, "+") {
				continue // an option
			}
			// declare "$x": a name, value or subscript computed at run time.
			if t.wild || strings.ContainsAny(t.text, "[") {
				x.couldMatch(u, "declare:"+t.text, text, "a name given to "+c.Variant.Value+" at run time can hold a subscript, which runs commands")
			}
			// export 'GIT_SSH_COMMAND=...', declare -a 'x=(...)': an
			// assignment in one quoted word.
			if name, value, ok := strings.Cut(t.text, "="); ok && isIdent(name) {
				v := token{text: value, dynamic: t.dynamic, wild: t.wild}
				x.envValue(name, &v, u, text)
				x.declValue(c, flags, name, &v, u, text)
			}
			continue
		}
		x.assignment(a, u, text)
		if a.Name != nil && a.Value != nil {
			v := u.word(a.Value)
			x.declValue(c, flags, a.Name.Value, &v, u, text)
		}
	}
}

// declFlags returns the option letters given to a declaration (-a, -A,
// -i, -n, ...).
func declFlags(c *syntax.DeclClause, u *unit) string {
	var b strings.Builder
	for _, a := range c.Args {
		if a.Name == nil && a.Value != nil {
			if t := u.word(a.Value).text; len(t) > 1 && (t[0] == '-' || t[0] == '+') {
				b.WriteString(t[1:])
			}
		}
	}
	return b.String()
}

// declValue examines the value a declaration gives name, for what bash
// makes of it beyond a string: a quoted '(...)' given to an array
// (declare -a x='(...)', or an array declared before) is a compound
// assignment whose words are expanded, $(...) included; a nameref's value
// (declare -n) is a name whose subscript is evaluated at each use; an
// integer's value (declare -i) is evaluated as arithmetic.
func (x *extractor) declValue(c *syntax.DeclClause, flags, name string, v *token, u *unit, text string) {
	compound := strings.HasPrefix(v.text, "(") && strings.HasSuffix(v.text, ")")
	switch {
	case compound:
		x.nested(token{text: name + "=" + v.text, dynamic: v.dynamic}, u, text, c.Variant.Value+" array value")
	case v.wild && strings.ContainsAny(flags, "aA"):
		x.couldMatch(u, "declare-array:"+name, text, "a value computed at run time given to the array "+name+" can be a compound assignment, which runs commands")
	}
	if strings.Contains(flags, "n") && (v.wild || strings.Contains(v.text, "[")) {
		x.couldMatch(u, "nameref:"+name, text, "the nameref "+name+" names a subscript, evaluated at each use, which can run commands")
	}
	if strings.Contains(flags, "i") && !u.safeArithmetic(*v) {
		x.couldMatch(u, "integer:"+name, text, "the value given to the integer variable "+name+" is evaluated as arithmetic, which can run commands")
	}
}

// safeArithmetic reports whether bash can evaluate t as arithmetic without
// running code: a literal with no subscript, expansion or substitution,
// whose variables hold numbers (integer variables, or variables the
// script only sets to numbers).
func (u *unit) safeArithmetic(t token) bool {
	if t.wild || t.dynamic != "" || strings.ContainsAny(t.text, "[$`") {
		return false
	}
	s := t.text
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			for i < len(s) && (isIdentByte(s[i])) {
				i++
			}
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
			j := i
			for j < len(s) && isIdentByte(s[j]) {
				j++
			}
			if name := s[i:j]; !u.intVars[name] && !u.safeVars[name] && !specialNumeric[name] {
				return false
			}
			i = j
		default:
			i++
		}
	}
	return true
}

func isIdentByte(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// integerVars returns the variables that some declaration in f gives the
// integer attribute.
func integerVars(f *syntax.File) map[string]bool {
	out := map[string]bool{}
	inspect(f, func(n syntax.Node) bool {
		c, ok := n.(*syntax.DeclClause)
		if !ok {
			return true
		}
		integer := false
		for _, a := range c.Args {
			if a.Name == nil && a.Value != nil {
				if t := a.Value.Lit(); len(t) > 1 && t[0] == '-' && strings.Contains(t, "i") {
					integer = true
				}
			}
		}
		if integer {
			for _, a := range c.Args {
				if a.Name != nil {
					out[a.Name.Value] = true
				}
			}
		}
		return true
	})
	return out
}

func (x *extractor) assignment(a *syntax.Assign, u *unit, text string) {
	if a.Name == nil {
		return
	}
	var value *token
	if a.Value != nil {
		t := u.word(a.Value)
		value = &t
		if u.intVars[a.Name.Value] && !u.safeArithmetic(t) {
			x.couldMatch(u, "integer:"+a.Name.Value, text, "the value given to the integer variable "+a.Name.Value+" is evaluated as arithmetic, which can run commands")
		}
	}
	x.envValue(a.Name.Value, value, u, text)
}

// commandVars are environment variables whose value programs run as a
// command line or as the program to execute: git's ssh, proxy, askpass,
// editor, pager and external diff, the editors, pagers and browsers other
// programs start, and the shell that script, vim and friends run (FCEDIT
// is the editor of bash's fc). Setting one in the string (X=v cmd, export,
// declare, env X=v, sudo X=v) is deciding its value as a script.
var commandVars = map[string]bool{
	"GIT_SSH_COMMAND": true, "GIT_SSH": true, "GIT_PROXY_COMMAND": true, "GIT_ASKPASS": true,
	"SSH_ASKPASS": true, "SUDO_ASKPASS": true, "GIT_EDITOR": true, "GIT_SEQUENCE_EDITOR": true,
	"GIT_PAGER": true, "GIT_EXTERNAL_DIFF": true, "EDITOR": true, "VISUAL": true, "FCEDIT": true,
	"PAGER": true, "MANPAGER": true, "SYSTEMD_PAGER": true, "BROWSER": true, "SHELL": true,
	"RUSTC_WRAPPER": true, "LESSOPEN": true, "LESSCLOSE": true,
}

// optionVars are environment variables whose value makes a program run
// code the string does not show as a command: git configuration (which
// names programs), an interpreter's startup options, make's flags (--eval),
// tar's options (--to-command), a preloaded library, git's exec path.
var optionVars = map[string]bool{
	"GIT_CONFIG_PARAMETERS": true, "GIT_CONFIG_COUNT": true, "GIT_CONFIG": true, "GIT_CONFIG_GLOBAL": true,
	"GIT_CONFIG_SYSTEM": true, "GIT_EXEC_PATH": true, "PERL5OPT": true, "NODE_OPTIONS": true,
	"RUBYOPT": true, "JAVA_TOOL_OPTIONS": true, "_JAVA_OPTIONS": true, "JDK_JAVA_OPTIONS": true,
	"MAKEFLAGS": true, "GNUMAKEFLAGS": true, "MFLAGS": true, "TAR_OPTIONS": true,
	"LD_PRELOAD": true, "LD_AUDIT": true,
}

// envValue examines one variable the string sets (value nil: no value
// given) for bash or another program running its value as code.
func (x *extractor) envValue(name string, value *token, u *unit, text string) {
	switch {
	case codeVars[name] != "":
		if value != nil && name != "SHELLOPTS" {
			// The value is code: parse it as the shell will run it.
			x.nested(*value, u, text, name)
		}
		x.couldMatch(u, "var:"+name, text, name+" "+codeVars[name])
	case strings.HasPrefix(name, "BASH_FUNC_"):
		// bash imports the value as the body of a function, which can
		// be called by any name the script runs.
		if value != nil {
			x.nested(token{text: "f" + value.text, dynamic: value.dynamic}, u, text, name)
		}
		x.couldMatch(u, "var:"+name, text, name+" defines a shell function every bash started later has")
	case commandVars[name]:
		if value != nil {
			// LESSOPEN and LESSCLOSE start with | (or ||) for a pipe.
			v := *value
			v.text = strings.TrimLeft(v.text, "|")
			x.nested(v, u, text, name)
		}
	case optionVars[name] || strings.HasPrefix(name, "GIT_CONFIG_KEY_") || strings.HasPrefix(name, "GIT_CONFIG_VALUE_"):
		x.couldMatch(u, "var:"+name, text, name+" can make programs run code the policy does not see")
	}
}

// couldMatch records a could-match item once per key and script.
func (x *extractor) couldMatch(u *unit, key, text, reason string) {
	if u.flagged[key] {
		return
	}
	u.flagged[key] = true
	x.unresolvedKind(text, reason, KindCouldMatch)
}

// dataToCode looks at one node for bash turning data into code.
func (x *extractor) dataToCode(n syntax.Node, u *unit) {
	switch n := n.(type) {
	case *syntax.ParamExp:
		if n.Excl && n.Names == 0 && n.Index == nil && n.Param != nil && !u.nameVars[n.Param.Value] && !specialNumeric[n.Param.Value] {
			x.couldMatch(u, "indirect:"+n.Param.Value, u.source(n), "${!"+n.Param.Value+"} expands the variable "+n.Param.Value+" names, whose subscript is evaluated, which can run commands")
		}
		if n.Exp != nil && n.Exp.Op == syntax.OtherParamOps && n.Exp.Word != nil && strings.Contains(n.Exp.Word.Lit(), "P") {
			x.couldMatch(u, "prompt:"+u.source(n), u.source(n), "${X@P} expands a value as a prompt, which runs the commands in it")
		}
		if n.Index != nil {
			x.arithmetic(n.Index, u)
		}
		if n.Slice != nil {
			if n.Slice.Offset != nil {
				x.arithmetic(n.Slice.Offset, u)
			}
			if n.Slice.Length != nil {
				x.arithmetic(n.Slice.Length, u)
			}
		}
	case *syntax.ArithmExp:
		x.arithmetic(n.X, u)
	case *syntax.ArithmCmd:
		x.arithmetic(n.X, u)
	case *syntax.LetClause:
		for _, e := range n.Exprs {
			x.arithmetic(e, u)
		}
	case *syntax.Assign:
		if n.Index != nil {
			x.arithmetic(n.Index, u)
		}
	case *syntax.BinaryTest:
		switch n.Op {
		case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
			x.arithmetic(n.X, u)
			x.arithmetic(n.Y, u)
		}
	case *syntax.UnaryTest:
		if n.Op == syntax.TsVarSet {
			x.arithmetic(n.X, u)
		}
	}
}

// isIdent reports whether s is a shell variable name ([A-Za-z_][A-Za-z0-9_]*).
// Written out, not a package-level regexp: one compiled at init costs
// every agentsh call, most of which never parse a script.
func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// arithmetic reports an arithmetic context that evaluates the value of a
// variable the script does not only set to numbers: bash evaluates such a
// value as an expression, and a[$(cmd)] in it runs cmd.
func (x *extractor) arithmetic(e syntax.Node, u *unit) {
	if e == nil {
		return
	}
	inspect(e, func(n syntax.Node) bool {
		var name string
		switch n := n.(type) {
		case *syntax.Lit:
			if isIdent(n.Value) {
				name = n.Value
			}
		case *syntax.ParamExp:
			if n.Length || n.Param == nil {
				return true
			}
			name = n.Param.Value
		case *syntax.CmdSubst:
			return false // its commands are extracted on their own
		}
		if name != "" && !u.safeVars[name] && !specialNumeric[name] {
			x.couldMatch(u, "arith:"+name, u.src, "arithmetic evaluates the value of "+name+", which runs the commands a subscript in it holds")
		}
		return true
	})
}

// specialNumeric are parameters whose value is always a number.
var specialNumeric = map[string]bool{
	"#": true, "?": true, "$": true, "!": true, "RANDOM": true, "LINENO": true, "SECONDS": true,
	"BASHPID": true, "PPID": true, "UID": true, "EUID": true, "OPTIND": true, "SRANDOM": true,
	"EPOCHSECONDS": true, "SHLVL": true,
}

// isNumber reports whether s is an integer literal as bash arithmetic
// reads one: an optional sign, then hex digits after 0x or decimal digits
// (^[-+]?(0[xX][0-9a-fA-F]+|[0-9]+)$).
func isNumber(s string) bool {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	digit := func(c byte) bool { return '0' <= c && c <= '9' }
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		digit = func(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
		s = s[2:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !digit(s[i]) {
			return false
		}
	}
	return true
}

// numericVars returns the variables a script only ever sets to numbers
// (literal numbers, arithmetic results, arithmetic assignments).
func numericVars(f *syntax.File) map[string]bool { return varsSetTo(f, false) }

// nameVars returns the variables a script only ever sets to numbers or to
// literal variable names (for v in HOME PATH), whose indirect expansion
// ${!v} evaluates no subscript.
func nameVars(f *syntax.File) map[string]bool { return varsSetTo(f, true) }

func varsSetTo(f *syntax.File, names bool) map[string]bool {
	state := map[string]int{} // 1 numeric so far, -1 not numeric
	mark := func(name string, numeric bool) {
		if !numeric {
			state[name] = -1
		} else if state[name] == 0 {
			state[name] = 1
		}
	}
	numericWord := func(w *syntax.Word) bool {
		if w == nil {
			return false
		}
		if len(w.Parts) == 1 {
			switch p := w.Parts[0].(type) {
			case *syntax.Lit:
				return isNumber(p.Value) || names && isIdent(p.Value)
			case *syntax.ArithmExp:
				return true
			}
		}
		return false
	}
	inspect(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.Assign:
			if n.Name == nil || (n.Value == nil && n.Array == nil) {
				return true
			}
			mark(n.Name.Value, n.Array == nil && n.Index == nil && !n.Append && numericWord(n.Value))
		case *syntax.BinaryArithm:
			if w, ok := n.X.(*syntax.Word); ok && n.Op >= syntax.Assgn {
				mark(w.Lit(), true)
			}
		case *syntax.UnaryArithm:
			if w, ok := n.X.(*syntax.Word); ok && (n.Op == syntax.Inc || n.Op == syntax.Dec) {
				mark(w.Lit(), true)
			}
		case *syntax.WordIter:
			numeric := true
			for _, it := range n.Items {
				numeric = numeric && numericWord(it)
			}
			mark(n.Name.Value, numeric && len(n.Items) > 0)
		case *syntax.CallExpr:
			// read, mapfile, printf -v, getopts set variables from data.
			if len(n.Args) > 0 {
				switch n.Args[0].Lit() {
				case "read", "mapfile", "readarray", "printf", "getopts", "select":
					for _, a := range n.Args[1:] {
						if l := a.Lit(); isIdent(l) {
							mark(l, false)
						}
					}
				}
			}
		}
		return true
	})
	out := map[string]bool{}
	for k, v := range state {
		if v == 1 {
			out[k] = true
		}
	}
	return out
}

// heredocEnd refuses to guess when bash would end a heredoc before the
// parser did: a line of the body that bash takes for the delimiter (after
// joining backslash-newlines in an unquoted heredoc, or followed by ) or `
// inside a command substitution) means bash runs text the parser read as
// data.
func (x *extractor) heredocEnd(r *syntax.Redirect, u *unit) {
	if r.Word == nil {
		return
	}
	delim := u.word(r.Word).text
	quoted := false
	for _, p := range r.Word.Parts {
		switch p := p.(type) {
		case *syntax.SglQuoted, *syntax.DblQuoted:
			quoted = true
		case *syntax.Lit:
			if strings.Contains(p.Value, "\\") {
				quoted = true
			}
		}
	}
	body := u.source(r.Hdoc)
	check := func(line string) bool {
		if r.Op == syntax.DashHdoc {
			line = strings.TrimLeft(line, "\t")
		}
		if line == delim {
			return true
		}
		rest, ok := strings.CutPrefix(line, delim)
		return ok && rest != "" && (rest[0] == ')' || rest[0] == '`')
	}
	lines := strings.Split(body, "\n")
	if last := lines[len(lines)-1]; check(last) {
		lines = lines[:len(lines)-1] // the parser's own end
	}
	logical := ""
	for _, line := range lines {
		if !quoted {
			n := len(line) - len(strings.TrimRight(line, "\\"))
			if n%2 == 1 {
				logical += line[:len(line)-1]
				continue
			}
		}
		logical += line
		if check(logical) || check(line) {
			x.unresolvedKind(u.source(r), "a heredoc that bash ends earlier than the parser (at a line "+
				quoteLine(logical)+"): the policy will not guess which text runs", KindRefused)
			return
		}
		logical = ""
	}
}

func quoteLine(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return "\"" + s + "\""
}
