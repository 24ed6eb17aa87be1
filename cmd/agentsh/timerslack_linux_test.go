package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"golang.org/x/sys/unix"
)

// TestSandboxEarlyTimerSlack: a helper started ahead runs with a coarse
// timer slack and one processor (package spawn); the command still gets
// the caller's timer slack, inherited as from any parent, and none of the
// helper's own environment, on every path.
func TestSandboxEarlyTimerSlack(t *testing.T) {
	dir, exe, ws := sandboxWorkspace(t)
	// agentsh, started from this thread, and every thread it makes, take
	// this thread's slack.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	old, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	const slack = 123457
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, slack, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(old), 0, 0, 0)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			env = append(env, kv)
		}
	}
	env = append(env, "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	for _, args := range [][]string{
		{"--sandbox", "workspace-write", "--net", "none"},  // started ahead
		{"--sandbox", "read-only"},                         // ahead, no network namespace
		{"--sandbox", "workspace-write", "--net", "proxy"}, // started for the run
		{},
	} {
		cmd := exec.Command(exe, append(args, "--cwd", ws, "-c", `cat /proc/self/timerslack_ns; echo "${GOMAXPROCS-unset}"`)...)
		cmd.Env = env
		out, _ := cmd.Output()
		if got := gjson.GetBytes(out, "stdout").String(); got != fmt.Sprintf("%d\nunset\n", slack) {
			t.Errorf("agentsh %v: the command saw %q (timer slack, GOMAXPROCS), want the caller's slack %d and no GOMAXPROCS: %s", args, got, slack, out)
		}
	}
}
