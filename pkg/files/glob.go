package files

import (
	"path"
	"strings"
)

// MatchGlob reports whether the slash-separated path name matches pattern
// with doublestar semantics: "*", "?" and "[...]" match within one path
// segment (as path.Match does), and a "**" segment matches zero or more
// whole segments. A pattern without a "/" matches the last segment at any
// depth, so ".env" behaves like "**/.env", as in .gitignore. A trailing
// "/**" also matches the directory itself, so "**/.git/**" covers ".git".
// A malformed pattern matches nothing.
func MatchGlob(pattern, name string) bool {
	pattern = strings.Trim(pattern, "/")
	name = strings.Trim(name, "/")
	if pattern == "" {
		return false
	}
	if !strings.Contains(pattern, "/") && pattern != "**" {
		pattern = "**/" + pattern
	}
	return matchSegments(strings.Split(pattern, "/"), splitPath(name))
}

func splitPath(name string) []string {
	if name == "" || name == "." {
		return nil
	}
	return strings.Split(name, "/")
}

// matchSegments matches pattern segments against name segments. Each
// (pattern position, name position) pair is decided once (memo), so a
// pattern with many "**" segments, which a request can carry, costs
// O(len(pat) * len(name)) steps rather than exponentially many.
func matchSegments(pat, name []string) bool {
	memo := make([]int8, (len(pat)+1)*(len(name)+1)) // 0 unknown, 1 no, 2 yes
	var match func(pi, ni int) bool
	match = func(pi, ni int) bool {
		k := pi*(len(name)+1) + ni
		if memo[k] != 0 {
			return memo[k] == 2
		}
		ok := false
		switch {
		case pi == len(pat):
			ok = ni == len(name)
		case pat[pi] == "**":
			// Zero segments, or one more and still inside the "**".
			ok = match(pi+1, ni) || (ni < len(name) && match(pi, ni+1))
		case ni < len(name):
			m, err := path.Match(pat[pi], name[ni])
			ok = err == nil && m && match(pi+1, ni+1)
		}
		memo[k] = 1
		if ok {
			memo[k] = 2
		}
		return ok
	}
	return match(0, 0)
}
