package run

import (
	"strings"

	"github.com/agentplane/agentplane/pkg/result"
)

// nonInteractive is the environment every command gets unless the caller
// sets the variable itself (in its own environment or with --env): nothing
// may wait for a human. An editor is a program that returns at once and
// leaves the file unchanged ("true": tools exec $EDITOR directly as well as
// through a shell, so ":" would fail where a shell is not involved).
var nonInteractive = [][2]string{
	{"PAGER", "cat"}, {"GIT_PAGER", "cat"}, {"MANPAGER", "cat"}, {"GIT_EDITOR", ":"},
	{"EDITOR", "true"}, {"VISUAL", "true"}, {"GIT_SEQUENCE_EDITOR", "true"},
	{"GIT_MERGE_AUTOEDIT", "no"}, {"GIT_TERMINAL_PROMPT", "0"}, {"PIP_NO_INPUT", "1"},
	{"PYTHONUNBUFFERED", "1"}, {"DEBIAN_FRONTEND", "noninteractive"}, {"TERM", "dumb"}, {"NO_COLOR", "1"},
}

// BuildEnv composes a command's environment, for agentsh (one-shot and
// sessions) and agentjob alike: the caller's (or the
// minimal set with clearEnv), then the non-interactive defaults, then the
// explicit K=V settings, later entries winning.
func BuildEnv(parent []string, clearEnv bool, set []string) ([]string, error) {
	vals := map[string]string{}
	var order []string
	put := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	keep := map[string]bool{"PATH": true, "HOME": true, "LANG": true, "TERM": true, "USER": true}
	for _, kv := range parent {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if clearEnv && !keep[k] {
			continue
		}
		put(k, v)
	}
	if _, ok := vals["PATH"]; !ok && clearEnv {
		put("PATH", "/usr/local/bin:/usr/bin:/bin")
	}
	for _, d := range nonInteractive {
		put(d[0], d[1])
	}
	for _, kv := range set {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "":
			return nil, result.Errorf(result.CodeInvalidRequest, "--env wants K=V, not %q", kv)
		case strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0):
			return nil, result.Errorf(result.CodeInvalidRequest, "--env %s: an environment variable cannot hold a NUL byte", k)
		}
		put(k, v)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out, nil
}
