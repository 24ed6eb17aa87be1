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
	home, _ := os.UserHomeDir()
	worktreeConfig := false
	scanGitConfig(path, func(section, key, val string) {
		switch {
		case section == "core" && key == "hookspath" && val != "":
			p := expandHome(val, home)
			if !filepath.IsAbs(p) {
				if wt == "" {
					return
				}
				p = filepath.Join(wt, p)
			}
			visit(true, resolveFrom("/", p))
		case (section == "include" || section == "includeif") && key == "path" && val != "":
			visit(false, resolveFrom(filepath.Dir(path), expandHome(val, home)))
		case section == "extensions" && key == "worktreeconfig":
			worktreeConfig = val == "" || strings.EqualFold(val, "true") || val == "1" || strings.EqualFold(val, "yes") || strings.EqualFold(val, "on")
		}
	})
	return worktreeConfig
}

// scanGitConfig calls fn with every key of a git config file: the
// section's name lower-cased without its subsection, the key lower-cased,
// the value without comment and quotes (gitValue). A file that cannot be
// read has no keys.
func scanGitConfig(path string, fn func(section, key, val string)) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
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
		fn(section, strings.ToLower(strings.TrimSpace(key)), gitValue(val))
	}
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

// gitControlNames are the files of a git directory that say where its
// hooks and config are, or what its config is.
var gitControlNames = []string{"config", "config.worktree", "commondir", "gitdir"}

// GitControl reports whether a change of the file at path (absolute,
// symlinks resolved as far as it exists) could make git run a program the
// user did not choose at their next git command, and which rule says so:
// the same files the sandbox binds read-only in a writable root
// (gitProtection), also when they do not exist yet, asked by a program
// that changes files itself outside the sandbox (agentfs under the lock).
// They are
//
//   - a .git entry itself (a .git file names the git directory), and
//     beneath any .git directory the hooks, and the files named config,
//     config.worktree, commondir or gitdir (the git directory's own, a
//     submodule's under modules/, a linked worktree's under worktrees/);
//   - the same in a git directory of another name (a bare repository: a
//     directory holding HEAD and objects/ or commondir);
//   - the directory core.hooksPath names and the files include.path names,
//     in the config of any repository path lies in (and its common
//     directory's and config.worktree), and in the user's global configs
//     under home, which are control files themselves.
//
// Names are compared without regard to ASCII case or the code points HFS+
// ignores: on such a file system .GIT/hooks, or .g\u200cit/hooks, is
// .git/hooks. A name under a .git directory that
// only looks like one of these (a branch called config) is refused too.
func GitControl(path, home string) (string, bool) {
	path = filepath.Clean(path)
	parts := strings.Split(filepath.ToSlash(path), "/")
	for i, p := range parts {
		if !sameName(p, ".git") {
			continue
		}
		if rest := parts[i+1:]; len(rest) == 0 || gitDirControl(rest, true) {
			return "a repository's git directory's hooks or config, or its .git entry", true
		}
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if looksGitDir(dir) {
			rel, _ := filepath.Rel(dir, path)
			if gitDirControl(strings.Split(filepath.ToSlash(rel), "/"), false) {
				return "the hooks or config of the git directory " + dir, true
			}
		}
		if w, ok := gitReferenced(path, dir); ok {
			return w, true
		}
		if next := filepath.Dir(dir); next == dir {
			break
		}
	}
	for _, f := range globalGitConfigs(home) {
		if within(path, f) {
			return "the user's git config " + f, true
		}
		if w, ok := configReferences(path, f, "", 0); ok {
			return w, true
		}
	}
	return "", false
}

// gitDirControl reports whether rest (a path below a git directory, split)
// is one of its control files: in its hooks, or one of gitControlNames;
// with any, at any depth (below a .git, where modules/ and worktrees/ hold
// further git directories).
func gitDirControl(rest []string, any bool) bool {
	if len(rest) == 0 {
		return false
	}
	if !any {
		return sameName(rest[0], "hooks") || len(rest) == 1 && foldIn(rest[0], gitControlNames)
	}
	for _, r := range rest {
		if sameName(r, "hooks") {
			return true
		}
	}
	return foldIn(rest[len(rest)-1], gitControlNames)
}

func foldIn(s string, names []string) bool {
	for _, n := range names {
		if sameName(s, n) {
			return true
		}
	}
	return false
}

// sameName reports whether a file system that ignores case, or (HFS+)
// ignores some invisible code points, could take name for want (ASCII):
// git's own rule for .git (is_hfs_dotgit) drops the same code points.
func sameName(name, want string) bool {
	return strings.EqualFold(strings.Map(func(r rune) rune {
		switch {
		case r >= 0x200c && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x206a && r <= 0x206f, r == 0xfeff:
			return -1
		}
		return r
	}, name), want)
}

// looksGitDir reports whether dir is a git directory by its content: HEAD,
// and objects/ or commondir (a bare repository, a submodule's or linked
// worktree's git directory).
func looksGitDir(dir string) bool {
	if st, err := os.Lstat(filepath.Join(dir, "HEAD")); err != nil || !st.Mode().IsRegular() {
		return false
	}
	if st, err := os.Stat(filepath.Join(dir, "objects")); err == nil && st.IsDir() {
		return true
	}
	_, err := os.Lstat(filepath.Join(dir, "commondir"))
	return err == nil
}

// gitReferenced reports whether the config of the repository whose work
// tree is wt (if wt/.git exists) makes path a control file: its
// core.hooksPath directory or a file it includes.
func gitReferenced(path, wt string) (string, bool) {
	dotgit := filepath.Join(wt, ".git")
	st, err := os.Lstat(dotgit)
	if err != nil {
		return "", false
	}
	gitdir := dotgit
	switch {
	case st.Mode().IsRegular():
		gitdir = readGitdirFile(dotgit)
	case st.Mode()&os.ModeSymlink != 0:
		gitdir, _ = filepath.EvalSymlinks(dotgit)
	}
	if gitdir == "" {
		return "", false
	}
	configs := []string{filepath.Join(gitdir, "config"), filepath.Join(gitdir, "config.worktree")}
	if data, err := os.ReadFile(filepath.Join(gitdir, "commondir")); err == nil {
		configs = append(configs, filepath.Join(resolveFrom(gitdir, strings.TrimSpace(string(data))), "config"))
	}
	for _, c := range configs {
		if w, ok := configReferences(path, c, wt, 0); ok {
			return w, true
		}
	}
	return "", false
}

// configReferences reports whether the git config file cfg (work tree wt)
// names path through core.hooksPath or an include, following includes a
// few levels.
func configReferences(path, cfg, wt string, depth int) (string, bool) {
	if depth > 4 {
		return "", false
	}
	var what string
	gitConfigRefs(cfg, wt, func(hooksPath bool, p string) {
		switch {
		case what != "":
		case within(path, p) && hooksPath:
			what = "the hooks directory " + p + " that " + cfg + " names (core.hooksPath)"
		case within(path, p):
			what = "the file " + p + " that " + cfg + " includes"
		case !hooksPath:
			what, _ = configReferences(path, p, wt, depth+1)
		}
	})
	return what, what != ""
}
