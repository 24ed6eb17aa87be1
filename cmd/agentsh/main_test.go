package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/agentplane/agentplane/internal/testkit"
	"github.com/agentplane/agentplane/pkg/cli/agentsh"
	"github.com/agentplane/agentplane/pkg/sandbox"
	"github.com/agentplane/agentplane/pkg/session"
	"github.com/agentplane/agentplane/pkg/state"
)

func TestMain(m *testing.M) {
	// The Go tests below run the test binary itself as agentsh.
	if os.Getenv("AGENTSH_TEST_MAIN") == "1" {
		os.Exit(agentsh.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	// No test reaches the user's own configuration or state directory.
	testscript.Main(testkit.WithPrivateHome(m), map[string]func(){
		"agentsh": func() { os.Exit(agentsh.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs the end-to-end scripts in testdata/script against the
// real program.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		Cmds:                testkit.Commands(),
		RequireExplicitExec: true,
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "root":
				return os.Geteuid() == 0, nil
			case "sandbox":
				// Everything the escape suite needs: Landlock, network and
				// mount namespaces, cgroup v1 memory and pids, as root.
				c := sandbox.Check()["enforceable"].(map[string]any)
				return os.Geteuid() == 0 && c["workspace-write"] == true && c["net_none"] == true &&
					c["deny_read"] == true && c["memory"] == "cgroup_v1" && c["pids"] == "cgroup_v1", nil
			case "shared":
				_, ok := testkit.SharedDir(".")
				return ok, nil
			case "python3":
				_, err := exec.LookPath("python3")
				return err == nil, nil
			case "raise_nofile":
				// A hard descriptor limit lowered can be raised again
				// (CAP_SYS_RESOURCE).
				return capEffective(24), nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Setup: func(e *testscript.Env) error {
			// A directory any user can reach, for tests that drop to nobody.
			pub, err := os.MkdirTemp("", "agentplane-pub-")
			if err != nil {
				return err
			}
			if err := os.Chmod(pub, 0o755); err != nil {
				return err
			}
			e.Defer(func() { os.RemoveAll(pub) })
			e.Setenv("PUBDIR", pub)
			if dir, ok := testkit.SharedDir("."); ok {
				e.Setenv("SHARED", dir)
			}
			// A failed script must not leave its sessions running.
			e.Defer(func() { stopSessions(e.WorkDir + "/.state/agentplane") })
			testkit.KeepRaceOptions(e)
			e.Setenv("XDG_CONFIG_HOME", e.WorkDir+"/.config")
			e.Setenv("XDG_STATE_HOME", e.WorkDir+"/.state")
			return nil
		},
	})
}

// stopSessions stops every session of a script's environment, so that a
// script that failed half-way leaves no server behind.
func stopSessions(stateDir string) {
	if _, err := os.Stat(stateDir); err != nil {
		return
	}
	d, err := state.Open(stateDir)
	if err != nil {
		return
	}
	m := &session.Manager{Dir: d}
	list, _ := m.List()
	for _, info := range list {
		if info.Status != session.StateEnded {
			_, _ = m.Stop(context.Background(), info.Session)
		}
	}
}

// capEffective reports whether this process has capability bit in its
// effective set (/proc/self/status).
func capEffective(bit uint) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<bit) != 0
		}
	}
	return false
}
