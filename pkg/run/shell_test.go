package run

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScriptArgv(t *testing.T) {
	small := "echo small"
	argv, remove, err := ScriptArgv("/bin/sh", small, "")
	if err != nil || len(argv) != 3 || argv[1] != "-c" || argv[2] != small {
		t.Fatalf("small: %q, %v", argv, err)
	}
	remove()

	for _, dir := range []string{"", t.TempDir()} {
		big := "x='" + strings.Repeat("a", MaxArgLen) + "'; echo ${#x}"
		argv, remove, err := ScriptArgv("/bin/sh", big, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range argv {
			if len(a) >= MaxArgLen {
				t.Fatalf("an argument of %d bytes", len(a))
			}
		}
		res, err := Run(context.Background(), Request{Argv: argv, Env: os.Environ(), MaxOutput: 1 << 10})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(res.Stdout.Snapshot().Head); got != "131072\n" {
			t.Fatalf("dir %q: output %q", dir, got)
		}
		path := strings.TrimSuffix(strings.TrimPrefix(argv[2], ". '"), "'")
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("the script file: %v", err)
		}
		remove()
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("remove left %s: %v", path, err)
		}
		if dir == "" {
			if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
				t.Fatalf("remove left the directory %s", filepath.Dir(path))
			}
		}
	}
}
