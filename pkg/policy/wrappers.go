package policy

import (
	"strings"
)

// optSpec describes the command line of a wrapper program: enough of its
// options to find where the wrapped command starts.
type optSpec struct {
	valued   string   // short options that take a value, attached or in the next argument
	optional string   // short options whose value can only be attached (-i{} of xargs)
	long     []string // long options that take a value in the next argument when there is no "="
	flags    []string // long options without a value (or with an optional attached one)
	operands int      // operands between the options and the command (timeout DUR, chroot DIR)
	assigns  bool     // NAME=VALUE arguments may precede the command
	noRun    string   // short options that make the program not run the command
	noRunL   []string // long options that make it not run the command
	shell    string   // short options that start a shell when no command is given
	shellL   []string // long options that start a shell when no command is given
}

// wrapperSpec returns the option grammar of a program that runs another
// program given as its trailing arguments. The long options are complete,
// because getopt_long accepts any unambiguous prefix of them (timeout
// --sig KILL is --signal KILL): an option that resolves to none of them,
// or to several, is reported rather than guessed at.
func wrapperSpec(base string) (optSpec, bool) {
	switch base {
	case "sudo":
		return optSpec{valued: "CDghprRtTuU", assigns: true, noRun: "elvKkV", shell: "is",
			long:   []string{"chdir", "close-from", "group", "host", "prompt", "role", "type", "command-timeout", "user", "other-user", "login-class", "chroot"},
			flags:  []string{"askpass", "background", "bell", "preserve-env", "edit", "help", "login", "list", "non-interactive", "preserve-groups", "remove-timestamp", "reset-timestamp", "shell", "stdin", "validate", "version"},
			noRunL: []string{"edit", "help", "list", "remove-timestamp", "validate", "version"},
			shellL: []string{"login", "shell"}}, true
	case "doas":
		return optSpec{valued: "Cu", shell: "s"}, true
	case "nice":
		return optSpec{valued: "n", long: []string{"adjustment"}, flags: []string{"help", "version"}, noRunL: []string{"help", "version"}}, true
	case "ionice":
		return optSpec{valued: "cnpPu", noRun: "pPu", long: []string{"class", "classdata", "pid", "pgid", "uid"},
			flags: []string{"ignore", "help", "version"}, noRunL: []string{"pid", "pgid", "uid", "help", "version"}}, true
	case "timeout":
		return optSpec{valued: "sk", operands: 1, long: []string{"signal", "kill-after"},
			flags: []string{"foreground", "preserve-status", "verbose", "help", "version"}, noRunL: []string{"help", "version"}}, true
	case "stdbuf":
		return optSpec{valued: "ioe", long: []string{"input", "output", "error"}, flags: []string{"help", "version"}, noRunL: []string{"help", "version"}}, true
	case "time":
		return optSpec{valued: "fo", long: []string{"format", "output"},
			flags: []string{"append", "portability", "verbose", "quiet", "help", "version"}, noRunL: []string{"help", "version"}}, true
	case "command":
		return optSpec{noRun: "vV"}, true
	case "exec":
		return optSpec{valued: "a"}, true
	case "chroot":
		return optSpec{operands: 1, long: []string{"userspec", "groups"}, flags: []string{"skip-chdir", "help", "version"}, noRunL: []string{"help", "version"}}, true
	case "setsid":
		return optSpec{flags: []string{"ctty", "fork", "wait", "help", "version"}, noRunL: []string{"help", "version"}}, true
	case "nohup", "builtin", "busybox", "toybox", "nocache", "eatmydata", "catchsegv", "dbus-run-session", "xvfb-run":
		return optSpec{flags: []string{"help", "version"}, noRunL: []string{"help", "version"}}, true
	case "taskset":
		return optSpec{operands: 1, noRun: "p", flags: []string{"all-tasks", "pid", "cpu-list", "help", "version"}, noRunL: []string{"pid", "help", "version"}}, true
	case "chrt":
		return optSpec{operands: 1, valued: "T", noRun: "pm", long: []string{"sched-runtime", "sched-deadline", "sched-period"},
			flags: []string{"batch", "deadline", "fifo", "idle", "other", "rr", "reset-on-fork", "all-tasks", "max", "pid", "verbose", "help", "version"}, noRunL: []string{"pid", "max", "help", "version"}}, true
	case "strace", "ltrace":
		return optSpec{valued: "abeEIoOpPsSuUXnA", noRun: "pV", long: []string{"output", "attach", "user", "env", "string-limit", "trace", "signal", "status", "quiet", "decode-fds", "absolute-timestamps", "syscall-times", "relative-timestamps", "summary-sort-by", "columns", "trace-path", "detach-on", "abbrev", "verbose", "raw", "read", "write", "inject", "fault", "kvm", "stack-trace"},
			flags: []string{"follow-forks", "output-separately", "summary", "summary-only", "help", "version", "daemonize"}, noRunL: []string{"attach", "help", "version"}}, true
	case "prlimit":
		return optSpec{valued: "p", noRun: "p", long: []string{"pid", "output"},
			flags: []string{"as", "core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile", "nproc", "rss", "rtprio", "rttime", "sigpending", "stack", "noheadings", "raw", "verbose", "help", "version"}, noRunL: []string{"pid", "help", "version"}}, true
	case "sshpass":
		return optSpec{valued: "pfdP", flags: []string{"help"}, noRunL: []string{"help"}}, true
	}
	return optSpec{}, false
}

// longOption resolves --name (without its "=value") against a wrapper's
// long options as getopt_long does: an exact name, or a prefix of exactly
// one. ok is false for an unknown or ambiguous name.
func longOption(name string, spec optSpec) (full string, valued, ok bool) {
	var hits []string
	for _, set := range [][]string{spec.long, spec.flags} {
		for _, o := range set {
			if o == name {
				return o, contains(spec.long, o), true
			}
			if strings.HasPrefix(o, name) {
				hits = append(hits, o)
			}
		}
	}
	if len(hits) != 1 {
		return "", false, false
	}
	return hits[0], contains(spec.long, hits[0]), true
}

func contains(set []string, s string) bool {
	for _, x := range set {
		if x == s {
			return true
		}
	}
	return false
}

// unwrap returns the command a wrapper runs, or nil. stdinShell reports a
// wrapper that starts a shell reading standard input (sudo -s, doas -s).
// problem is set when an option could not be read with certainty. assigns
// are the NAME=VALUE arguments it puts in the environment of what it runs
// (env, sudo).
func unwrap(base string, toks []token) (inner []token, stdinShell bool, problem string, assigns []token) {
	if base == "env" {
		return unwrapEnv(toks)
	}
	spec, ok := wrapperSpec(base)
	if !ok {
		return nil, false, "", nil
	}
	i, flags, longs, problem := scanOptions(toks, spec)
	if spec.assigns {
		for i < len(toks) && isAssignment(toks[i].text) {
			assigns = append(assigns, toks[i])
			i++
		}
	}
	if strings.ContainsAny(flags, spec.noRun) && spec.noRun != "" {
		return nil, false, problem, assigns
	}
	for _, l := range longs {
		if contains(spec.noRunL, l) {
			return nil, false, problem, assigns
		}
	}
	i += spec.operands
	if i >= len(toks) {
		shell := spec.shell != "" && strings.ContainsAny(flags, spec.shell)
		for _, l := range longs {
			shell = shell || contains(spec.shellL, l)
		}
		return nil, shell, problem, assigns
	}
	return toks[i:], false, problem, assigns
}

// scanOptions skips a wrapper's options and returns the index of its first
// operand, the short options and the (resolved) long options it saw.
func scanOptions(toks []token, spec optSpec) (int, string, []string, string) {
	var flags strings.Builder
	var longs []string
	problem := ""
	i := 1
	for i < len(toks) {
		a := toks[i].text
		switch {
		case a == "--":
			return i + 1, flags.String(), longs, problem
		case strings.HasPrefix(a, "--"):
			name, _, hasValue := strings.Cut(a[2:], "=")
			i++
			full, valued, ok := longOption(name, spec)
			if !ok {
				if problem == "" {
					problem = "an option of " + baseName(toks[0].text) + " the policy cannot resolve: " + a
				}
				continue
			}
			longs = append(longs, full)
			if valued && !hasValue {
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
			return i, flags.String(), longs, problem
		}
	}
	return i, flags.String(), longs, problem
}

// envSpec is env's option grammar (GNU coreutils).
var envSpec = optSpec{
	valued: "uCS",
	long:   []string{"unset", "chdir", "split-string"},
	flags: []string{"ignore-environment", "null", "block-signal", "default-signal", "ignore-signal",
		"list-signal-handling", "debug", "help", "version"},
}

// unwrapEnv finds the command of env [-i] [-u NAME] [-C DIR] [-S STRING]
// [NAME=VALUE]... COMMAND. The -S string is split into arguments as env
// itself splits it, because `env -S 'rm -rf /'` runs rm.
func unwrapEnv(toks []token) ([]token, bool, string, []token) {
	toks = append([]token(nil), toks...)
	splits := 0
	problem := ""
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
			full, _, ok := longOption(name, envSpec)
			switch {
			case !ok:
				if problem == "" {
					problem = "an option of env the policy cannot resolve: " + a
				}
				i++
			case full == "help" || full == "version":
				return nil, false, problem, nil
			case full == "split-string" && hasValue:
				toks = splitInto(toks, i, 1, token{text: value, dynamic: toks[i].dynamic}, &splits, &problem)
			case full == "split-string" && i+1 < len(toks):
				toks = splitInto(toks, i, 2, toks[i+1], &splits, &problem)
			case (full == "unset" || full == "chdir") && !hasValue:
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
				toks = splitInto(toks, i, 1, token{text: a[j+1:], dynamic: toks[i].dynamic}, &splits, &problem)
			case a[j] == 'S' && i+1 < len(toks):
				toks = splitInto(toks, i, 2, toks[i+1], &splits, &problem)
			case j+1 < len(a):
				i++
			default:
				i += 2
			}
		default:
			break options
		}
	}
	var assigns []token
	for i < len(toks) && isAssignment(toks[i].text) {
		assigns = append(assigns, toks[i])
		i++
	}
	if i >= len(toks) {
		return nil, false, problem, assigns
	}
	return toks[i:], false, problem, assigns
}

// splitInto replaces n arguments at i with the words of s. After a few
// splits it gives up splitting, so that crafted nesting stays cheap.
func splitInto(toks []token, i, n int, s token, splits *int, problem *string) []token {
	*splits++
	if *splits > maxDepth {
		return append(toks[:i:i], token{text: "env -S", dynamic: "env -S strings nested deeper than the policy examines"})
	}
	words, err := splitEnvString(s)
	if err != "" && *problem == "" {
		*problem = "env -S string the policy cannot split: " + err
	}
	out := append([]token(nil), toks[:i]...)
	out = append(out, words...)
	return append(out, toks[min(i+n, len(toks)):]...)
}

// splitEnvString splits an env -S string the way GNU env does: blanks
// separate words; single quotes are literal (but \\ and \'); double quotes
// and bare text know the escapes \" \' \\ \f \n \r \t \v \# \$, \_ (a blank
// that separates words outside quotes) and \c (ignore the rest); a word
// starting with # begins a comment; ${NAME} is the variable's value at run
// time, so a word holding one is dynamic.
func splitEnvString(s token) ([]token, string) {
	var out []token
	var cur strings.Builder
	inWord, dyn := false, s.dynamic
	flush := func() {
		if inWord {
			t := token{text: cur.String(), dynamic: dyn}
			if dyn != "" {
				t.wild = true
			}
			out = append(out, t)
		}
		cur.Reset()
		inWord, dyn = false, s.dynamic
	}
	str := s.text
	quote := byte(0)
	for i := 0; i < len(str); i++ {
		c := str[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			} else if c == '\\' && i+1 < len(str) && (str[i+1] == '\\' || str[i+1] == '\'') {
				i++
				cur.WriteByte(str[i])
			} else {
				cur.WriteByte(c)
			}
		case c == '\\' && i+1 < len(str):
			i++
			switch e := str[i]; e {
			case '"', '\'', '\\', '#', '$':
				cur.WriteByte(e)
			case 'f':
				cur.WriteByte('\f')
			case 'n':
				cur.WriteByte('\n')
			case 'r':
				cur.WriteByte('\r')
			case 't':
				cur.WriteByte('\t')
			case 'v':
				cur.WriteByte('\v')
			case '_':
				if quote == '"' {
					cur.WriteByte(' ')
				} else {
					flush()
					continue
				}
			case 'c':
				if quote != 0 {
					return out, "\\c inside quotes"
				}
				flush()
				return out, ""
			default:
				return out, "unknown escape \\" + string(e)
			}
			inWord = true
		case c == '\\':
			return out, "a backslash at the end"
		case quote == '"' && c == '"':
			quote = 0
		case quote == 0 && (c == '\'' || c == '"'):
			quote = c
			inWord = true
		case c == '$' && i+1 < len(str) && str[i+1] == '{':
			end := strings.IndexByte(str[i:], '}')
			if end < 0 {
				return out, "an unterminated ${"
			}
			cur.WriteString(str[i : i+end+1])
			dyn = "env -S expands a variable at run time"
			inWord = true
			i += end
		case quote == 0 && (c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'):
			flush()
		case quote == 0 && c == '#' && !inWord:
			flush()
			return out, ""
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 {
		return out, "an unterminated quote"
	}
	flush()
	return out, ""
}

// isAssignment reports a NAME=VALUE argument of env or sudo.
func isAssignment(s string) bool {
	return strings.IndexByte(s, '=') > 0 && s[0] != '-'
}
