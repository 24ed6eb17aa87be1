package sandbox

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// What git reads to decide which programs it runs, as paths: the parts of
// the git control files' rules (gitcontrol_linux.go) that are the same on
// every system, and GitControl, the same rules asked about one path by a
// program that writes files itself outside any sandbox.

func globalGitConfigs(home string) []string {
	var out []string
	if home != "" {
		out = append(out, filepath.Join(home, ".gitconfig"))
	}
	xdg := os.Getenv("XDG_CONFIG_HOME")
	if xdg == "" && home != "" {
		xdg = filepath.Join(home, ".config")
	}
	if xdg != "" {
		out = append(out, filepath.Join(xdg, "git", "config"))
	}
	return out
}

// readGitdirFile reads a .git file's "gitdir: PATH" (relative to the
// file's directory) and resolves it.
func readGitdirFile(path string) string {
	data, err := os.ReadFile(path)
	if err != nil || len(data) > 4096 {
		return ""
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "gitdir:")
	if !ok {
		return ""
	}
	return resolveFrom(filepath.Dir(path), strings.TrimSpace(rest))
}

func resolveFrom(base, p string) string {
	if p == "" {
		return ""
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	return filepath.Clean(p)
}

// gitConfigRefs reads a git config file for what points elsewhere and
// calls visit with each path, resolved: core.hooksPath (hooksPath true;
// relative to the work tree wt, skipped when wt is "" and it is relative)
// and include.path / includeIf.*.path (relative to the file). It reports
// whether extensions.worktreeConfig is on.
func gitConfigRefs(path, wt string, visit func(hooksPath bool, p string)) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	home, _ := os.UserHomeDir()
	worktreeConfig := false
	section := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				continue
			}
			head := line[1:end]
			name, _, _ := strings.Cut(head, " ")
			name, _, _ = strings.Cut(name, "\"")
			section = strings.ToLower(strings.TrimSpace(name))
			if i := strings.IndexByte(section, '.'); i >= 0 { // [core.sub]
				section = section[:i]
			}
			line = strings.TrimSpace(line[end+1:])
			if line == "" {
				continue
			}
		}
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		key, val, _ := strings.Cut(line, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		val = gitValue(val)
		switch {
		case section == "core" && key == "hookspath" && val != "":
			p := expandHome(val, home)
			if !filepath.IsAbs(p) {
				if wt == "" {
					continue
				}
				p = filepath.Join(wt, p)
			}
			visit(true, resolveFrom("/", p))
		case (section == "include" || section == "includeif") && key == "path" && val != "":
			visit(false, resolveFrom(filepath.Dir(path), expandHome(val, home)))
		case section == "extensions" && key == "worktreeconfig":
			worktreeConfig = val == "" || strings.EqualFold(val, "true") || val == "1" || strings.EqualFold(val, "yes") || strings.EqualFold(val, "on")
		}
	}
	return worktreeConfig
}

// gitValue strips a value's comment and quotes (enough for paths).
func gitValue(v string) string {
	v = strings.TrimSpace(v)
	var b strings.Builder
	quoted := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '"':
			quoted = !quoted
		case c == '\\' && i+1 < len(v):
			i++
			b.WriteByte(v[i])
		case (c == '#' || c == ';') && !quoted:
			return strings.TrimSpace(b.String())
		default:
			b.WriteByte(c)
		}
	}
	return strings.TrimSpace(b.String())
}

func expandHome(p, home string) string {
	if home != "" && (p == "~" || strings.HasPrefix(p, "~/")) {
		return filepath.Join(home, strings.TrimPrefix(p, "~"))
	}
	return p
}
