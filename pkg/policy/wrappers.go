package policy

import (
	"slices"
	"strings"

	"github.com/mattn/go-shellwords"
)

// optSpec describes the command line of a wrapper program: enough of its
// options to find where the wrapped command starts.
type optSpec struct {
	valued   string   // short options that take a value, attached or in the next argument
	optional string   // short options whose value can only be attached (-i{} of xargs)
	long     []string // long options that take a value in the next argument when there is no "="
	operands int      // operands between the options and the command (timeout DUR, chroot DIR)
	assigns  bool     // NAME=VALUE arguments may precede the command
	noRun    string   // short options that make the program not run the command
	shell    string   // short options that start a shell when no command is given
}

// wrapperSpec returns the option grammar of a program that runs another
// program given as its trailing arguments.
func wrapperSpec(base string) (optSpec, bool) {
	switch base {
	case "xargs":
		return optSpec{valued: "adEILnPs", optional: "eil",
			long: []string{"arg-file", "delimiter", "max-args", "max-procs", "max-chars", "process-slot-var"}}, true
	case "sudo":
		return optSpec{valued: "CDgprRtTuU", assigns: true, noRun: "elvKV", shell: "is",
			long: []string{"chdir", "close-from", "group", "prompt", "role", "type", "command-timeout", "user", "other-user", "host"}}, true
	case "doas":
		return optSpec{valued: "Cu", shell: "s"}, true
	case "nice":
		return optSpec{valued: "n", long: []string{"adjustment"}}, true
	case "ionice":
		return optSpec{valued: "cnpPu", noRun: "pPu", long: []string{"class", "classdata", "pid", "pgid", "uid"}}, true
	case "timeout":
		return optSpec{valued: "sk", operands: 1, long: []string{"signal", "kill-after"}}, true
	case "stdbuf":
		return optSpec{valued: "ioe", long: []string{"input", "output", "error"}}, true
	case "time":
		return optSpec{valued: "fo", long: []string{"format", "output"}}, true
	case "command":
		return optSpec{noRun: "vV"}, true
	case "exec":
		return optSpec{valued: "a"}, true
	case "chroot":
		return optSpec{operands: 1, long: []string{"userspec", "groups"}}, true
	case "nohup", "builtin", "setsid", "busybox":
		return optSpec{}, true
	}
	return optSpec{}, false
}

// unwrap returns the command a wrapper runs, or nil. stdinShell reports a
// wrapper that starts a shell reading standard input (sudo -s, doas -s).
func unwrap(base string, toks []token) (inner []token, stdinShell bool) {
	if base == "env" {
		return unwrapEnv(toks), false
	}
	spec, ok := wrapperSpec(base)
	if !ok {
		return nil, false
	}
	i, flags := scanOptions(toks, spec)
	if strings.ContainsAny(flags, spec.noRun) {
		return nil, false
	}
	if spec.assigns {
		for i < len(toks) && isAssignment(toks[i].text) {
			i++
		}
	}
	i += spec.operands
	if i >= len(toks) {
		return nil, spec.shell != "" && strings.ContainsAny(flags, spec.shell)
	}
	return toks[i:], false
}

// scanOptions skips a wrapper's options and returns the index of its first
// operand and the short options it saw.
func scanOptions(toks []token, spec optSpec) (int, string) {
	var flags strings.Builder
	i := 1
	for i < len(toks) {
		a := toks[i].text
		switch {
		case a == "--":
			return i + 1, flags.String()
		case strings.HasPrefix(a, "--"):
			name, _, hasValue := strings.Cut(a[2:], "=")
			i++
			if !hasValue && slices.Contains(spec.long, name) {
				i++
			}
		case len(a) > 1 && a[0] == '-':
			i++
			for j := 1; j < len(a); j++ {
				c := a[j]
				flags.WriteByte(c)
				if strings.IndexByte(spec.optional, c) >= 0 {
					break
				}
				if strings.IndexByte(spec.valued, c) >= 0 {
					if j == len(a)-1 {
						i++
					}
					break
				}
			}
		default:
			return i, flags.String()
		}
	}
	return i, flags.String()
}

// unwrapEnv finds the command of env [-i] [-u NAME] [-C DIR] [-S STRING]
// [NAME=VALUE]... COMMAND. The -S string is split into arguments, as env
// itself does, because `env -S 'rm -rf /'` runs rm.
func unwrapEnv(toks []token) []token {
	toks = append([]token(nil), toks...)
	splits := 0
	i := 1
options:
	for i < len(toks) {
		a := toks[i].text
		switch {
		case a == "--":
			i++
			break options
		case a == "-":
			i++
		case strings.HasPrefix(a, "--"):
			name, value, hasValue := strings.Cut(a[2:], "=")
			switch {
			case name == "split-string" && hasValue:
				toks = splitInto(toks, i, 1, token{text: value, dynamic: toks[i].dynamic}, &splits)
			case name == "split-string" && i+1 < len(toks):
				toks = splitInto(toks, i, 2, toks[i+1], &splits)
			case (name == "unset" || name == "chdir") && !hasValue:
				i += 2
			default:
				i++
			}
		case len(a) > 1 && a[0] == '-':
			j := 1
			for ; j < len(a) && strings.IndexByte("uCS", a[j]) < 0; j++ {
			}
			switch {
			case j == len(a):
				i++
			case a[j] == 'S' && j+1 < len(a):
				toks = splitInto(toks, i, 1, token{text: a[j+1:], dynamic: toks[i].dynamic}, &splits)
			case a[j] == 'S' && i+1 < len(toks):
				toks = splitInto(toks, i, 2, toks[i+1], &splits)
			case j+1 < len(a):
				i++
			default:
				i += 2
			}
		default:
			break options
		}
	}
	for i < len(toks) && isAssignment(toks[i].text) {
		i++
	}
	if i >= len(toks) {
		return nil
	}
	return toks[i:]
}

// splitInto replaces n arguments at i with the words of s. After a few
// splits it gives up splitting, so that crafted nesting stays cheap.
func splitInto(toks []token, i, n int, s token, splits *int) []token {
	*splits++
	if *splits > maxDepth {
		return append(toks[:i:i], token{text: "env -S", dynamic: "env -S strings nested deeper than the policy examines"})
	}
	words, err := shellwords.Parse(s.text)
	if err != nil {
		words = strings.Fields(s.text)
	}
	out := append([]token(nil), toks[:i]...)
	for _, w := range words {
		out = append(out, token{text: w, dynamic: s.dynamic})
	}
	return append(out, toks[min(i+n, len(toks)):]...)
}

// isAssignment reports a NAME=VALUE argument of env or sudo.
func isAssignment(s string) bool {
	return strings.IndexByte(s, '=') > 0 && s[0] != '-'
}
