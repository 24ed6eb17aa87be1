package clikit

import (
	"fmt"
	"strings"
)

// Hints say what an operation does to the world, for hosts that decide
// which tool calls to approve without asking (MCP tool annotations). Every
// operation declares them on its command, in its AnnotHints annotation
// (Hints.String), so the MCP server and the schemas read them from there.
type Hints struct {
	// ReadOnly: the operation changes nothing outside agentplane's own
	// bookkeeping (a log reader's cursor, an audit record).
	ReadOnly bool `json:"read_only"`
	// Destructive: it may remove or overwrite something (a file's
	// content, a running process). Meaningful only when not ReadOnly.
	Destructive bool `json:"destructive"`
	// Idempotent: the same call again has no further effect.
	Idempotent bool `json:"idempotent"`
	// OpenWorld: it may reach beyond the machine's files and processes
	// agentplane knows of (an arbitrary command can use the network).
	OpenWorld bool `json:"open_world"`
}

var hintWords = []string{"read-only", "destructive", "idempotent", "open-world"}

// String is the annotation form: the four words, each prefixed by "no-"
// when false, so that a declaration says all four.
func (h Hints) String() string {
	vals := []bool{h.ReadOnly, h.Destructive, h.Idempotent, h.OpenWorld}
	words := make([]string, len(vals))
	for i, v := range vals {
		words[i] = hintWords[i]
		if !v {
			words[i] = "no-" + hintWords[i]
		}
	}
	return strings.Join(words, " ")
}

// ParseHints reads the annotation form. All four words must be there:
// a declaration that forgets one is an error, not a default.
func ParseHints(s string) (Hints, error) {
	got := map[string]bool{}
	for _, w := range strings.Fields(s) {
		v := !strings.HasPrefix(w, "no-")
		w = strings.TrimPrefix(w, "no-")
		if _, dup := got[w]; dup {
			return Hints{}, fmt.Errorf("hint %q given twice", w)
		}
		got[w] = v
	}
	for _, w := range hintWords {
		if _, ok := got[w]; !ok {
			return Hints{}, fmt.Errorf("hint %q (or no-%s) missing from %q", w, w, s)
		}
	}
	if len(got) != len(hintWords) {
		return Hints{}, fmt.Errorf("unknown hint in %q (want %s)", s, strings.Join(hintWords, ", "))
	}
	return Hints{ReadOnly: got["read-only"], Destructive: got["destructive"], Idempotent: got["idempotent"], OpenWorld: got["open-world"]}, nil
}

// MCP is the hints as MCP tool annotations. A read-only tool is never
// destructive, whatever was declared.
func (h Hints) MCP() map[string]any {
	return map[string]any{
		"readOnlyHint":    h.ReadOnly,
		"destructiveHint": h.Destructive && !h.ReadOnly,
		"idempotentHint":  h.Idempotent,
		"openWorldHint":   h.OpenWorld,
	}
}
