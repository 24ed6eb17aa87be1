package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/agentplane/agentplane/internal/testkit"
	"github.com/agentplane/agentplane/pkg/cli/agentjob"
	"github.com/agentplane/agentplane/pkg/cli/agentsh"
	"github.com/agentplane/agentplane/pkg/jobs"
	"github.com/agentplane/agentplane/pkg/sandbox"
	"github.com/agentplane/agentplane/pkg/state"
)

func TestMain(m *testing.M) {
	// The Go tests below run the test binary itself as agentjob.
	if os.Getenv("AGENTJOB_TEST_MAIN") == "1" {
		os.Exit(agentjob.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	// agentsh is registered too, for the scripts that check that a job
	// started through agentsh outlives the agentsh call.
	// No test reaches the user's own configuration or state directory.
	testscript.Main(testkit.WithPrivateHome(m), map[string]func(){
		"agentjob": func() { os.Exit(agentjob.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
		"agentsh":  func() { os.Exit(agentsh.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs the end-to-end scripts in testdata/script against the
// real program.
func TestScripts(t *testing.T) {
	testscript.Run(t, scriptParams("testdata/script", ""))
}

// scriptParams are the testscript parameters of the scripts in dir. A
// backend other than "" is put in AGENTJOB_BACKEND, the way a user
// configures one. Conditions beside [sandbox]: [slurm] holds when a Slurm
// cluster answers (SLURM_CONF set and sinfo works; scripts/slurm-dev up
// starts one), [backend:slurm] when this run's configured backend is slurm.
func scriptParams(dir, backend string) testscript.Params {
	python := realPython()
	cmds := testkit.Commands()
	cmds["listening"] = cmdListening
	return testscript.Params{
		Dir:                 dir,
		Cmds:                cmds,
		RequireExplicitExec: true,
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "sandbox":
				// Landlock and network namespaces, as root (CI has them).
				c, _ := sandbox.Check()["enforceable"].(map[string]any)
				return os.Geteuid() == 0 && c["workspace-write"] == true && c["net_none"] == true, nil
			case "slurm":
				ok, _ := slurmCluster()
				return ok, nil
			case "backend:slurm":
				return backend == "slurm", nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Setup: func(e *testscript.Env) error {
			testkit.KeepRaceOptions(e)
			e.Setenv("XDG_CONFIG_HOME", e.WorkDir+"/.config")
			e.Setenv("XDG_STATE_HOME", e.WorkDir+"/.state")
			e.Setenv("PYTHON", python)
			if backend != "" {
				e.Setenv("AGENTJOB_BACKEND", backend)
			}
			e.Setenv("PARTITION_FULL", fullPartition())
			// The Slurm clients find the cluster through SLURM_CONF, which
			// testscript would otherwise clear.
			if c := os.Getenv("SLURM_CONF"); c != "" {
				e.Setenv("SLURM_CONF", c)
			}
			port, err := freePort()
			if err != nil {
				return err
			}
			e.Setenv("PORT", port)
			// A failed script must not leave its jobs running.
			e.Defer(func() { stopAll(e.WorkDir) })
			return nil
		},
	}
}

// realPython is the interpreter itself, not a pyenv shim that costs a
// shell script per start.
func realPython() string {
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return "python3"
	}
	return strings.TrimSpace(string(out))
}

// freePort returns a TCP port that was free a moment ago on 127.0.0.1.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port), nil
}

// cmdListening succeeds when something accepts connections on
// 127.0.0.1:PORT; "! listening PORT" checks that nothing does.
func cmdListening(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: listening PORT")
	}
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+args[0], 5*time.Second)
	if err == nil {
		c.Close()
	}
	if (err == nil) == neg {
		if neg {
			ts.Fatalf("something listens on port %s", args[0])
		}
		ts.Fatalf("nothing listens on port %s: %v", args[0], err)
	}
}

// stopAll kills every job of every state directory under work.
func stopAll(work string) {
	_ = filepath.WalkDir(work, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || d.Name() != "jobs" {
			return nil
		}
		d2, err := state.Open(filepath.Dir(path))
		if err != nil {
			return filepath.SkipDir
		}
		st := jobs.NewStore(d2, nil)
		list, _ := st.List()
		for _, s := range list {
			if !s.Ended() || s.OrphanPID != 0 {
				_, _ = st.Stop(context.Background(), s.Handle, syscall.SIGKILL, 0)
			}
		}
		return filepath.SkipDir
	})
}
