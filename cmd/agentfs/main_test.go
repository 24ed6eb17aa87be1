package main

import (
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/agentplane/agentplane/pkg/cli/agentfs"
	"github.com/agentplane/agentplane/pkg/testkit"
)

func TestMain(m *testing.M) {
	// The Go tests below run the test binary itself as agentfs.
	if os.Getenv("AGENTFS_TEST_MAIN") == "1" {
		os.Exit(agentfs.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	testscript.Main(m, map[string]func(){
		"agentfs": func() { os.Exit(agentfs.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs the end-to-end scripts in testdata/script against the
// real program.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		Cmds:                testkit.Commands(),
		RequireExplicitExec: true,
		Setup: func(e *testscript.Env) error {
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
