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

func matchSegments(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			// Collapse runs of "**" and try every split point.
			for len(pat) > 0 && pat[0] == "**" {
				pat = pat[1:]
			}
			if len(pat) == 0 {
				return true
			}
			for i := 0; i <= len(name); i++ {
				if matchSegments(pat, name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		ok, err := path.Match(pat[0], name[0])
		if err != nil || !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}
