package policy

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// xargsSpec is xargs' option grammar (GNU findutils).
var xargsSpec = optSpec{valued: "adEILnPsS", optional: "eil",
	long: []string{"arg-file", "delimiter", "max-args", "max-procs", "max-chars", "process-slot-var"},
	flags: []string{"eof", "replace", "max-lines", "null", "exit", "interactive", "no-run-if-empty",
		"open-tty", "show-limits", "verbose", "help", "version"},
}

// xargs extracts the command xargs runs. Its input becomes arguments at
// run time: appended to the command, or put in place of the replace string
// with -I, so the command could match any rule its known words begin.
func (x *extractor) xargs(toks []token, redirs []*syntax.Redirect, u *unit, text string, wraps int) {
	i, flags, longs, problem := scanOptions(toks, xargsSpec)
	if problem != "" {
		x.unresolved(text, problem)
	}
	for _, l := range longs {
		if l == "help" || l == "version" || l == "show-limits" {
			return
		}
	}
	replace := ""
	for j := 1; j < i && j < len(toks); j++ {
		a := toks[j].text
		switch {
		case a == "-I" && j+1 < len(toks):
			replace = toks[j+1].text
		case strings.HasPrefix(a, "-I") && len(a) > 2:
			replace = a[2:]
		case a == "-i" || a == "--replace":
			replace = "{}"
		case strings.HasPrefix(a, "-i") && len(a) > 2 && !strings.HasPrefix(a, "--"):
			replace = a[2:]
		case strings.HasPrefix(a, "--replace="):
			replace = strings.TrimPrefix(a, "--replace=")
		}
	}
	_ = flags
	if i >= len(toks) {
		return // xargs runs echo
	}
	inner := append([]token(nil), toks[i:]...)
	if replace == "" {
		x.argv(inner, redirs, u, text, wraps+1, true)
		return
	}
	for k := range inner {
		if strings.Contains(inner[k].text, replace) {
			inner[k].wild = true
			if inner[k].dynamic == "" {
				inner[k].dynamic = "xargs puts its input in place of " + replace
			}
		}
	}
	x.argv(inner, redirs, u, text, wraps+1, false)
}

// runner handles programs that run commands given in their arguments in a
// form the wrappers table cannot describe. It returns true when it fully
// handled the command (nothing more to unwrap).
func (x *extractor) runner(base string, toks []token, redirs []*syntax.Redirect, u *unit, text string, wraps int) bool {
	could := func(reason string) { x.unresolvedKind(text, reason, KindCouldMatch) }
	args := toks[1:]
	switch base {
	case "su", "runuser":
		// su [options] [-] [USER [ARG...]]: -c/--command runs a string
		// in the user's shell; without it, the shell reads stdin.
		for i := 0; i < len(args); i++ {
			a := args[i].text
			switch {
			case a == "-c" || a == "--command" || a == "--session-command":
				if i+1 < len(args) {
					x.nested(args[i+1], u, text, base+" -c")
				}
				return true
			case strings.HasPrefix(a, "--command=") || strings.HasPrefix(a, "--session-command="):
				_, v, _ := strings.Cut(a, "=")
				x.nested(token{text: v, dynamic: args[i].dynamic}, u, text, base+" -c")
				return true
			}
		}
		x.stdinScript(redirs, u, text)
		return true
	case "sg":
		// sg GROUP [-c] COMMAND: the command is a string for /bin/sh.
		rest := args
		if len(rest) > 0 {
			rest = rest[1:]
		}
		if len(rest) > 0 && rest[0].text == "-c" {
			rest = rest[1:]
		}
		if len(rest) > 0 {
			x.nested(joinTokens(rest), u, text, "sg")
		} else {
			x.stdinScript(redirs, u, text)
		}
		return true
	case "script":
		for i := 0; i < len(args); i++ {
			a := args[i].text
			switch {
			case a == "-c" || a == "--command":
				if i+1 < len(args) {
					x.nested(args[i+1], u, text, "script -c")
				}
				return true
			case strings.HasPrefix(a, "--command="):
				x.nested(token{text: strings.TrimPrefix(a, "--command="), dynamic: args[i].dynamic}, u, text, "script -c")
				return true
			}
		}
		x.stdinScript(redirs, u, text)
		return true
	case "flock":
		// flock [options] FILE|DIR COMMAND [ARG...] | FILE -c STRING | FD.
		i := 0
		for i < len(args) && strings.HasPrefix(args[i].text, "-") {
			a := args[i].text
			i++
			if a == "-w" || a == "-E" || a == "--timeout" || a == "--wait" || a == "--conflict-exit-code" {
				i++
			}
			if a == "-c" || a == "--command" {
				if i < len(args) {
					x.nested(args[i], u, text, "flock -c")
				}
				return true
			}
		}
		i++ // the lock file or descriptor
		if i < len(args) && (args[i].text == "-c" || args[i].text == "--command") {
			if i+1 < len(args) {
				x.nested(args[i+1], u, text, "flock -c")
			}
			return true
		}
		if i < len(args) {
			x.argv(args[i:], redirs, u, text, wraps+1, false)
		}
		return true
	case "watch":
		// watch joins its arguments into a string for sh -c, unless -x.
		i := 0
		exec := false
		for i < len(args) && strings.HasPrefix(args[i].text, "-") {
			a := args[i].text
			i++
			if a == "-x" || a == "--exec" {
				exec = true
			}
			if a == "-n" || a == "--interval" || a == "-q" || a == "--equexit" {
				i++
			}
		}
		if i < len(args) {
			if exec {
				x.argv(args[i:], redirs, u, text, wraps+1, false)
			} else {
				x.nested(joinTokens(args[i:]), u, text, "watch")
			}
		}
		return true
	case "unshare", "nsenter", "numactl", "systemd-run", "firejail", "bwrap", "cgexec", "runcon",
		"parallel", "at", "batch", "tmux", "screen", "expect", "fakeroot", "proot", "ssh-agent", "nohup.sh",
		"start-stop-daemon", "pkexec", "unbuffer", "fakechroot", "dbus-launch", "daemonize", "socat", "run-parts",
		"chpst", "setpriv", "capsh", "schroot", "systemd-nspawn", "machinectl", "xterm", "entr", "watchexec",
		"nodemon", "cpulimit", "trickle", "torsocks", "proxychains", "proxychains4", "rlwrap", "chronic", "ifne",
		"hyperfine", "perf", "uftrace", "heaptrack", "box64", "qemu-x86_64", "qemu-aarch64", "qemu-i386", "qemu-arm":
		could(base + " runs commands in a way the policy does not follow before the call")
		return true
	case "nc", "ncat", "netcat":
		// -e PROGRAM and -c COMMAND run a program for each connection.
		for _, a := range args {
			if t := a.text; len(t) > 1 && t[0] == '-' && t[1] != '-' && strings.ContainsAny(t, "ec") || strings.HasPrefix(t, "--exec") || strings.HasPrefix(t, "--sh-exec") || strings.HasPrefix(t, "--lua-exec") {
				could(base + " " + t + " runs a program for a connection")
				break
			}
		}
		return false
	case "sed", "gsed":
		if sedRuns(args) {
			could("sed runs commands (the e command or flag, or a script from a file)")
		}
		return false
	case "awk", "gawk", "mawk", "nawk", "busybox-awk":
		if awkRuns(args) {
			could("awk runs commands (system(), a pipe, or a program from a file)")
		}
		return false
	case "tar", "bsdtar":
		for i, a := range args {
			name, value, has := strings.Cut(a.text, "=")
			switch name {
			case "--to-command", "--use-compress-program", "--info-script", "--new-volume-script", "--rsh-command", "-I", "-F":
				if !has && i+1 < len(args) {
					value, has = args[i+1].text, true
				}
				if has {
					x.nested(token{text: value, dynamic: a.dynamic}, u, text, "tar "+name)
				}
			case "--checkpoint-action":
				if v, ok := strings.CutPrefix(value, "exec="); ok {
					x.nested(token{text: v, dynamic: a.dynamic}, u, text, "tar --checkpoint-action")
				}
			}
		}
		return false
	case "ssh", "scp", "sftp", "sshfs":
		for i, a := range args {
			opt := a.text
			if opt == "-o" && i+1 < len(args) {
				opt = "-o" + args[i+1].text
			}
			if v, ok := strings.CutPrefix(opt, "-o"); ok {
				key, value, _ := strings.Cut(strings.TrimSpace(v), "=")
				if value == "" {
					key, value, _ = strings.Cut(strings.TrimSpace(v), " ")
				}
				switch strings.ToLower(strings.TrimSpace(key)) {
				case "proxycommand", "localcommand", "knownhostscommand":
					x.nested(token{text: value, dynamic: a.dynamic}, u, text, "ssh "+key)
				}
			}
			if (opt == "-S" || opt == "-F") && base != "ssh" || opt == "-F" {
				could(base + " " + opt + " names a program or a configuration that can run commands")
			}
		}
		return false
	case "rsync":
		for i, a := range args {
			name, value, has := strings.Cut(a.text, "=")
			if name == "-e" || name == "--rsh" {
				if !has && i+1 < len(args) {
					value = args[i+1].text
				}
				x.nested(token{text: value, dynamic: a.dynamic}, u, text, "rsync -e")
			}
		}
		return false
	case "make", "gmake":
		for i, a := range args {
			t := a.text
			switch {
			case t == "--eval" || t == "-E" || strings.HasPrefix(t, "--eval="):
				could("make --eval runs text as a makefile")
			case (t == "-f" || t == "--file" || t == "--makefile") && i+1 < len(args) &&
				(isStdinPath(args[i+1].text) || isFDPath(args[i+1].text) || args[i+1].nameProblem() != ""):
				could("make reads its makefile from standard input or a computed path")
			}
		}
		return false
	case "git":
		for i := 0; i < len(args); i++ {
			t := args[i].text
			if !strings.HasPrefix(t, "-") {
				break
			}
			switch {
			case t == "-c" || strings.HasPrefix(t, "-c") && len(t) > 2 || strings.HasPrefix(t, "--config-env"):
				could("git " + t + " sets configuration that can make git run programs")
			case strings.HasPrefix(t, "--exec-path="):
				could("git --exec-path chooses where git finds the programs it runs")
			}
			if (t == "-c" || t == "-C" || t == "--git-dir" || t == "--work-tree" || t == "--namespace") && i+1 < len(args) {
				i++
			}
		}
		return false
	case "fc":
		// fc runs commands from the history: again (fc -s), or as an
		// editor (-e NAME, else FCEDIT or EDITOR) leaves them. Only fc -l
		// lists them.
		for i, a := range args {
			if t := a.text; len(t) > 1 && t[0] == '-' && t[1] != '-' && strings.Contains(t, "l") {
				return false
			}
			if a.text == "-e" && i+1 < len(args) {
				x.nested(args[i+1], u, text, "fc -e")
			}
		}
		x.unresolved(text, "fc runs commands from the history")
		return false
	case "compgen":
		// compgen -C COMMAND runs a command, -F FUNCTION calls one.
		for i, a := range args {
			switch {
			case a.text == "-C" && i+1 < len(args):
				x.nested(args[i+1], u, text, "compgen -C")
			case a.text == "-F":
				x.unresolved(text, "compgen -F calls a shell function")
			}
		}
		return false
	case "hash":
		for _, a := range args {
			if strings.HasPrefix(a.text, "-") && strings.Contains(a.text, "p") {
				x.unresolved(text, "hash -p changes what a command name runs")
				break
			}
		}
		return false
	case "enable":
		for _, a := range args {
			if strings.HasPrefix(a.text, "-") && strings.Contains(a.text, "f") {
				x.unresolved(text, "enable -f loads a builtin from a shared object")
				break
			}
		}
		return false
	case "mapfile", "readarray", "unset", "read", "printf", "test", "[", "wait", "local", "export", "readonly", "declare", "typeset":
		for i, a := range args {
			if (base == "mapfile" || base == "readarray") && strings.HasPrefix(a.text, "-C") {
				x.couldMatch(u, "callback:"+text, text, base+" -C runs a callback as code")
			}
			if base == "printf" && a.text != "-v" && i > 0 && args[i-1].text != "-v" {
				continue
			}
			// A variable name with a subscript: bash evaluates the
			// subscript, and a $(...) or a variable in it runs commands.
			if strings.Contains(a.text, "[") && (a.wild || strings.ContainsAny(a.text, "$`")) {
				x.couldMatch(u, "subscript:"+a.text, text, "the subscript of "+a.text+" is evaluated, which can run commands")
			}
		}
		return false
	case "vim", "vi", "nvim", "ex", "view", "emacs", "gdb", "lldb":
		for _, a := range args {
			t := a.text
			if t == "-c" || t == "--cmd" || t == "-S" || strings.HasPrefix(t, "+") || t == "-ex" || t == "-x" ||
				t == "--eval" || t == "-l" || t == "--load" || t == "-batch" || t == "--batch" {
				could(base + " " + t + " runs editor or debugger commands, which can run programs")
				break
			}
		}
		return false
	}
	return false
}

// sedRuns reports a sed command line that can run programs: a script from
// a file, or an e command or s///e flag in a script argument.
func sedRuns(args []token) bool {
	var scripts []string
	explicit := false
	for i := 0; i < len(args); i++ {
		a := args[i].text
		switch {
		case a == "-f" || a == "--file" || strings.HasPrefix(a, "--file=") || strings.HasPrefix(a, "-f") && len(a) > 2:
			return true
		case a == "-e" || a == "--expression":
			explicit = true
			if i+1 < len(args) {
				scripts = append(scripts, args[i+1].text)
				if args[i+1].wild {
					return true
				}
				i++
			}
		case strings.HasPrefix(a, "--expression="):
			explicit = true
			scripts = append(scripts, strings.TrimPrefix(a, "--expression="))
		case strings.HasPrefix(a, "-e") && len(a) > 2:
			explicit = true
			scripts = append(scripts, a[2:])
		case strings.HasPrefix(a, "-") && len(a) > 1:
			if strings.ContainsAny(a[1:], "f") && !strings.HasPrefix(a, "--") {
				return true
			}
		case !explicit:
			explicit = true
			scripts = append(scripts, a)
			if args[i].wild {
				return true
			}
		}
	}
	for _, s := range scripts {
		if sedScriptRuns(s) {
			return true
		}
	}
	return false
}

// sedScriptRuns scans a sed script for the e command and the e flag of s.
// It knows addresses, blocks, the text commands (a i c, whose argument is
// text), s and y with any delimiter, and the file commands; it errs on the
// side of "runs".
func sedScriptRuns(s string) bool {
	i := 0
	skipTo := func(delim byte) bool { // past the next unescaped delim
		for i < len(s) {
			c := s[i]
			i++
			if c == '\\' && i < len(s) {
				i++
				continue
			}
			if c == delim {
				return true
			}
			if c == '\n' && delim != '\n' {
				return false
			}
		}
		return false
	}
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '{' || c == '}' || c == '!':
			i++
		case c >= '0' && c <= '9' || c == '$' || c == ',' || c == '~' || c == '+':
			i++
		case c == '/':
			i++
			if !skipTo('/') {
				return true
			}
			for i < len(s) && (s[i] == 'I' || s[i] == 'M') {
				i++
			}
		case c == '\\':
			if i+1 >= len(s) {
				return true
			}
			d := s[i+1]
			i += 2
			if !skipTo(d) {
				return true
			}
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == 'e':
			return true
		case c == 's' || c == 'y':
			if i+1 >= len(s) {
				return true
			}
			d := s[i+1]
			i += 2
			if !skipTo(d) || !skipTo(d) {
				return true
			}
			if c == 'y' {
				continue
			}
			for i < len(s) && s[i] != ';' && s[i] != '\n' && s[i] != '}' {
				switch s[i] {
				case 'e':
					return true
				case 'w', 'W':
					// The rest of the line is a file name.
					for i < len(s) && s[i] != '\n' {
						i++
					}
					continue
				}
				i++
			}
		case c == 'a' || c == 'i' || c == 'c' || c == 'r' || c == 'R' || c == 'w' || c == 'W' || c == ':' || c == 'b' || c == 't' || c == 'T':
			// The rest of the line is text, a file or a label.
			for i < len(s) && s[i] != '\n' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
		case strings.IndexByte("=dDgGhHlnNpPqQxzFvL", c) >= 0:
			i++
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
		default:
			return true
		}
	}
	return false
}

// awkRuns reports an awk command line whose program can run commands:
// system(), a pipe to or from a command, or a program from a file.
func awkRuns(args []token) bool {
	for i := 0; i < len(args); i++ {
		a := args[i].text
		switch {
		case a == "-f" || strings.HasPrefix(a, "--file") || strings.HasPrefix(a, "-f") && len(a) > 2 || a == "-E" || a == "--exec" || a == "-i" || a == "--include" || a == "-l" || a == "--load":
			return true
		case a == "-v" || a == "-F" || a == "--assign" || a == "--field-separator":
			i++
		case strings.HasPrefix(a, "-"):
		default:
			if args[i].wild {
				return true
			}
			p := strings.ReplaceAll(a, "||", "")
			return strings.Contains(p, "system") || strings.Contains(p, "|") || strings.Contains(p, "getline")
		}
	}
	return false
}
