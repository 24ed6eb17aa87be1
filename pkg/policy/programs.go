package policy

import "strings"

// Program grammars the matcher knows, so that a rule written the natural
// way (["git", "push"]) also matches the spellings the program itself
// accepts: git's global options before the subcommand (git -C . push,
// git --git-dir=x push), its dashed form (git-push, which git-core runs as
// the subcommand) and, for prompt and forbidden rules, abbreviated long
// options (git reset --har). Each form is decided and the strictest wins,
// so a spelling only ever makes a decision stricter.

// gitValued are git's global options that take the next argument as their
// value when it is not attached with "=".
var gitValued = map[string]bool{
	"-C": true, "-c": true, "--git-dir": true, "--work-tree": true, "--namespace": true,
	"--super-prefix": true, "--config-env": true, "--attr-source": true, "--exec-path": false,
}

// forms returns the argvs a rule is matched against for argv: argv itself
// and, for git, the argv with its global options removed.
func forms(argv []string) [][]string {
	out := [][]string{argv}
	if len(argv) == 0 {
		return out
	}
	base := baseName(argv[0])
	if sub, ok := strings.CutPrefix(base, "git-"); ok && sub != "" && !strings.Contains(sub, "/") {
		// git-core's dashed commands: git-push is git push.
		out = append(out, append([]string{"git", sub}, argv[1:]...))
		return out
	}
	if base != "git" {
		return out
	}
	i := 1
	for i < len(argv) {
		a := argv[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			break
		}
		name, _, attached := strings.Cut(a, "=")
		i++
		// -C<path> and -c<name>=<value> carry their value attached.
		if gitValued[name] && !attached {
			i++
		}
	}
	if i > 1 && i <= len(argv) {
		out = append(out, append([]string{argv[0]}, argv[i:]...))
	}
	return out
}

// tokenMatches reports whether an argv token matches a rule token. A
// prompt or forbidden rule's long option also matches its unambiguous
// abbreviations (getopt_long and git's parse-options accept any unique
// prefix), since the program would run it as the full option.
func tokenMatches(arg, want string, strict bool) bool {
	if arg == want {
		return true
	}
	if !strict || !strings.HasPrefix(want, "--") || !strings.HasPrefix(arg, "--") || len(arg) < 3 {
		return false
	}
	name, _, _ := strings.Cut(arg, "=")
	wname, _, _ := strings.Cut(want, "=")
	if strings.Contains(want, "=") && !strings.Contains(arg, "=") {
		return false
	}
	return len(name) >= 3 && strings.HasPrefix(wname, name)
}
