package policy

import (
	"path/filepath"
	"strings"
)

// The dynamic loader run as a program (ld.so PROGRAM ARGS) maps PROGRAM
// and jumps to it itself: no exec happens that a runtime guard would see,
// so the loader's command line is decided as the command it runs.

// IsLoader reports whether path names the dynamic loader by its file name
// (ld-linux-x86-64.so.2, ld-linux-aarch64.so.1, ld.so, ld64.so.2,
// ld-musl-x86_64.so.1).
func IsLoader(path string) bool {
	base := filepath.Base(path)
	return strings.HasPrefix(base, "ld.so") || strings.HasPrefix(base, "ld64.so") ||
		(strings.HasPrefix(base, "ld-") && strings.Contains(base, ".so"))
}

// loaderValued are glibc's loader options that take the next argument.
var loaderValued = map[string]bool{"--library-path": true, "--inhibit-rpath": true, "--audit": true,
	"--preload": true, "--argv0": true, "--glibc-hwcaps-prepend": true, "--glibc-hwcaps-mask": true}

// LoaderProgram returns the argv of the program a loader's argv runs (its
// options skipped), or nil when it runs none (--list, --help, no program).
func LoaderProgram(argv []string) []string {
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if loaderValued[a] {
			i++
			continue
		}
		if strings.HasPrefix(a, "--") {
			continue
		}
		return argv[i:]
	}
	return nil
}
