package policy

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"
)

// token is one word after static resolution. dynamic and pattern are empty
// for a word whose value is fully known; otherwise they hold the reason it
// cannot serve as a command name.
type token struct {
	text    string
	dynamic string // the value depends on an expansion
	pattern string // the value is subject to globbing or brace expansion
	// wild: the word's value is only known at run time, so it could be
	// any word; split: it could also become several words or none (an
	// unquoted expansion, a glob, arguments a wrapper adds).
	wild, split bool
}

// nameProblem says why the token cannot be trusted as a command name, or "".
func (t token) nameProblem() string {
	if t.dynamic != "" {
		return t.dynamic
	}
	return t.pattern
}

// literalTokens wraps an argv that was never seen by a shell: every token is
// exactly what it says.
func literalTokens(argv []string) []token {
	toks := make([]token, len(argv))
	for i, a := range argv {
		toks[i] = token{text: a}
	}
	return toks
}

func tokenTexts(toks []token) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = t.text
	}
	return out
}

// Reasons for a command name that cannot be resolved statically.
const (
	reasonParam    = "command name comes from a parameter expansion"
	reasonCmdSubst = "command name comes from a command substitution"
	reasonArithm   = "command name comes from an arithmetic expansion"
	reasonProcSubs = "command name comes from a process substitution"
	reasonGlob     = "command name contains a glob"
	reasonBrace    = "command name contains a brace expansion"
)

// word resolves a shell word the way the shell would before running it, as
// far as that is possible without running anything.
func (u *unit) word(w *syntax.Word) token {
	var t token
	var b strings.Builder
	for _, part := range w.Parts {
		u.part(part, &b, &t, false)
	}
	t.text = b.String()
	return t
}

func (u *unit) part(part syntax.WordPart, b *strings.Builder, t *token, quoted bool) {
	setDynamic := func(reason string) {
		if t.dynamic == "" {
			t.dynamic = reason
		}
		t.wild = true
		if !quoted {
			t.split = true
		}
		u.placeholder(part, b)
	}
	switch p := part.(type) {
	case *syntax.Lit:
		if quoted {
			b.WriteString(unescapeDouble(p.Value))
			return
		}
		s, glob, brace := unescapeBare(p.Value)
		b.WriteString(s)
		if t.pattern == "" && glob {
			t.pattern = reasonGlob
		}
		if t.pattern == "" && brace {
			t.pattern = reasonBrace
		}
		if glob || brace {
			// A glob becomes the names of whatever files match.
			t.wild, t.split = true, true
		}
	case *syntax.SglQuoted:
		if p.Dollar {
			// bash ends the string at a NUL byte: $'git\0' is git.
			v, _, _ := strings.Cut(unescapeANSI(p.Value), "\x00")
			b.WriteString(v)
		} else {
			b.WriteString(p.Value)
		}
	case *syntax.DblQuoted:
		for _, inner := range p.Parts {
			u.part(inner, b, t, true)
		}
	case *syntax.ParamExp:
		setDynamic(reasonParam)
	case *syntax.CmdSubst:
		setDynamic(reasonCmdSubst)
	case *syntax.ArithmExp:
		setDynamic(reasonArithm)
	case *syntax.ProcSubst:
		setDynamic(reasonProcSubs)
	case *syntax.ExtGlob:
		if t.pattern == "" {
			t.pattern = reasonGlob
		}
		t.wild, t.split = true, true
		u.placeholder(part, b)
	case *syntax.BraceExp:
		// Left unexpanded only past maxBraceWords.
		if t.pattern == "" {
			t.pattern = reasonBrace
		}
		t.wild, t.split = true, true
		u.placeholder(part, b)
	default:
		// Anything new in the parser is treated as unknown rather than dropped.
		setDynamic("command name contains an expansion the policy does not understand")
	}
}

// placeholder writes the source text of an expansion, within the budget of
// the extraction.
func (u *unit) placeholder(n syntax.Node, b *strings.Builder) {
	src := u.source(n)
	if u.x == nil || len(src) > u.x.placeholders {
		b.WriteString("$…")
		return
	}
	u.x.placeholders -= len(src)
	b.WriteString(src)
}

// source returns the text of a node as written, for placeholders and
// messages.
func (u *unit) source(n syntax.Node) string {
	start, end := n.Pos(), n.End()
	if start.IsValid() && end.IsValid() {
		s, e := int(start.Offset()), int(end.Offset())
		if 0 <= s && s <= e && e <= len(u.src) {
			return u.src[s:e]
		}
	}
	var b strings.Builder
	if err := syntax.NewPrinter().Print(&b, n); err != nil {
		return "?"
	}
	return b.String()
}

// unescapeBare removes the backslashes of an unquoted literal and reports
// whether an unescaped glob character or a brace expansion remains.
func unescapeBare(s string) (out string, glob, brace bool) {
	if !strings.ContainsAny(s, "\\*?[{") {
		return s, false, false
	}
	var b strings.Builder
	open := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			if s[i] != '\n' {
				b.WriteByte(s[i])
			}
			continue
		case c == '*' || c == '?':
			glob = true
		case c == '[':
			// A bracket is a pattern only with a closing bracket after
			// it: [ alone (the test command) is an ordinary word.
			if j := strings.IndexByte(s[i+1:], ']'); j > 0 || j == 0 && strings.IndexByte(s[i+2:], ']') >= 0 {
				glob = true
			}
		case c == '{':
			open = true
		case c == '}' && open:
			brace = true
		}
		b.WriteByte(c)
	}
	return b.String(), glob, brace
}

// unescapeDouble applies the backslash rules inside double quotes, where a
// backslash only escapes $ ` " \ and newline.
func unescapeDouble(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case '$', '`', '"', '\\':
				b.WriteByte(s[i+1])
				i++
				continue
			case '\n':
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unescapeHeredoc applies the backslash rules of an unquoted heredoc body:
// those of double quotes, except that " is not special.
func unescapeHeredoc(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case '$', '`', '\\':
				b.WriteByte(s[i+1])
				i++
				continue
			case '\n':
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unescapeANSI decodes the body of a $'...' string as bash does, because
// $'\x72\x6d' is a well-known way to spell rm.
func unescapeANSI(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'e', 'E':
			b.WriteByte(0x1b)
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '\\', '\'', '"', '?':
			b.WriteByte(e)
		case 'c':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i] & 0x1f)
			} else {
				b.WriteString("\\c")
			}
		case 'x', 'u', 'U':
			maxDigits := 2
			switch e {
			case 'u':
				maxDigits = 4
			case 'U':
				maxDigits = 8
			}
			j := i + 1
			for j < len(s) && j-i-1 < maxDigits && isHex(s[j]) {
				j++
			}
			if j == i+1 {
				b.WriteByte('\\')
				b.WriteByte(e)
				continue
			}
			v, _ := strconv.ParseUint(s[i+1:j], 16, 32)
			if e == 'x' {
				b.WriteByte(byte(v))
			} else if v <= utf8.MaxRune {
				b.WriteRune(rune(v))
			}
			i = j - 1
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j-i < 3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			v, _ := strconv.ParseUint(s[i:j], 8, 32)
			b.WriteByte(byte(v))
			i = j - 1
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
