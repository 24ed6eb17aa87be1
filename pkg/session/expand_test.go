package session

import (
	"strconv"
	"strings"
	"testing"
)

// TestExpand: the scan fills the placeholders exactly as a
// strings.Replacer of them would, over every piece of the protocol's text
// and over text with stray or unknown placeholders.
func TestExpand(t *testing.T) {
	p := callProto{marker: newMarker(), n: 42, vars: newVars(), prev: newVars(), ctlIn: "/c/in", ctlOut: "/c/out", script: "/c/s.sh", stdin: "/dev/null", outs: []string{"/c/o", "/c/e"}}
	want := func(t string) string {
		return strings.NewReplacer("⟨V⟩", p.vars, "⟨Q⟩", p.prev, "⟨M⟩", p.marker, "⟨N⟩", strconv.Itoa(p.n)).Replace(t)
	}
	pieces := []string{
		stashOpts, posixOn, enableBuiltins, posixBack, aliasesOff, plainPrompts, raiseINT, inShell, forget,
		"", "⟨", "⟩", "⟨⟩", "⟨X⟩", "a⟨V", "⟨V⟩⟨Q⟩⟨M⟩⟨N⟩", "x⟨⟨V⟩⟩y", "é⟨N⟩ü", "⟨V⟩",
	}
	for _, s := range pieces {
		if got := p.expand(s); got != want(s) {
			t.Errorf("expand(%q) = %q, want %q", s, got, want(s))
		}
	}
	// The whole texts: no placeholder is left in them.
	for _, s := range []string{callLine(p, newNonce()), probeLine(p, newNonce()), string(callFile(p, "true", userTraps{ret: "trap -- 'x' RETURN\n", errAction: "y", errSet: true}, "/c/t"))} {
		if strings.Contains(s, "⟨") || strings.Contains(s, "⟩") {
			t.Errorf("a placeholder is left in %q", s)
		}
	}
}

// BenchmarkCallText is the server's building of one call's text: its
// line and its file.
func BenchmarkCallText(b *testing.B) {
	p := callProto{marker: newMarker(), n: 7, vars: newVars(), prev: newVars(), ctlIn: "/c/in", ctlOut: "/c/out", script: "/c/s.sh", stdin: "/dev/null", outs: []string{"/c/o", "/c/e"}}
	for b.Loop() {
		_ = callLine(p, newNonce())
		_ = callFile(p, "true", userTraps{}, "/c/t")
	}
}
