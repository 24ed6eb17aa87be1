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

// Valgrind runs its program on a synthetic CPU: its tool
// (/usr/libexec/valgrind/memcheck-amd64-linux, executed with valgrind's
// argv) maps the program itself, without an exec, like the loader.

// IsValgrind reports whether path names valgrind: its launcher script, its
// binary (valgrind.bin) or one of its tools.
func IsValgrind(path string) bool {
	base := filepath.Base(path)
	return base == "valgrind" || base == "valgrind.bin" ||
		strings.Contains(path, "/valgrind/") && strings.HasSuffix(base, "-linux")
}

// ValgrindProgram returns the argv of the program valgrind's argv runs: the
// first argument that is not an option (valgrind's options carry their
// values after "="), or nil.
func ValgrindProgram(argv []string) []string {
	for i := 1; i < len(argv); i++ {
		if !strings.HasPrefix(argv[i], "-") {
			return argv[i:]
		}
	}
	return nil
}

// MappedProgram returns the argv of the program that argv, run as a
// program, maps and runs without an exec (the loader's, valgrind's), or
// nil.
func MappedProgram(argv []string) []string {
	if len(argv) == 0 {
		return nil
	}
	switch {
	case IsLoader(argv[0]):
		return LoaderProgram(argv)
	case IsValgrind(argv[0]):
		return ValgrindProgram(argv)
	}
	return nil
}
