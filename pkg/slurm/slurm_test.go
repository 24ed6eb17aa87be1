package slurm

import (
	"os"
	"path/filepath"
	"testing"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func intp(n int) *int { return &n }

func TestDecodeWaitStatus(t *testing.T) {
	for _, tc := range []struct {
		raw    int
		code   *int
		signal string
	}{
		{0, intp(0), ""},
		{768, intp(3), ""}, // exit 3, as squeue --json shows it
		{256 * 255, intp(255), ""},
		{15, nil, "SIGTERM"}, // killed by SIGTERM
		{9, nil, "SIGKILL"},
		{9 | 0x80, nil, "SIGKILL"}, // core dumped flag
		{34, nil, "SIG34"},
	} {
		code, sig := DecodeWaitStatus(tc.raw)
		if sig != tc.signal || (code == nil) != (tc.code == nil) || (code != nil && *code != *tc.code) {
			t.Errorf("DecodeWaitStatus(%d) = %v, %q; want %v, %q", tc.raw, deref(code), sig, deref(tc.code), tc.signal)
		}
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestParseQueueRecorded(t *testing.T) {
	// Recorded from Slurm 22.05.8 (scripts/slurm-dev): a job that exited
	// 3, one running and one pending in the one-CPU partition.
	jobs, err := ParseQueue(readTestdata(t, "squeue-22.05.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Job{
		"1": {ID: "1", State: StateFailed, Reason: "NonZeroExitCode", ExitCode: intp(3), Nodes: "localhost"},
		"2": {ID: "2", State: StateRunning, Nodes: "localhost"},
		"3": {ID: "3", State: StatePending, Reason: "Resources"},
	}
	checkJobs(t, jobs, want)

	// The same jobs later: the running one cancelled (raw status 15 is
	// SIGTERM), the pending one cancelled before it ever ran.
	jobs, err = ParseQueue(readTestdata(t, "squeue-22.05-ended.json"))
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]Job{
		"1": {ID: "1", State: StateFailed, Reason: "NonZeroExitCode", ExitCode: intp(3), Nodes: "localhost"},
		"2": {ID: "2", State: StateCancelled, Signal: "SIGTERM", Nodes: "localhost"},
		"3": {ID: "3", State: StateCancelled, Reason: "Resources", ExitCode: intp(0)},
		"4": {ID: "4", State: StateCompleted, ExitCode: intp(0), Nodes: "localhost"},
	}
	checkJobs(t, jobs, want)

	// Ends that the scheduler caused: a time limit, scancel of a job that
	// ignored SIGTERM (raw status 9: SIGKILL), a node declared down.
	jobs, err = ParseQueue(readTestdata(t, "squeue-22.05-scheduler-ends.json"))
	if err != nil {
		t.Fatal(err)
	}
	for id, w := range map[string]Job{
		"9":  {ID: "9", State: StateTimeout, Reason: "TimeLimit", ExitCode: intp(0), Nodes: "localhost"},
		"10": {ID: "10", State: StateCancelled, Signal: "SIGKILL", Nodes: "localhost"},
		"11": {ID: "11", State: StateNodeFail, Reason: "NodeDown", ExitCode: intp(0), Nodes: "localhost"},
	} {
		checkJobs(t, map[string]Job{id: jobs[id]}, map[string]Job{id: w})
	}
}

func checkJobs(t *testing.T, got, want map[string]Job) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d jobs, want %d: %+v", len(got), len(want), got)
	}
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			t.Errorf("job %s missing", id)
			continue
		}
		if g.ID != w.ID || g.State != w.State || g.Reason != w.Reason || g.Signal != w.Signal ||
			g.Nodes != w.Nodes || deref(g.ExitCode) != deref(w.ExitCode) {
			t.Errorf("job %s = %+v (exit %v), want %+v (exit %v)", id, g, deref(g.ExitCode), w, deref(w.ExitCode))
		}
	}
}

func TestParseQueueShapes(t *testing.T) {
	// Later releases give job_state as a list; an error list without jobs
	// is an error, not an empty queue (which would read as "forgotten").
	jobs, err := ParseQueue([]byte(`{"jobs":[{"job_id":7,"job_state":["TIMEOUT"],"state_reason":"TimeLimit","exit_code":{"status":"SIGNALED"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if j := jobs["7"]; j.State != StateTimeout || j.Reason != "TimeLimit" || j.ExitCode != nil {
		t.Errorf("got %+v", j)
	}
	if _, err := ParseQueue([]byte(`{"errors":[{"error":"Unable to contact slurm controller"}],"jobs":[]}`)); err == nil {
		t.Error("an error-only answer parsed as an empty queue")
	}
	if _, err := ParseQueue([]byte(`squeue: error: not json`)); err == nil {
		t.Error("garbage parsed")
	}
}

func TestParseShowJob(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Job
	}{
		{"scontrol-failed.txt", Job{ID: "1", State: StateFailed, Reason: "NonZeroExitCode", ExitCode: intp(3), Nodes: "localhost"}},
		{"scontrol-cancelled-pending.txt", Job{ID: "3", State: StateCancelled, Reason: "Resources", ExitCode: intp(0)}},
		{"scontrol-node-fail.txt", Job{ID: "11", State: StateNodeFail, Reason: "NodeDown", ExitCode: intp(0), Nodes: "localhost"}},
		{"scontrol-completing.txt", Job{ID: "18", State: StateCompleting, Nodes: "localhost"}},
	} {
		got, err := ParseShowJob(readTestdata(t, tc.file))
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		checkJobs(t, map[string]Job{got.ID: got}, map[string]Job{tc.want.ID: tc.want})
	}
	if _, err := ParseShowJob([]byte("slurm_load_jobs error: Invalid job id specified\n")); err == nil {
		t.Error("an error message parsed as a job")
	}
	j, err := ParseShowJob([]byte("JobId=5 JobState=CANCELLED Reason=None ExitCode=0:9"))
	if err != nil || j.Signal != "SIGKILL" || j.ExitCode != nil {
		t.Errorf("signal from ExitCode=0:9: %+v %v", j, err)
	}
}

func TestStates(t *testing.T) {
	for _, s := range []string{"COMPLETING+", "cancelled by 0", "RUNNING"} {
		if b := baseState(s); b != "COMPLETING" && b != "CANCELLED" && b != "RUNNING" {
			t.Errorf("baseState(%q) = %q", s, b)
		}
	}
	if !Queued(StatePending) || Queued(StateRunning) || Terminal(StateRunning) || Terminal(StateCompleting) {
		t.Error("queued/terminal classification")
	}
	for _, s := range []string{StateCancelled, StateTimeout, StateNodeFail, StatePreempted, StateOutOfMemory, StateFailed, StateCompleted} {
		if !Terminal(s) {
			t.Errorf("%s is not terminal", s)
		}
	}
}

func TestParseSubmit(t *testing.T) {
	id, err := ParseSubmit(readTestdata(t, "sbatch-parsable.txt"))
	if err != nil || id != "42" {
		t.Errorf("got %q, %v", id, err)
	}
	if id, err := ParseSubmit([]byte("7\n")); err != nil || id != "7" {
		t.Errorf("got %q, %v", id, err)
	}
	if _, err := ParseSubmit([]byte("sbatch: error: Batch job submission failed\n")); err == nil {
		t.Error("no id, no error")
	}
}

func FuzzParseShowJob(f *testing.F) {
	for _, n := range []string{"scontrol-failed.txt", "scontrol-node-fail.txt"} {
		b, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := ParseShowJob(b)
		if err == nil && (j.ID == "" || j.State == "") {
			t.Errorf("parsed without id or state: %+v", j)
		}
	})
}
