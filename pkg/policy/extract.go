package policy

import (
	"errors"
	"reflect"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/agentplane/agentplane/pkg/result"
)

// Limits that keep extraction bounded whatever the input: a hostile string
// must cost the caller milliseconds, not its memory or its stack.
const (
	// MaxScriptBytes is the longest string Extract reads.
	MaxScriptBytes = 1 << 20
	// maxDepth bounds scripts nested in scripts (bash -c, eval, heredocs).
	maxDepth = 8
	// maxWrappers bounds a wrapper chain such as `nice nice nice ... rm`,
	// whose argvs would otherwise cost quadratic memory.
	maxWrappers = 16
	// maxItems bounds the commands plus unresolved items of one call.
	maxItems = 4096
	// maxNesting bounds how deeply constructs nest. The parser recurses once
	// per level and a Go stack overflow cannot be recovered, so nesting is
	// measured before parsing.
	maxNesting = 10000
	// maxPlaceholderBytes bounds the expansion text copied into arguments:
	// nested substitutions would otherwise copy the script once per level.
	maxPlaceholderBytes = 4 << 20
)

// Command is one simple command a script would run.
type Command struct {
	// Argv is the resolved argument vector (see the package doc for how
	// expansions are shown).
	Argv []string `json:"argv"`
	// Text is the source text the command came from; for a command found
	// through a wrapper it is the text of the outer command.
	Text string `json:"text"`

	// wild marks the arguments whose value is known only at run time;
	// from open on, any number of unknown arguments may follow (an
	// unquoted expansion, a glob, what xargs appends). open is len(Argv)
	// or more when the argv is complete.
	wild []bool
	open int
}

// Kinds of unresolved items.
const (
	// KindUnknown: what runs cannot be known before the call; the
	// decision is at least prompt.
	KindUnknown = ""
	// KindCouldMatch: something known only at run time could make a
	// command match a prompt or forbidden rule; the decision is prompt
	// when the policy has such a rule (or such a default).
	KindCouldMatch = "could_match"
	// KindRefused: the string is beyond what the policy examines (too
	// long, too deep, too many commands, not parseable as the shell would
	// parse it); the decision is the strictest the policy can make, so a
	// limit never turns forbidden into prompt.
	KindRefused = "refused"
)

// Unresolved is something in a script that cannot be known without running
// it, such as a command name taken from a variable.
type Unresolved struct {
	Text   string `json:"text"`
	Reason string `json:"reason"`
	Kind   string `json:"kind,omitempty"`
}

// Extract returns every simple command script would run and what cannot be
// resolved statically. A script that does not parse, or is longer than
// MaxScriptBytes, is a *result.Error with code result.CodePolicyParse.
func Extract(script string) ([]Command, []Unresolved, error) {
	if len(script) > MaxScriptBytes {
		return nil, nil, result.Errorf(result.CodePolicyParse,
			"the script is %d bytes, more than the %d the policy reads", len(script), MaxScriptBytes).
			With("limit", MaxScriptBytes)
	}
	if d := nesting(script); d > maxNesting {
		return nil, nil, result.Errorf(result.CodePolicyParse,
			"the script nests more than %d levels deep", maxNesting).With("limit", maxNesting)
	}
	f, err := parse(script)
	if err != nil {
		e := result.Errorf(result.CodePolicyParse, "cannot parse the script: %v", err).Wrap(err)
		var pe syntax.ParseError
		if errors.As(err, &pe) {
			e.With("line", pe.Pos.Line()).With("column", pe.Pos.Col())
		}
		return nil, nil, e
	}
	x := &extractor{placeholders: maxPlaceholderBytes}
	x.file(f, script, 0)
	return x.cmds, x.unres, nil
}

// ExtractStdin is Extract for a call that feeds stdin to the command: a
// shell in the string that reads its script from the call's standard input
// (bash, sh -s, sudo -s, . /dev/stdin) has stdin parsed as that script.
func ExtractStdin(script, stdin string) ([]Command, []Unresolved, error) {
	if len(script) > MaxScriptBytes {
		return Extract(script)
	}
	if d := nesting(script); d > maxNesting {
		return Extract(script)
	}
	f, err := parse(script)
	if err != nil {
		return Extract(script)
	}
	x := &extractor{placeholders: maxPlaceholderBytes, stdin: &stdin}
	x.file(f, script, 0)
	return x.cmds, x.unres, nil
}

// ExtractArgv is Extract for an argv that is run without a shell: its tokens
// are literal, but wrappers (sudo, env, bash -c, ...) are still looked into.
func ExtractArgv(argv []string) ([]Command, []Unresolved) {
	return extractArgv(argv, nil)
}

// ExtractArgvStdin is ExtractArgv for a call that feeds stdin to the argv.
func ExtractArgvStdin(argv []string, stdin string) ([]Command, []Unresolved) {
	return extractArgv(argv, &stdin)
}

func extractArgv(argv []string, stdin *string) ([]Command, []Unresolved) {
	x := &extractor{placeholders: maxPlaceholderBytes, stdin: stdin}
	u := &unit{x: x, src: strings.Join(argv, " "), funcs: map[string]bool{}, flagged: map[string]bool{}}
	x.argv(literalTokens(argv), nil, u, u.src, 0, false)
	return x.cmds, x.unres
}

func parse(src string) (*syntax.File, error) {
	// Bash is what agentsh runs strings with when it exists, and its syntax
	// is a superset of what sh accepts, so one dialect covers both.
	p := syntax.NewParser(syntax.Variant(syntax.LangBash))
	return p.Parse(strings.NewReader(src), "")
}

// extractor accumulates the results of one Extract call.
type extractor struct {
	cmds  []Command
	unres []Unresolved
	full  bool // maxItems was reached and reported
	// placeholders is how many more bytes of expansion text may be copied
	// into arguments; past it an expansion is shown as "$…".
	placeholders int
	// stdin is the call's standard input, when the caller gives it.
	stdin *string
	// cur is the statement being examined, for where its stdin comes from.
	cur *syntax.Stmt
	// inherit is what the next nested script's shell reads as stdin.
	inherit inherited
}

// unit is one parsed script: the top-level string or a nested one. Offsets
// of its nodes point into src.
type unit struct {
	x     *extractor
	src   string
	funcs map[string]bool // functions the script defines
	depth int
	// pipes are the source ranges that read a pipe as standard input
	// (the right-hand sides of | and |&).
	pipes [][2]int
	// safeVars are the variables the script only ever sets to numbers,
	// whose value arithmetic can evaluate without running code.
	safeVars map[string]bool
	// intVars are the variables the script gives the integer attribute
	// (declare -i): what is assigned to them is evaluated as arithmetic.
	intVars map[string]bool
	// nameVars are the variables the script only sets to numbers or
	// literal names, safe to expand indirectly (${!v}).
	nameVars map[string]bool
	// flagged records the data-to-code reports already made, once each.
	flagged map[string]bool
	// pipedIn: the shell running this script reads a pipe as stdin;
	// stdinUsed: a heredoc or here-string, not the call's stdin, feeds it.
	pipedIn, stdinUsed bool
}

// room reports whether another item may be added; the first refusal is
// itself reported, so a truncated result is never mistaken for a full one.
func (x *extractor) room() bool {
	if x.full {
		return false
	}
	if len(x.cmds)+len(x.unres) >= maxItems {
		x.full = true
		x.unres = append(x.unres, Unresolved{Text: "", Reason: "more commands than the policy examines", Kind: KindRefused})
		return false
	}
	return true
}

func (x *extractor) add(argv []string, text string) {
	if x.room() {
		x.cmds = append(x.cmds, Command{Argv: argv, Text: text, open: len(argv)})
	}
}

// addTokens reports a command whose arguments may be known only at run
// time; appended says that more arguments are added after them.
func (x *extractor) addTokens(toks []token, text string, appended bool) {
	if !x.room() {
		return
	}
	c := Command{Argv: tokenTexts(toks), Text: text, open: len(toks)}
	if appended {
		c.open = len(toks)
		c.wild = make([]bool, len(toks))
	}
	for i, t := range toks {
		if t.wild {
			if c.wild == nil {
				c.wild = make([]bool, len(toks))
			}
			c.wild[i] = true
		}
		if t.split && i < c.open {
			c.open = i
		}
	}
	if appended || c.open < len(toks) {
		c.wild = append(c.wild, true) // what follows is unknown
	}
	x.cmds = append(x.cmds, c)
}

func (x *extractor) unresolved(text, reason string) {
	x.unresolvedKind(text, reason, KindUnknown)
}

func (x *extractor) unresolvedKind(text, reason, kind string) {
	if x.room() {
		x.unres = append(x.unres, Unresolved{Text: text, Reason: reason, Kind: kind})
	}
}

// file extracts the commands of one parsed script.
func (x *extractor) file(f *syntax.File, src string, depth int) {
	u := &unit{x: x, src: src, depth: depth, funcs: map[string]bool{}, flagged: map[string]bool{},
		pipedIn: x.inherit.pipedIn, stdinUsed: x.inherit.stdinUsed}
	x.inherit = inherited{}
	inspect(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.FuncDecl:
			if n.Name != nil {
				u.funcs[n.Name.Value] = true
			}
			for _, name := range n.Names {
				u.funcs[name.Value] = true
			}
		case *syntax.BinaryCmd:
			if (n.Op == syntax.Pipe || n.Op == syntax.PipeAll) && n.Y != nil {
				u.pipes = append(u.pipes, [2]int{int(n.Y.Pos().Offset()), int(n.Y.End().Offset())})
			}
		}
		return true
	})
	u.safeVars = numericVars(f)
	u.intVars = integerVars(f)
	u.nameVars = nameVars(f)
	x.walk(f, u)
}

type inherited struct{ pipedIn, stdinUsed bool }

// readsPipe reports whether the statement reads a pipe as stdin.
func (u *unit) readsPipe(st *syntax.Stmt) bool {
	if u.pipedIn {
		return true
	}
	if st == nil {
		return false
	}
	off := int(st.Pos().Offset())
	for _, r := range u.pipes {
		if r[0] <= off && off < r[1] {
			return true
		}
	}
	return false
}

// walk visits every statement under node, including those inside words
// (command and process substitutions), so nothing nested is missed.
func (x *extractor) walk(node syntax.Node, u *unit) {
	inspect(node, func(n syntax.Node) bool {
		if x.full {
			return false
		}
		switch n := n.(type) {
		case *syntax.Stmt:
			x.stmt(n, u)
		case *syntax.Redirect:
			if (n.Op == syntax.Hdoc || n.Op == syntax.DashHdoc) && n.Hdoc != nil {
				x.heredocEnd(n, u)
			}
		default:
			x.dataToCode(n, u)
		}
		return true
	})
}

// inspect calls f for every node under root, like syntax.Walk, but follows
// operator chains with an explicit stack. The tree of `a && b && ...`, of
// arithmetic and of [[ ]] tests deepens by one level per operator, and a
// recursive walk over a long chain would overflow the stack, which a Go
// program cannot recover from. Other nesting is bounded by maxNesting.
func inspect(root syntax.Node, f func(syntax.Node) bool) {
	syntax.Walk(root, func(n syntax.Node) bool {
		if n == nil {
			return true
		}
		if !isChain(n) {
			return f(n)
		}
		stack := []syntax.Node{n}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if n == nil || reflect.ValueOf(n).IsNil() {
				continue
			}
			if !isChain(n) {
				inspect(n, f)
				continue
			}
			if !f(n) {
				continue
			}
			switch n := n.(type) {
			case *syntax.Stmt:
				for i := len(n.Redirs) - 1; i >= 0; i-- {
					stack = append(stack, n.Redirs[i])
				}
				stack = append(stack, n.Cmd)
			case *syntax.BinaryCmd:
				stack = append(stack, n.Y, n.X)
			case *syntax.BinaryArithm:
				stack = append(stack, n.Y, n.X)
			case *syntax.UnaryArithm:
				stack = append(stack, n.X)
			case *syntax.ParenArithm:
				stack = append(stack, n.X)
			case *syntax.BinaryTest:
				stack = append(stack, n.Y, n.X)
			case *syntax.UnaryTest:
				stack = append(stack, n.X)
			case *syntax.ParenTest:
				stack = append(stack, n.X)
			}
		}
		return false
	})
}

// isChain reports the nodes that inspect follows without recursion.
func isChain(n syntax.Node) bool {
	switch n := n.(type) {
	case *syntax.Stmt:
		_, ok := n.Cmd.(*syntax.BinaryCmd)
		return ok
	case *syntax.BinaryCmd, *syntax.BinaryArithm, *syntax.UnaryArithm, *syntax.ParenArithm,
		*syntax.BinaryTest, *syntax.UnaryTest, *syntax.ParenTest:
		return true
	}
	return false
}

// stmt reports the command of one statement when it is a simple command or
// one of the keywords that behave like one.
func (x *extractor) stmt(st *syntax.Stmt, u *unit) {
	x.cur = st
	switch c := st.Cmd.(type) {
	case *syntax.CallExpr:
		x.assignments(c, u)
		if len(c.Args) > 0 {
			toks := make([]token, 0, len(c.Args))
			for _, w := range c.Args {
				toks = append(toks, u.words(w)...)
			}
			x.argv(toks, st.Redirs, u, u.source(c), 0, false)
		}
	case *syntax.TimeClause:
		// The keyword form; the timed statement is visited on its own.
		argv := []string{"time"}
		if c.PosixFormat {
			argv = append(argv, "-p")
		}
		if c.Stmt != nil {
			if inner, ok := c.Stmt.Cmd.(*syntax.CallExpr); ok {
				for _, w := range inner.Args {
					argv = append(argv, u.word(w).text)
				}
			}
		}
		x.add(argv, u.source(c))
	case *syntax.DeclClause:
		argv := []string{c.Variant.Value}
		for _, a := range c.Args {
			argv = append(argv, u.assign(a))
		}
		x.add(argv, u.source(c))
		x.declaration(c, u)
	case *syntax.LetClause:
		argv := []string{"let"}
		for _, e := range c.Exprs {
			argv = append(argv, u.source(e))
		}
		x.add(argv, u.source(c))
	}
}

// assign renders one argument of declare/export/local as the shell would
// pass it.
func (u *unit) assign(a *syntax.Assign) string {
	var b strings.Builder
	if a.Name != nil {
		b.WriteString(a.Name.Value)
		if a.Index != nil {
			b.WriteString("[" + u.source(a.Index) + "]")
		}
		if a.Naked {
			return b.String()
		}
		if a.Append {
			b.WriteString("+")
		}
		b.WriteString("=")
	}
	switch {
	case a.Value != nil:
		b.WriteString(u.word(a.Value).text)
	case a.Array != nil:
		b.WriteString(u.source(a.Array))
	}
	return b.String()
}

// argv handles one resolved simple command: it is reported, and if it runs
// another command or script, that is examined too.
// appended says the wrapper that runs it adds arguments at run time.
func (x *extractor) argv(toks []token, redirs []*syntax.Redirect, u *unit, text string, wraps int, appended bool) {
	if len(toks) == 0 || !x.room() {
		return
	}
	if wraps > maxWrappers {
		x.unresolvedKind(text, "wrappers nested deeper than the policy examines", KindRefused)
		return
	}
	name := toks[0]
	if reason := name.nameProblem(); reason != "" {
		x.unresolved(text, reason)
		return
	}
	// A wrapper runs programs, never shell functions, so only the outermost
	// name can be a function call.
	if wraps == 0 && u.funcs[name.text] {
		x.unresolved(text, "function defined in the script")
		return
	}
	x.addTokens(toks, text, appended)
	// ld.so PROGRAM and valgrind PROGRAM run PROGRAM without an exec.
	if prog := MappedProgram(tokenTexts(toks)); prog != nil {
		x.argv(toks[len(toks)-len(prog):], redirs, u, text, wraps+1, false)
		return
	}

	switch base := baseName(name.text); base {
	case "bash", "sh", "zsh", "dash", "ksh", "mksh", "ash", "rbash":
		x.shell(toks, redirs, u, text)
	case "eval":
		x.unresolved(text, "eval runs a string as a script")
		if len(toks) > 1 {
			x.nested(joinTokens(toks[1:]), u, text, "eval")
		}
	case "source", ".":
		if len(toks) > 1 {
			if reason := toks[1].nameProblem(); reason != "" {
				x.unresolved(text, "source of a path computed at run time")
			} else if isStdinPath(toks[1].text) {
				x.stdinScript(redirs, u, text)
			} else if isFDPath(toks[1].text) {
				x.unresolved(text, "source of a file descriptor")
			}
		}
	case "alias":
		if len(toks) > 1 {
			x.unresolved(text, "alias changes what later command names run")
		}
		for _, t := range toks[1:] {
			if _, value, ok := strings.Cut(t.text, "="); ok {
				x.nested(token{text: value, dynamic: t.dynamic}, u, text, "alias")
			}
		}
	case "trap":
		// trap [-lp] [ACTION] SIGNAL...: the action is a script run later.
		rest := toks[1:]
		if len(rest) > 0 && rest[0].text == "--" {
			rest = rest[1:]
		}
		if len(rest) >= 2 && !strings.HasPrefix(rest[0].text, "-") {
			x.nested(rest[0], u, text, "trap")
		}
	case "find":
		x.findExec(toks, u, text, wraps)
	case "xargs":
		x.xargs(toks, redirs, u, text, wraps)
	default:
		if x.runner(base, toks, redirs, u, text, wraps) {
			return
		}
		inner, stdinShell, problem, assigns := unwrap(base, toks)
		if problem != "" {
			x.unresolved(text, problem)
		}
		for _, a := range assigns {
			name, value, _ := strings.Cut(a.text, "=")
			x.envValue(name, &token{text: value, dynamic: a.dynamic}, u, text)
		}
		if inner != nil {
			x.argv(inner, redirs, u, text, wraps+1, false)
		} else if stdinShell {
			x.stdinScript(redirs, u, text)
		}
	}
}

// isStdinPath reports the names of standard input.
func isStdinPath(p string) bool {
	switch p {
	case "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", "/proc/thread-self/fd/0", "-":
		return true
	}
	return false
}

// isFDPath reports paths that name an open file descriptor or a FIFO-like
// special file, whose contents are not on disk.
func isFDPath(p string) bool {
	return strings.HasPrefix(p, "/dev/fd/") || strings.HasPrefix(p, "/proc/") && strings.Contains(p, "/fd/") ||
		p == "/dev/tty" || strings.HasPrefix(p, "/dev/pts/")
}

func baseName(s string) string {
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// joinTokens joins arguments with spaces, as eval does before parsing.
func joinTokens(toks []token) token {
	var t token
	parts := make([]string, len(toks))
	for i, tk := range toks {
		parts[i] = tk.text
		if t.dynamic == "" {
			t.dynamic = tk.dynamic
		}
	}
	t.text = strings.Join(parts, " ")
	return t
}

// shell examines a shell started as a command: its -c string, or the script
// it reads on standard input.
func (x *extractor) shell(toks []token, redirs []*syntax.Redirect, u *unit, text string) {
	cmdMode, stdinMode := false, false
	i := 1
options:
	for ; i < len(toks); i++ {
		a := toks[i].text
		switch {
		case a == "--" || a == "-":
			i++
			break options
		case strings.HasPrefix(a, "--"):
			if a == "--rcfile" || a == "--init-file" {
				i++
			}
		case len(a) > 1 && (a[0] == '-' || a[0] == '+'):
			takesArg := false
			for _, c := range a[1:] {
				switch c {
				case 'c':
					cmdMode = true
				case 's':
					stdinMode = true
				case 'o', 'O':
					takesArg = true
				}
			}
			if takesArg {
				i++
			}
		default:
			break options
		}
	}
	switch {
	case cmdMode:
		if i < len(toks) {
			x.nested(toks[i], u, text, "shell -c")
		}
	case i < len(toks) && !stdinMode:
		switch op := toks[i]; {
		case op.nameProblem() != "":
			// bash <(curl ...), bash "$f": a script known at run time.
			x.unresolved(text, "the shell runs a script whose name is computed at run time")
		case isStdinPath(op.text):
			x.stdinScript(redirs, u, text)
		case isFDPath(op.text):
			x.unresolved(text, "the shell reads its script from a file descriptor")
		}
		// Otherwise a script file: its contents are not the policy's to
		// read (the runtime guard decides what it executes).
	default:
		x.stdinScript(redirs, u, text)
	}
}

// stdinScript examines the script a shell reads from standard input: a
// heredoc or here-string is parsed; anything else is unknown.
func (x *extractor) stdinScript(redirs []*syntax.Redirect, u *unit, text string) {
	var in *syntax.Redirect
	for _, r := range redirs {
		if r.N != nil && r.N.Value != "0" {
			continue
		}
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc, syntax.RdrIn, syntax.RdrInOut, syntax.DplIn:
			in = r
		}
	}
	switch {
	case in == nil && u.readsPipe(x.cur):
		x.unresolved(text, "the shell reads its script from a pipe on standard input")
	case in == nil && x.stdin != nil && !u.stdinUsed:
		x.nested(token{text: *x.stdin}, u, text, "standard input")
	case in == nil:
		x.unresolved(text, "the shell reads its script from standard input")
	case in.Op == syntax.RdrIn && in.Word != nil && u.word(in.Word).nameProblem() != "":
		x.unresolved(text, "the shell reads its script from a file computed at run time")
	case in.Op == syntax.RdrIn && in.Word != nil && isFDPath(u.word(in.Word).text):
		x.unresolved(text, "the shell reads its script from a file descriptor")
	case in.Op == syntax.Hdoc || in.Op == syntax.DashHdoc:
		if in.Hdoc != nil {
			x.nested(u.heredoc(in), u, text, "heredoc")
		}
	case in.Op == syntax.WordHdoc:
		if in.Word != nil {
			x.nested(u.word(in.Word), u, text, "here-string")
		}
	case in.Op == syntax.RdrIn:
		// A script file, like `bash script.sh`.
	default:
		x.unresolved(text, "the shell reads its script from a file descriptor")
	}
}

// heredoc resolves a heredoc body: literal when the delimiter is quoted,
// otherwise with the backslash rules of an unquoted heredoc and expansions
// kept as source text.
func (u *unit) heredoc(r *syntax.Redirect) token {
	quoted := false
	if r.Word != nil {
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
	}
	var t token
	var b strings.Builder
	for _, p := range r.Hdoc.Parts {
		lit, ok := p.(*syntax.Lit)
		switch {
		case ok && quoted:
			b.WriteString(lit.Value)
		case ok:
			b.WriteString(unescapeHeredoc(lit.Value))
		default:
			if t.dynamic == "" {
				t.dynamic = "expansion"
			}
			u.placeholder(p, &b)
		}
	}
	t.text = b.String()
	return t
}

// nested parses a string that a command runs as a script and extracts its
// commands.
func (x *extractor) nested(t token, u *unit, text, what string) {
	if t.dynamic != "" {
		x.unresolved(text, what+" script contains expansions resolved at run time")
	}
	if u.depth+1 > maxDepth {
		x.unresolvedKind(text, what+" script nested deeper than the policy examines", KindRefused)
		return
	}
	if len(t.text) > MaxScriptBytes || nesting(t.text) > maxNesting {
		x.unresolvedKind(text, what+" script nested deeper than the policy examines", KindRefused)
		return
	}
	f, err := parse(t.text)
	if err != nil {
		// The shell runs what comes before its syntax error.
		x.unresolvedKind(text, what+" script does not parse: "+err.Error(), KindRefused)
		return
	}
	cur := x.cur
	x.inherit = inherited{pipedIn: u.readsPipe(cur),
		stdinUsed: u.stdinUsed || what == "heredoc" || what == "here-string" || what == "standard input"}
	x.file(f, t.text, u.depth+1)
	x.cur = cur
}

// findExec extracts the commands of find's -exec, -execdir, -ok and -okdir
// actions, which run up to a ";" or "+" argument.
func (x *extractor) findExec(toks []token, u *unit, text string, wraps int) {
	for i := 1; i < len(toks); i++ {
		switch toks[i].text {
		case "-exec", "-execdir", "-ok", "-okdir":
		default:
			continue
		}
		j := i + 1
		for j < len(toks) && toks[j].text != ";" && toks[j].text != "+" {
			j++
		}
		// {} becomes a file name: any word, and with + any number.
		inner := append([]token(nil), toks[i+1:j]...)
		plus := j < len(toks) && toks[j].text == "+"
		for k := range inner {
			if strings.Contains(inner[k].text, "{}") {
				inner[k].wild = true
				if inner[k].dynamic == "" {
					inner[k].dynamic = "find substitutes file names for {}"
				}
				if plus {
					inner[k].split = true
				}
			}
		}
		x.argv(inner, nil, u, text, wraps+1, false)
		i = j
	}
}

// nesting estimates how deeply the constructs of a script nest, from above:
// brackets count even inside quotes, compound-command keywords open and
// close levels, and time, coproc and ! nest the rest of their statement.
// It runs in one pass without recursion, so it is safe on any input.
func nesting(s string) int {
	depth, pending, deepest := 0, 0, 0
	boundary := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '(', '{', '[':
			depth++
		case ')', '}', ']':
			if depth > 0 {
				depth--
			}
		case ';', '&', '|', '\n':
			pending = 0
		}
		if boundary && (c == '!' || 'a' <= c && c <= 'z') {
			j := i
			for j < len(s) && (s[j] == '!' || 'a' <= s[j] && s[j] <= 'z') {
				j++
			}
			if j == len(s) || isBreak(s[j]) {
				switch s[i:j] {
				case "if", "while", "until", "for", "case", "select":
					depth++
				case "fi", "done", "esac":
					if depth > 0 {
						depth--
					}
				case "time", "coproc", "!":
					pending++
				}
			}
			i = j - 1
			boundary = false
			deepest = max(deepest, depth+pending)
			continue
		}
		boundary = isBreak(c)
		deepest = max(deepest, depth+pending)
	}
	return deepest
}

func isBreak(c byte) bool {
	switch c {
	case ' ', '\t', '\n', ';', '&', '|', '(', ')', '{', '}', '<', '>', '`', '"', '\'':
		return true
	}
	return false
}
