package main

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/agentplane/agentplane/internal/testkit"
	"github.com/agentplane/agentplane/pkg/cli/agentfs"
)

func TestMain(m *testing.M) {
	// The Go tests below run the test binary itself as agentfs.
	if os.Getenv("AGENTFS_TEST_MAIN") == "1" {
		os.Exit(agentfs.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	// No test reaches the user's own configuration or state directory.
	testscript.Main(testkit.WithPrivateHome(m), map[string]func(){
		"agentfs": func() { os.Exit(agentfs.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs the end-to-end scripts in testdata/script against the
// real program.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		Cmds:                scriptCommands(),
		RequireExplicitExec: true,
		Setup: func(e *testscript.Env) error {
			testkit.KeepRaceOptions(e)
			e.Setenv("XDG_CONFIG_HOME", e.WorkDir+"/.config")
			e.Setenv("XDG_STATE_HOME", e.WorkDir+"/.state")
			return nil
		},
		Condition: func(cond string) (bool, error) {
			if cond == "root" {
				return os.Geteuid() == 0, nil
			}
			return false, nil
		},
	})
}

// scriptCommands adds to the shared commands two that txtar files cannot
// express: exact bytes with CR, BOM, NUL or no final newline.
//
//	mkfile FILE 'GO-ESCAPED'    write FILE with the unescaped bytes ("a\r\nb", "\xff")
//	fileis FILE 'GO-ESCAPED'    FILE holds exactly these bytes
func scriptCommands() map[string]func(ts *testscript.TestScript, neg bool, args []string) {
	cmds := testkit.Commands()
	unquote := func(ts *testscript.TestScript, s string) string {
		u, err := strconv.Unquote(`"` + strings.ReplaceAll(s, `"`, `\"`) + `"`)
		if err != nil {
			ts.Fatalf("bad escaped string %q: %v", s, err)
		}
		return u
	}
	cmds["mkfile"] = func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) != 2 || neg {
			ts.Fatalf("usage: mkfile FILE 'GO-ESCAPED'")
		}
		ts.Check(os.WriteFile(ts.MkAbs(args[0]), []byte(unquote(ts, args[1])), 0o644))
	}
	cmds["fileis"] = func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) != 2 {
			ts.Fatalf("usage: fileis FILE 'GO-ESCAPED'")
		}
		got := ts.ReadFile(args[0])
		want := unquote(ts, args[1])
		if (got == want) == neg {
			ts.Fatalf("%s holds %q, want %q", args[0], got, want)
		}
	}
	return cmds
}
