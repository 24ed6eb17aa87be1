package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/internal/testkit"
)

// The slurm backend's tests need a cluster: scripts/slurm-dev up starts a
// single-node one on this machine and prints the SLURM_CONF to export.
// Without one they skip, saying so, unless AGENTPLANE_REQUIRE_SLURM=1 (CI
// sets it), where a missing cluster is a failure rather than a silent skip.

// slurmCluster reports whether a Slurm cluster answers, and if not, why.
func slurmCluster() (bool, string) {
	if os.Getenv("SLURM_CONF") == "" {
		return false, "SLURM_CONF is not set"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sinfo", "-h", "-o", "%a").CombinedOutput()
	if err != nil {
		return false, "sinfo failed: " + strings.TrimSpace(string(out))
	}
	if !strings.Contains(string(out), "up") {
		return false, "sinfo shows no partition up"
	}
	return true, ""
}

func requireSlurm(t *testing.T) {
	t.Helper()
	ok, why := slurmCluster()
	if ok {
		return
	}
	if os.Getenv("AGENTPLANE_REQUIRE_SLURM") == "1" {
		t.Fatalf("AGENTPLANE_REQUIRE_SLURM=1 but no Slurm cluster answers: %s", why)
	}
	t.Skipf("no Slurm cluster answers (%s): run eval \"$(scripts/slurm-dev up)\" to test the slurm backend", why)
}

// fullPartition is a partition that one running job fills, so the next
// job pends: scripts/slurm-dev's "tiny" (one CPU) unless another cluster
// names its own.
func fullPartition() string {
	if p := os.Getenv("AGENTPLANE_TEST_SLURM_FULL_PARTITION"); p != "" {
		return p
	}
	return "tiny"
}

// TestBackendScenario runs the same scenario (testdata/backends) on the
// local backend and on Slurm, selected only by AGENTJOB_BACKEND. It and
// TestSlurmScripts run in parallel, hence after the sequential tests: never
// beside TestSlurmNodeFailure, which takes the node down.
func TestBackendScenario(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"local", "slurm"} {
		t.Run(backend, func(t *testing.T) {
			if backend == "slurm" {
				requireSlurm(t)
			}
			testscript.Run(t, scriptParams("testdata/backends", backend))
		})
	}
}

// TestSlurmScripts runs the slurm-only scripts (testdata/slurm), which
// play the scheduler's part behind agentjob's back with scancel.
func TestSlurmScripts(t *testing.T) {
	t.Parallel()
	requireSlurm(t)
	testscript.Run(t, scriptParams("testdata/slurm", "slurm"))
}

// runSlurmAgentjob runs agentjob with the slurm backend configured.
func runSlurmAgentjob(t *testing.T, dir string, args ...string) (string, int) {
	t.Helper()
	cmd := agentjobCmd(dir, args...)
	cmd.Env = append(cmd.Env, "AGENTJOB_BACKEND=slurm")
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("agentjob %v: %v", args, err)
	}
	return out.String(), code
}

func scontrol(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("scontrol", args...).CombinedOutput(); err != nil {
		t.Fatalf("scontrol %v: %v: %s", args, err, out)
	}
}

// TestSlurmNodeFailure: the node of a running job is declared down. The
// job must read lost (node_failed) from then on, never running, a wait on
// it must end, the loss is recorded once, and nothing of it survives. Not
// parallel: no other slurm test may have jobs on the node meanwhile.
func TestSlurmNodeFailure(t *testing.T) {
	requireSlurm(t)
	dir := t.TempDir()
	out, code := runSlurmAgentjob(t, dir, "start", "--ready-log", "^up", "-c", "echo up; exec sleep 8351")
	if code != 0 {
		t.Fatalf("start: %s", out)
	}
	h := gjson.Get(out, "handle").String()
	sid := gjson.Get(out, "slurm_job_id").String()
	if out, code = runSlurmAgentjob(t, dir, "wait", "--for", "ready", "--timeout", "120s", h); code != 0 {
		t.Fatalf("wait for ready: %s", out)
	}
	nodeOut, err := exec.Command("squeue", "-h", "-j", sid, "-o", "%N").Output()
	node := strings.TrimSpace(string(nodeOut))
	if err != nil || node == "" {
		t.Fatalf("squeue -j %s: no node (%v)", sid, err)
	}
	t.Cleanup(func() { resumeNode(t, node) })
	scontrol(t, "update", "nodename="+node, "state=down", "reason=agentjob-test")

	// From the moment the scheduler knows, the job is never running.
	out, _ = runSlurmAgentjob(t, dir, "status", h)
	if s := gjson.Get(out, "status").String(); s == "running" || s == "ready" {
		t.Fatalf("status after the node went down: %s", out)
	}
	out, code = runSlurmAgentjob(t, dir, "wait", "--timeout", "120s", h)
	if code != 1 || gjson.Get(out, "status").String() != "lost" || gjson.Get(out, "lost_reason").String() != "node_failed" ||
		gjson.Get(out, "scheduler_state").String() != "NODE_FAIL" {
		t.Fatalf("wait after the node went down (exit %d): %s", code, out)
	}
	// The answer stays, and the loss is one event.
	runSlurmAgentjob(t, dir, "stop", h)
	out, _ = runSlurmAgentjob(t, dir, "status", h)
	if gjson.Get(out, "status").String() != "lost" {
		t.Fatalf("status changed after stop: %s", out)
	}
	out, _ = runSlurmAgentjob(t, dir, "events", "--job", h)
	if n := strings.Count(out, `"type":"lost"`); n != 1 {
		t.Fatalf("%d lost events, want 1:\n%s", n, out)
	}
	if live := testkit.LiveProcesses("sleep 8351"); len(live) > 0 {
		t.Fatalf("the job's process survived: %v", live)
	}
}

// resumeNode brings a node declared down back, and waits (a bounded poll
// of sinfo: Slurm has no event for it) until it takes jobs again.
func resumeNode(t *testing.T, node string) {
	_ = exec.Command("scontrol", "update", "nodename="+node, "state=resume").Run()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := exec.Command("sinfo", "-h", "-n", node, "-o", "%t").Output()
		if s := strings.TrimSpace(string(out)); strings.HasPrefix(s, "idle") || strings.HasPrefix(s, "mix") || strings.HasPrefix(s, "alloc") {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("node %s did not come back within 60s", node)
}
