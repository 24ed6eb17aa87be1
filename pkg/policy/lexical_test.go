package policy

import (
	"regexp"
	"testing"
)

// TestLexicalMatchesRegexp: isIdent and isNumber, written out so that no
// regexp is compiled at start, accept exactly what the regexps they
// replaced accept.
func TestLexicalMatchesRegexp(t *testing.T) {
	ident := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	number := regexp.MustCompile(`^[-+]?(0[xX][0-9a-fA-F]+|[0-9]+)$`)
	inputs := []string{"", "a", "_", "A9", "9a", "a-b", "a b", "é", "PATH", "x_1", "-", "+", "0", "-0", "+12",
		"0x", "0x1f", "0XfF", "-0x1", "0x1g", "1.5", "12a", "--1", "0x-1", "x0", "00", "0b101", "+0X", "٣"}
	// every string of up to three bytes from a small alphabet
	alpha := []byte{'a', 'Z', '_', '0', '9', 'x', 'X', 'f', 'g', '-', '+', ' ', 0x80}
	for _, a := range alpha {
		inputs = append(inputs, string([]byte{a}))
		for _, b := range alpha {
			inputs = append(inputs, string([]byte{a, b}))
			for _, c := range alpha {
				inputs = append(inputs, string([]byte{a, b, c}))
			}
		}
	}
	for _, s := range inputs {
		if got, want := isIdent(s), ident.MatchString(s); got != want {
			t.Errorf("isIdent(%q) = %v, regexp says %v", s, got, want)
		}
		if got, want := isNumber(s), number.MatchString(s); got != want {
			t.Errorf("isNumber(%q) = %v, regexp says %v", s, got, want)
		}
	}
}
