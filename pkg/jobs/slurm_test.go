package jobs

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/slurm"
	"github.com/agentplane/agentplane/pkg/state"
)

// fakeSlurm stands in for the Slurm clients: sbatch prints the next job
// id, squeue prints the file queue.json (or fails when it is missing),
// scancel succeeds. The merge of records and scheduler views is tested
// here without a cluster; cmd/agentjob tests it against a real one.
type fakeSlurm struct {
	dir string
}

func newFakeSlurm(t *testing.T) *fakeSlurm {
	t.Helper()
	f := &fakeSlurm{dir: t.TempDir()}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(f.dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("sbatch", `n=$(cat "`+f.dir+`/next" 2>/dev/null || echo 42); echo $((n+1)) > "`+f.dir+`/next"; echo "$@" > "`+f.dir+`/sbatch-args.$n"; echo "$n;cluster"`+"\n")
	write("squeue", `echo x >> "`+f.dir+`/squeue.calls"; exec cat "`+f.dir+`/queue.json"`+"\n")
	write("scancel", `echo "$@" >> "`+f.dir+`/scancel.log"`+"\n")
	return f
}

func (f *fakeSlurm) client() *slurm.Client {
	return &slurm.Client{Sbatch: filepath.Join(f.dir, "sbatch"), Squeue: filepath.Join(f.dir, "squeue"),
		Scancel: filepath.Join(f.dir, "scancel"), Scontrol: "false"}
}

// queue sets what squeue prints; "" makes it fail (controller down).
func (f *fakeSlurm) queue(t *testing.T, jobs string) {
	t.Helper()
	p := filepath.Join(f.dir, "queue.json")
	if jobs == "" {
		_ = os.Remove(p)
		return
	}
	if err := os.WriteFile(p, []byte(`{"errors":[],"jobs":[`+jobs+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newSlurmStore(t *testing.T) (*Store, *fakeSlurm) {
	t.Helper()
	d, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := NewStore(d, []string{"agentjob", SupervisorCommand, d.Path()})
	st.SetExecutable("/usr/local/bin/agent'job")
	f := newFakeSlurm(t)
	st.SetScheduler(f.client())
	return st, f
}

func startSlurm(t *testing.T, st *Store, opts *SlurmOptions) Status {
	t.Helper()
	s, err := st.Start(context.Background(), Spec{Argv: []string{"true"}, Cwd: t.TempDir(), Backend: BackendSlurm, Slurm: opts})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func status(t *testing.T, st *Store, h string) Status {
	t.Helper()
	st.forgetScheduler()
	s, err := st.Status(h)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func countEvents(t *testing.T, st *Store, h, typ string) int {
	t.Helper()
	evs, err := st.Events(0, h)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func TestSlurmSubmit(t *testing.T) {
	st, f := newSlurmStore(t)
	f.queue(t, `{"job_id":42,"job_state":"PENDING","state_reason":"Resources","exit_code":0}`)
	s := startSlurm(t, st, &SlurmOptions{Partition: "tiny", CPUs: 2, Mem: "1G", TimeLimit: "5", ExtraArgs: []string{"--qos=low", "--comment=a b"}})
	if s.Status != StatusPending || s.Reason != "Resources" || s.SlurmJobID != "42" || s.Backend != BackendSlurm || s.Ended() {
		t.Fatalf("after start: %+v", s)
	}
	args, _ := os.ReadFile(filepath.Join(f.dir, "sbatch-args.42"))
	got := strings.Fields(string(args))
	for _, want := range []string{"--parsable", "--no-requeue", "--partition=tiny", "--cpus-per-task=2", "--mem=1G", "--time=5", "--qos=low"} {
		if !slices.Contains(got, want) {
			t.Errorf("sbatch args %q lack %s", args, want)
		}
	}
	if i, j := slices.Index(got, "--partition=tiny"), slices.Index(got, "--qos=low"); i > j {
		t.Errorf("extra arguments must come last, to override: %q", args)
	}
	var spec Spec
	if err := state.ReadJSON(filepath.Join(st.jobDir(s.ID), specFile), &spec); err != nil || spec.SlurmJobID != "42" {
		t.Errorf("spec does not record the Slurm job id: %+v %v", spec, err)
	}
	script, _ := os.ReadFile(filepath.Join(st.jobDir(s.ID), batchScript))
	want := `exec -a 'agentjob' '/usr/local/bin/agent'\''job' '__supervise' '` + st.dir.Path() + `' '` + s.ID + `' "$SLURM_JOB_ID"`
	if !strings.Contains(string(script), want) {
		t.Errorf("batch script:\n%s\nwant the line\n%s", script, want)
	}
	list, err := st.List(StatusPending)
	if err != nil || len(list) != 1 || list[0].Handle != s.Handle {
		t.Errorf("list --status pending: %+v %v", list, err)
	}
}

func TestSlurmSubmitRefused(t *testing.T) {
	st, f := newSlurmStore(t)
	if err := os.WriteFile(filepath.Join(f.dir, "sbatch"), []byte("#!/bin/sh\necho 'sbatch: error: invalid partition specified: nope' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := st.Start(context.Background(), Spec{Argv: []string{"true"}, Cwd: t.TempDir(), Backend: BackendSlurm})
	if err == nil || !strings.Contains(err.Error(), "invalid partition") {
		t.Fatalf("err = %v", err)
	}
	if code := errCode(err); code != result.CodeSubmitFailed {
		t.Errorf("code %q, want %s", code, result.CodeSubmitFailed)
	}
	if list, _ := st.List(); len(list) != 0 {
		t.Errorf("a refused job was left behind: %+v", list)
	}
}

// TestSlurmSchedulerEnds: jobs the scheduler ended before a supervisor
// recorded anything map onto statuses, append their event once, and keep
// that answer after the scheduler forgets them.
func TestSlurmSchedulerEnds(t *testing.T) {
	for _, tc := range []struct {
		state, reason, raw string
		status, lost       string
		event              string
	}{
		{"CANCELLED", "", "0", StatusStopped, "", StatusStopped},
		{"TIMEOUT", "", "0", StatusTimeout, "", StatusTimeout},
		{"PREEMPTED", "preempted", "0", StatusStopped, "", StatusStopped},
		{"NODE_FAIL", "", "0", StatusLost, LostNodeFailed, StatusLost},
		{"OUT_OF_MEMORY", "out_of_memory", "0", StatusFailed, "", StatusFailed},
		{"FAILED", "", "768", StatusFailed, "", StatusFailed},
	} {
		t.Run(tc.state, func(t *testing.T) {
			st, f := newSlurmStore(t)
			f.queue(t, `{"job_id":42,"job_state":"PENDING","state_reason":"Priority","exit_code":0}`)
			h := startSlurm(t, st, nil).Handle
			f.queue(t, `{"job_id":42,"job_state":"`+tc.state+`","state_reason":"X","exit_code":`+tc.raw+`}`)
			for range 2 {
				s := status(t, st, h)
				if s.Status != tc.status || s.LostReason != tc.lost || s.SchedulerState != tc.state || !s.Ended() {
					t.Fatalf("status %+v, want %s %s", s, tc.status, tc.lost)
				}
				if tc.reason != "" && s.Reason != tc.reason {
					t.Errorf("reason %q, want %q", s.Reason, tc.reason)
				}
				if tc.raw == "768" && (s.ExitCode == nil || *s.ExitCode != 3) {
					t.Errorf("exit code %v, want 3 (raw wait status 768)", s.ExitCode)
				}
			}
			if n := countEvents(t, st, h, tc.event); n != 1 {
				t.Errorf("%d %s events, want 1", n, tc.event)
			}
			// MinJobAge passed: the scheduler forgot the job.
			f.queue(t, `{"job_id":1,"job_state":"RUNNING","exit_code":0}`)
			if s := status(t, st, h); s.Status != tc.status {
				t.Errorf("after the scheduler forgot: %s, want %s", s.Status, tc.status)
			}
		})
	}
}

func TestSlurmUnknownOrUnreachable(t *testing.T) {
	st, f := newSlurmStore(t)
	f.queue(t, `{"job_id":42,"job_state":"PENDING","exit_code":0}`)
	h := startSlurm(t, st, nil).Handle

	// The controller does not answer: pending stays, not ended, and says why.
	f.queue(t, "")
	if s := status(t, st, h); s.Status != StatusPending || s.SchedulerError == "" || s.Ended() {
		t.Errorf("controller down: %+v", s)
	}
	// The scheduler does not know the job, which has no record: lost.
	f.queue(t, `{"job_id":7,"job_state":"RUNNING","exit_code":0}`)
	if s := status(t, st, h); s.Status != StatusLost || s.LostReason != LostUnknownToScheduler {
		t.Errorf("unknown to the scheduler: %+v", s)
	}
	if n := countEvents(t, st, h, StatusLost); n != 1 {
		t.Errorf("%d lost events, want 1", n)
	}
}

// writeRecord writes the record a supervisor on another node would have.
func writeRecord(t *testing.T, st *Store, id string, rec record) {
	t.Helper()
	rec.Backend, rec.SlurmJobID, rec.Host, rec.BootID = BackendSlurm, "42", "node-elsewhere", "other-boot"
	if err := state.WriteJSONAtomic(filepath.Join(st.jobDir(id), statusFile), rec, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSlurmRecordAndScheduler: the supervisor's record and the
// scheduler's view together.
func TestSlurmRecordAndScheduler(t *testing.T) {
	st, f := newSlurmStore(t)
	f.queue(t, `{"job_id":42,"job_state":"RUNNING","exit_code":0}`)
	s := startSlurm(t, st, nil)
	if s.Status != StatusStarting || s.Ended() {
		t.Fatalf("placed, no record yet: %+v", s)
	}

	// A supervisor on another node runs the job: its PID means nothing
	// here, the scheduler's RUNNING backs the record.
	writeRecord(t, st, s.ID, record{Status: StatusRunning, SupervisorPID: 1 << 22, PID: 1 << 22, StartedAt: "2026-01-01T00:00:00.000Z"})
	if got := status(t, st, s.Handle); got.Status != StatusRunning || got.SchedulerState != "RUNNING" || got.OrphanPID != 0 {
		t.Errorf("running on another node: %+v", got)
	}
	// The scheduler forgot it, and it recorded no end: lost, never running.
	f.queue(t, "")
	if got := status(t, st, s.Handle); got.Status != StatusRunning || got.SchedulerError == "" {
		t.Errorf("controller down keeps what the record says: %+v", got)
	}
	f.queue(t, `{"job_id":1,"job_state":"RUNNING","exit_code":0}`)
	if got := status(t, st, s.Handle); got.Status != StatusLost || got.LostReason != LostUnknownToScheduler {
		t.Errorf("forgotten without an end: %+v", got)
	}

	// A recorded end is the truth, whatever the scheduler says or forgot.
	st2, f2 := newSlurmStore(t)
	f2.queue(t, `{"job_id":42,"job_state":"RUNNING","exit_code":0}`)
	s2 := startSlurm(t, st2, nil)
	code := 3
	writeRecord(t, st2, s2.ID, record{Status: StatusFailed, Final: true, ExitCode: &code, EndedAt: "2026-01-01T00:00:01.000Z"})
	f2.queue(t, "")
	if got := status(t, st2, s2.Handle); got.Status != StatusFailed || *got.ExitCode != 3 || got.SchedulerError != "" {
		t.Errorf("final record: %+v", got)
	}
}

// TestSlurmSignalledEnd: a supervisor stopped by a signal it was not asked
// for records stopped (scheduler_signal); the scheduler says which end it
// was, and while it is still COMPLETING the job is not ended for Wait.
func TestSlurmSignalledEnd(t *testing.T) {
	st, f := newSlurmStore(t)
	f.queue(t, `{"job_id":42,"job_state":"RUNNING","exit_code":0}`)
	s := startSlurm(t, st, nil)
	sig := "SIGTERM"
	writeRecord(t, st, s.ID, record{Status: StatusStopped, Final: true, Reason: ReasonSchedulerSignal, Signal: sig, EndedAt: "2026-01-01T00:00:01.000Z"})

	f.queue(t, `{"job_id":42,"job_state":"COMPLETING","exit_code":0}`)
	if got := status(t, st, s.Handle); got.Ended() || got.SchedulerState != "COMPLETING" {
		t.Errorf("completing: %+v (ended %v)", got, got.Ended())
	}
	f.queue(t, `{"job_id":42,"job_state":"TIMEOUT","state_reason":"TimeLimit","exit_code":0}`)
	if got := status(t, st, s.Handle); got.Status != StatusTimeout || !got.Ended() || got.SchedulerState != "TIMEOUT" {
		t.Errorf("time limit: %+v", got)
	}
	if n := countEvents(t, st, s.Handle, StatusTimeout); n != 1 {
		t.Errorf("%d timeout events, want 1", n)
	}
	f.queue(t, `{"job_id":1,"job_state":"RUNNING","exit_code":0}`)
	if got := status(t, st, s.Handle); got.Status != StatusTimeout {
		t.Errorf("after the scheduler forgot: %+v", got)
	}
}

func TestSlurmStopPending(t *testing.T) {
	st, f := newSlurmStore(t)
	f.queue(t, `{"job_id":42,"job_state":"PENDING","state_reason":"Resources","exit_code":0}`)
	h := startSlurm(t, st, nil).Handle
	// The fake scancel only logs; the scheduler's answer is what ends it.
	f.queue(t, `{"job_id":42,"job_state":"CANCELLED","state_reason":"Resources","exit_code":0}`)
	s, err := st.Stop(context.Background(), h, 15, 0)
	if err != nil || s.Status != StatusStopped {
		t.Fatalf("stop: %+v %v", s, err)
	}
	log, _ := os.ReadFile(filepath.Join(f.dir, "scancel.log"))
	if strings.TrimSpace(string(log)) != "42" {
		t.Errorf("scancel got %q, want the whole job cancelled", log)
	}
}

func TestSlurmSpecValidate(t *testing.T) {
	for _, s := range []Spec{
		{Argv: []string{"x"}, Backend: "kubernetes"},
		{Argv: []string{"x"}, Slurm: &SlurmOptions{Partition: "p"}},
		{Argv: []string{"x"}, Backend: BackendSlurm, Slurm: &SlurmOptions{CPUs: -1}},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("%+v validated", s)
		}
	}
}

func errCode(err error) string { return result.AsError(err).Code }

// TestSlurmListOneQuery: list resolves all its slurm jobs from one squeue
// call, and asks nothing about jobs whose end is recorded.
func TestSlurmListOneQuery(t *testing.T) {
	st, f := newSlurmStore(t)
	f.queue(t, `{"job_id":42,"job_state":"PENDING","exit_code":0},{"job_id":43,"job_state":"PENDING","exit_code":0},{"job_id":44,"job_state":"RUNNING","exit_code":0}`)
	var last Status
	for range 3 {
		last = startSlurm(t, st, nil)
	}
	code := 0
	writeRecord(t, st, last.ID, record{Status: StatusExited, Final: true, ExitCode: &code})
	calls := filepath.Join(f.dir, "squeue.calls")
	_ = os.Remove(calls)
	st.forgetScheduler()
	list, err := st.List()
	if err != nil || len(list) != 3 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if b, _ := os.ReadFile(calls); strings.Count(string(b), "x") != 1 {
		t.Errorf("list ran squeue %d times, want once", strings.Count(string(b), "x"))
	}
	if list[0].Status != StatusExited || list[1].Status != StatusPending || list[2].Status != StatusPending {
		t.Errorf("statuses: %s %s %s", list[0].Status, list[1].Status, list[2].Status)
	}
}

// TestSlurmRestart: a restarted slurm job is a new Slurm job under the
// same handle; the old run's end is not taken for the new run's.
func TestSlurmRestart(t *testing.T) {
	st, f := newSlurmStore(t)
	f.queue(t, `{"job_id":42,"job_state":"RUNNING","exit_code":0}`)
	s := startSlurm(t, st, nil)
	writeRecord(t, st, s.ID, record{Status: StatusStopped, Final: true, Reason: ReasonSchedulerSignal, Signal: "SIGTERM"})
	f.queue(t, `{"job_id":42,"job_state":"CANCELLED","exit_code":15},{"job_id":43,"job_state":"PENDING","state_reason":"Priority","exit_code":0}`)
	if got := status(t, st, s.Handle); got.Status != StatusStopped || got.SchedulerState != "CANCELLED" {
		t.Fatalf("before restart: %+v", got)
	}
	st.forgetScheduler()
	got, err := st.Restart(context.Background(), s.Handle)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusPending || got.SlurmJobID != "43" || got.Restarts != 1 || got.Handle != s.Handle || got.Ended() {
		t.Errorf("after restart: %+v", got)
	}
	if got := status(t, st, s.Handle); got.Status != StatusPending || got.SchedulerState != "PENDING" {
		t.Errorf("status after restart: %+v", got)
	}
}
