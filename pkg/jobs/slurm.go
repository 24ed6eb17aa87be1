package jobs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/slurm"
	"github.com/agentplane/agentplane/pkg/state"
)

// The slurm backend.
//
// Start writes the spec as for a local job, then submits a generated batch
// script (slurm.sh in the job directory) with sbatch. The script execs the
// same supervisor the local backend launches (agentjob __supervise DIR ID,
// plus the Slurm job id), on whichever node Slurm picks, so logs, exit
// records, readiness, timeouts, restarts and events are the supervisor's
// as always. This needs the state directory on a filesystem that the
// submitting host and the compute nodes share.
//
// Status merges two views. The supervisor's final record is the truth
// about how the job ended: squeue's exit codes are raw wait statuses and
// scontrol forgets a job after MinJobAge, while the record stays. Until
// there is a final record the scheduler says the rest: PENDING is the
// status pending (with the scheduler's reason), a terminal state with no
// record maps onto a status (mapScheduler), and a job the scheduler no
// longer knows, with no record of its end and no supervisor provably
// running, is lost — never running.

// Slurm backend timing.
const (
	// schedulerPoll is how often Wait and Watch ask the scheduler about
	// unfinished slurm jobs. Slurm offers no event to block on, so this is
	// a bounded poll; local jobs stay purely event-driven.
	schedulerPoll = time.Second
	// schedulerTTL is how long one squeue answer serves further status
	// lookups in the same process: list resolves every slurm job from one
	// squeue call, and a wait woken by many file events does not hammer
	// the controller.
	schedulerTTL = 500 * time.Millisecond
	// schedulerQueryTimeout bounds one client call.
	schedulerQueryTimeout = 30 * time.Second
)

// Files of a slurm job.
const (
	batchScript = "slurm.sh"
	// resubmittedMarker says that Restart submitted a new run of a slurm
	// job, whose supervisor has not replaced the old run's record yet.
	resubmittedMarker = "resubmitted"
	// schedulerEnd is the scheduler's end of a job whose supervisor
	// recorded none, kept once observed: scontrol forgets the job after
	// MinJobAge and the answer must not change then. It is created with
	// link(2), so exactly one observer writes it and appends the event.
	schedulerEnd = "scheduler_end.json"
)

// schedulerView is the cached answer of one squeue call.
type schedulerView struct {
	at    time.Time
	asked map[string]bool
	jobs  map[string]slurm.Job
	err   error
}

// submit writes the batch script of job id and submits it; the spec is
// rewritten with the Slurm job id.
func (st *Store) submit(ctx context.Context, id string, spec *Spec) error {
	if len(st.supervisorArgv) == 0 {
		return errors.New("jobs: no supervisor command configured")
	}
	exe := st.exe
	if exe == "" {
		p, err := exec.LookPath(st.supervisorArgv[0])
		if err != nil {
			return jobErr(result.CodeStartFailed, "cannot find the supervisor program %s: %v", st.supervisorArgv[0], err)
		}
		if exe, err = filepath.Abs(p); err != nil {
			return err
		}
	}
	dir := st.jobDir(id)
	script := batchScriptText(exe, append(slicesClone(st.supervisorArgv), id))
	path := filepath.Join(dir, batchScript)
	if err := state.WriteFileAtomic(path, []byte(script), 0o700); err != nil {
		return err
	}
	sid, err := st.sched.Submit(ctx, sbatchArgs(st.dir.Path(), dir, id, spec), path)
	if err != nil {
		var se *slurm.Error
		if errors.As(err, &se) {
			return jobErr(result.CodeSubmitFailed, "sbatch refused the job: %s", strings.TrimSpace(firstLine(se.Stderr, se.Err.Error()))).
				With("sbatch_stderr", strings.TrimSpace(se.Stderr))
		}
		return jobErr(result.CodeSubmitFailed, "sbatch: %v", err)
	}
	spec.SlurmJobID = sid
	if err := state.WriteJSONAtomic(filepath.Join(dir, specFile), spec, 0o600); err != nil {
		// The job is queued but unrecorded: take it back.
		cctx, cancel := context.WithTimeout(context.Background(), schedulerQueryTimeout)
		defer cancel()
		_ = st.sched.Cancel(cctx, sid, "", false)
		return err
	}
	st.forgetScheduler()
	return nil
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

func firstLine(s, fallback string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return fallback
	}
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// batchScriptText is the batch script: bash, because exec -a keeps the
// supervisor's argv[0] (agentjob), by which agentsh and a multi-program
// binary recognise it. SLURM_JOB_ID is passed on so that the record
// carries it.
func batchScriptText(exe string, argv []string) string {
	var b strings.Builder
	b.WriteString("#!/bin/bash\n")
	b.WriteString("# Written by agentjob: runs the job's supervisor on the node Slurm allocated.\n")
	b.WriteString("# The state directory must be shared between the submitting host and the nodes.\n")
	b.WriteString("exec -a " + shellQuote(argv[0]) + " " + shellQuote(exe))
	for _, a := range argv[1:] {
		b.WriteString(" " + shellQuote(a))
	}
	b.WriteString(" \"$SLURM_JOB_ID\"\n")
	return b.String()
}

// shellQuote quotes s for a POSIX shell: the script is the one place a
// shell reads our values, so every one goes in single quotes.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sbatchArgs are the options of sbatch for the job. --no-requeue: a
// requeued batch job would be a second run nobody asked for (agentjob's
// restart policy is the supervisor's); the supervisor's diagnostics go to
// the job directory, as a local supervisor's do. Extra arguments come
// last, so they override.
func sbatchArgs(stateDir, jobDir, id string, spec *Spec) []string {
	name := "agentjob-" + id
	if spec.Name != "" {
		name = "agentjob-" + spec.Name
	}
	args := []string{
		"--no-requeue",
		"--job-name=" + name,
		"--chdir=" + stateDir,
		"--output=" + filepath.Join(jobDir, svLogFile),
		"--open-mode=append",
	}
	if o := spec.Slurm; o != nil {
		if o.Partition != "" {
			args = append(args, "--partition="+o.Partition)
		}
		if o.TimeLimit != "" {
			args = append(args, "--time="+o.TimeLimit)
		}
		if o.CPUs > 0 {
			args = append(args, "--cpus-per-task="+strconv.Itoa(o.CPUs))
		}
		if o.Mem != "" {
			args = append(args, "--mem="+o.Mem)
		}
		args = append(args, o.ExtraArgs...)
	}
	return args
}

// forgetScheduler drops the cached squeue answer, after a change that
// the scheduler is to reflect at once (a submission, a cancel).
func (st *Store) forgetScheduler() {
	st.schedMu.Lock()
	st.schedView = schedulerView{}
	st.schedMu.Unlock()
}

// prefetchScheduler asks the scheduler about several jobs in one call, so
// that resolving each of them hits the cache.
func (st *Store) prefetchScheduler(sids []string) {
	sids = slices.DeleteFunc(sids, func(s string) bool { return s == "" })
	if len(sids) == 0 {
		return
	}
	st.schedMu.Lock()
	defer st.schedMu.Unlock()
	st.querySchedulerLocked(sids)
}

func (st *Store) querySchedulerLocked(sids []string) {
	ctx, cancel := context.WithTimeout(context.Background(), schedulerQueryTimeout)
	defer cancel()
	jobs, err := st.sched.Queue(ctx, sids)
	asked := make(map[string]bool, len(sids))
	for _, s := range sids {
		asked[s] = true
	}
	st.schedView = schedulerView{at: time.Now(), asked: asked, jobs: jobs, err: err}
}

// schedulerJob returns what the scheduler says of Slurm job sid: known is
// false when it does not know the job (any more).
func (st *Store) schedulerJob(sid string) (job slurm.Job, known bool, err error) {
	st.schedMu.Lock()
	defer st.schedMu.Unlock()
	v := st.schedView
	if v.at.IsZero() || time.Since(v.at) > schedulerTTL || !v.asked[sid] {
		st.querySchedulerLocked([]string{sid})
		v = st.schedView
	}
	if v.err != nil {
		return slurm.Job{}, false, v.err
	}
	job, known = v.jobs[sid]
	return job, known, nil
}

// mapScheduler is the status of a job that the scheduler ended while its
// supervisor recorded no end (or, for a supervisor stopped by the
// scheduler's signal, which end it was):
//
//	CANCELLED                     stopped  (scancel, by agentjob stop or behind its back)
//	PREEMPTED                     stopped  reason preempted
//	TIMEOUT, DEADLINE             timeout
//	NODE_FAIL, BOOT_FAIL          lost     lost_reason node_failed
//	OUT_OF_MEMORY                 failed   reason out_of_memory
//	FAILED                        failed   with the scheduler's exit code
//	COMPLETED and anything else   lost     lost_reason supervisor_died (the
//	                                       batch script ended, no record)
func mapScheduler(j slurm.Job) (status, reason, lostReason string) {
	switch j.State {
	case slurm.StateCancelled:
		return StatusStopped, "", ""
	case slurm.StatePreempted:
		return StatusStopped, "preempted", ""
	case slurm.StateTimeout, slurm.StateDeadline:
		return StatusTimeout, "", ""
	case slurm.StateNodeFail, slurm.StateBootFail:
		return StatusLost, "", LostNodeFailed
	case slurm.StateOutOfMemory:
		return StatusFailed, "out_of_memory", ""
	case slurm.StateFailed:
		return StatusFailed, "", ""
	}
	return StatusLost, "", LostSupervisorDied
}

// endedBySignal reports a final record whose end may have been the
// scheduler's doing rather than the job's: a supervisor that got a signal
// without a stop request, or a job killed by a signal (Slurm signals every
// process of the job, and the job may die before its supervisor reacts).
func endedBySignal(rec *record) bool {
	return rec.Reason == ReasonSchedulerSignal || (rec.Status == StatusFailed && rec.Signal != "")
}

// schedulerEnded reports the terminal states that say the scheduler, not
// the job, ended it.
func schedulerEnded(state string) bool {
	switch state {
	case slurm.StateCancelled, slurm.StatePreempted, slurm.StateTimeout, slurm.StateDeadline,
		slurm.StateNodeFail, slurm.StateBootFail, slurm.StateOutOfMemory:
		return true
	}
	return false
}

// fromSlurm resolves a slurm job that has a record; s is the record's
// status as fromRecord built it.
func (st *Store) fromSlurm(id string, rec *record, s Status) Status {
	s.Backend, s.SlurmJobID = BackendSlurm, rec.SlurmJobID
	// The supervisor's PID can be checked only on its own host and boot;
	// elsewhere (another node, or this one rebooted) the scheduler says
	// whether it runs.
	s.svLocal = rec.Host == st.host && rec.BootID == st.bootID
	if rec.Final {
		if _, err := os.Stat(filepath.Join(st.jobDir(id), resubmittedMarker)); err == nil {
			return st.resubmitted(id, rec, s)
		}
		s.StdoutBytes, s.StderrBytes = rec.StdoutBytes, rec.StderrBytes
		if end, ok := st.readSchedulerEnd(id); ok {
			// An end the scheduler showed before the supervisor wrote its
			// own was already reported: the answer does not change.
			applySchedulerEnd(&s, end)
			return s
		}
		if !endedBySignal(rec) {
			return s
		}
		// A signal nobody asked agentjob for ended the job: scancel behind
		// our back, a time limit, preemption or the node going away all
		// look alike from inside. Ask the scheduler which it was while it
		// remembers (MinJobAge), and keep its answer.
		j, known, err := st.schedulerJob(rec.SlurmJobID)
		switch {
		case err != nil || !known:
			// The record stands.
		case slurm.Terminal(j.State):
			s.SchedulerState = j.State
			if schedulerEnded(j.State) {
				// The supervisor's event said what it saw (stopped, or
				// failed by a signal); a different status gets its own.
				status, _, _ := mapScheduler(j)
				st.recordSchedulerEnd(&s, j, status != rec.Status)
			}
		default:
			// COMPLETING hides the base state until Slurm has killed the
			// job's processes: not ended for Wait until it shows.
			s.SchedulerState, s.settling = j.State, true
		}
		return s
	}
	dir := st.jobDir(id)
	s.StdoutBytes, s.StderrBytes = logTotal(dir, Stdout), logTotal(dir, Stderr)
	if end, ok := st.readSchedulerEnd(id); ok {
		applySchedulerEnd(&s, end)
		st.markOrphan(&s, rec)
		return s
	}
	svAlive := s.svLocal && proctree.Alive(rec.SupervisorPID, rec.SupervisorStart)
	j, known, err := st.schedulerJob(rec.SlurmJobID)
	switch {
	case err != nil:
		// The controller did not answer. What the record proves stands;
		// a local supervisor found dead is lost as for a local job.
		s.SchedulerError = err.Error()
		if s.svLocal && !svAlive {
			if st.finalNow(id, rec) {
				return st.fromRecord(id, rec)
			}
			st.markOrphan(&s, rec)
			st.lose(&s, LostSupervisorDied)
		}
		return s
	case !known:
		if st.finalNow(id, rec) {
			return st.fromRecord(id, rec)
		}
		if svAlive {
			return s
		}
		st.markOrphan(&s, rec)
		st.lose(&s, LostUnknownToScheduler)
		return s
	case slurm.Terminal(j.State):
		s.SchedulerState = j.State
		if st.finalNow(id, rec) {
			r := st.fromRecord(id, rec)
			return r
		}
		st.recordSchedulerEnd(&s, j, true)
		st.markOrphan(&s, rec)
		return s
	case slurm.Queued(j.State):
		// A record and a queued job: a run that the scheduler took back
		// (requeue despite --no-requeue, by an administrator).
		s.SchedulerState, s.Status, s.Reason, s.Ready = j.State, StatusPending, j.Reason, false
		return s
	}
	s.SchedulerState = j.State
	if s.svLocal && !svAlive {
		if st.finalNow(id, rec) {
			return st.fromRecord(id, rec)
		}
		st.markOrphan(&s, rec)
		st.lose(&s, LostSupervisorDied)
	}
	return s
}

// fromSlurmQueued resolves a slurm job without a record: queued, or placed
// with a supervisor that has not written yet, or ended by the scheduler
// before its supervisor ever ran. specTime is when Start wrote the spec.
func (st *Store) fromSlurmQueued(id string, s Status, specTime time.Time) Status {
	if end, ok := st.readSchedulerEnd(id); ok {
		applySchedulerEnd(&s, end)
		return s
	}
	if s.SlurmJobID == "" {
		// Start has not recorded sbatch's answer yet, or died first.
		if time.Since(specTime) > startingGrace {
			st.lose(&s, LostSupervisorDied)
		}
		return s
	}
	j, known, err := st.schedulerJob(s.SlurmJobID)
	switch {
	case err != nil:
		s.SchedulerError = err.Error()
		s.Status = StatusPending
	case !known:
		// A record of this run may have appeared since we looked.
		if r, ok := st.recordOfRun(id, s.SlurmJobID); ok {
			return r
		}
		st.lose(&s, LostUnknownToScheduler)
	case slurm.Queued(j.State):
		s.Status, s.Reason, s.SchedulerState = StatusPending, j.Reason, j.State
	case slurm.Terminal(j.State):
		if r, ok := st.recordOfRun(id, s.SlurmJobID); ok {
			return r
		}
		s.SchedulerState = j.State
		st.recordSchedulerEnd(&s, j, true)
	default:
		// Running: the supervisor is about to write its first record.
		s.Status, s.SchedulerState = StatusStarting, j.State
	}
	return s
}

// recordOfRun resolves job id from its record if the record belongs to
// the run that Slurm job sid is (not to a run before a restart).
func (st *Store) recordOfRun(id, sid string) (Status, bool) {
	var rec record
	if err := state.ReadJSON(filepath.Join(st.jobDir(id), statusFile), &rec); err != nil || rec.SlurmJobID != sid {
		return Status{}, false
	}
	return st.fromRecord(id, &rec), true
}

// resubmitted resolves a slurm job that Restart submitted again: the
// record is the previous run's, the spec names the new Slurm job.
func (st *Store) resubmitted(id string, rec *record, s Status) Status {
	var spec Spec
	fi, err := os.Stat(filepath.Join(st.jobDir(id), specFile))
	if err == nil {
		err = state.ReadJSON(filepath.Join(st.jobDir(id), specFile), &spec)
	}
	if err != nil {
		return s
	}
	q := Status{Handle: s.Handle, ID: id, Name: s.Name, Status: StatusStarting, Command: s.Command, Cwd: s.Cwd,
		Description: s.Description, Restarts: rec.Restarts + 1, Backend: BackendSlurm, SlurmJobID: spec.SlurmJobID,
		StdoutBytes: rec.StdoutBytes, StderrBytes: rec.StderrBytes}
	return st.fromSlurmQueued(id, q, fi.ModTime())
}

// resubmit submits a new run of slurm job id (Restart): the spec forgets
// the old Slurm job first, so that nobody takes the old job's end for the
// new run's, and the marker says the old record is not the answer.
func (st *Store) resubmit(ctx context.Context, id string) (Status, error) {
	dir := st.jobDir(id)
	var spec Spec
	if err := state.ReadJSON(filepath.Join(dir, specFile), &spec); err != nil {
		return Status{}, err
	}
	spec.SlurmJobID = ""
	if err := state.WriteJSONAtomic(filepath.Join(dir, specFile), spec, 0o600); err != nil {
		return Status{}, err
	}
	if err := state.WriteFileAtomic(filepath.Join(dir, resubmittedMarker), nil, 0o600); err != nil {
		return Status{}, err
	}
	_ = os.Remove(filepath.Join(dir, schedulerEnd))
	_ = os.Remove(filepath.Join(dir, lostMarker))
	_ = os.Remove(filepath.Join(dir, stopFile))
	if err := st.submit(ctx, id, &spec); err != nil {
		// No new run: the old record is the answer again.
		_ = os.Remove(filepath.Join(dir, resubmittedMarker))
		return Status{}, err
	}
	return st.statusOf(id)
}

// markOrphan notes the job's own process when it provably still runs on
// this host although the scheduler or the supervisor let go of it (a node
// declared failed whose processes survived): Stop can kill it.
func (st *Store) markOrphan(s *Status, rec *record) {
	if rec != nil && s.svLocal && rec.PID > 0 && proctree.Alive(rec.PID, rec.PIDStart) {
		s.OrphanPID, s.orphanStart = rec.PID, rec.PIDStart
	}
}

// schedulerEndRecord is scheduler_end.json.
type schedulerEndRecord struct {
	State      string `json:"state"`
	Status     string `json:"status"`
	Reason     string `json:"reason,omitempty"`
	LostReason string `json:"lost_reason,omitempty"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	Signal     string `json:"signal,omitempty"`
	ObservedAt string `json:"observed_at"`
}

func (st *Store) readSchedulerEnd(id string) (schedulerEndRecord, bool) {
	var e schedulerEndRecord
	err := state.ReadJSON(filepath.Join(st.jobDir(id), schedulerEnd), &e)
	return e, err == nil && e.Status != ""
}

func applySchedulerEnd(s *Status, e schedulerEndRecord) {
	s.Status, s.SchedulerState, s.Ready = e.Status, e.State, false
	if e.Reason != "" {
		s.Reason = e.Reason
	}
	s.LostReason = e.LostReason
	if s.ExitCode == nil && s.Signal == nil {
		s.ExitCode = e.ExitCode
		if e.Signal != "" {
			sig := e.Signal
			s.Signal = &sig
		}
	}
	if s.EndedAt == nil {
		t := e.ObservedAt
		s.EndedAt = &t
	}
}

// recordSchedulerEnd maps the scheduler's end of a job onto s, keeps it in
// the job directory and, with event, appends its event; of concurrent
// observers only the first writes and appends, and all report the same.
func (st *Store) recordSchedulerEnd(s *Status, j slurm.Job, event bool) {
	status, reason, lost := mapScheduler(j)
	e := schedulerEndRecord{State: j.State, Status: status, Reason: reason, LostReason: lost,
		ObservedAt: state.FormatTime(time.Now())}
	if status == StatusFailed {
		e.ExitCode, e.Signal = j.ExitCode, j.Signal
	}
	dir := st.jobDir(s.ID)
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d", schedulerEnd, os.Getpid()))
	first := false
	if err := state.WriteJSONAtomic(tmp, e, 0o600); err == nil {
		err = os.Link(tmp, filepath.Join(dir, schedulerEnd))
		_ = os.Remove(tmp)
		first = err == nil
		if errors.Is(err, fs.ErrExist) {
			if prev, ok := st.readSchedulerEnd(s.ID); ok {
				e = prev
			}
		}
	}
	applySchedulerEnd(s, e)
	if !first || !event {
		return
	}
	if e.Status == StatusLost {
		// lose appends the lost event once, as for any lost job.
		st.lose(s, e.LostReason)
		return
	}
	_, _ = st.dir.AppendEvent(state.Event{Handle: s.Handle, Name: s.Name, Type: e.Status,
		ExitCode: e.ExitCode, Signal: e.Signal, Reason: firstNonEmpty(e.Reason, "scheduler_"+strings.ToLower(e.State))})
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// queuedSpec is List's view of a job directory without a record: only
// slurm jobs are listed then (a local job's supervisor writes its record
// before Start returns, so it is simply not there yet).
func (st *Store) queuedSpec(id string) (*Spec, bool) {
	var spec Spec
	if state.ReadJSON(filepath.Join(st.jobDir(id), specFile), &spec) != nil || spec.Backend != BackendSlurm {
		return nil, false
	}
	return &spec, true
}

// stopSlurm stops a slurm job. A supervisor that runs is asked to stop the
// job its own way (scancel --batch signals only the batch script, which
// is the supervisor; stop.json says with which signal and grace), so the
// tree kill and the record are the same as for a local job. A job with no
// supervisor yet (pending) is cancelled in the scheduler. Either way, if
// the job has not ended after the grace, scancel ends the allocation.
func (st *Store) stopSlurm(ctx context.Context, id string, s Status, sig syscall.Signal, grace time.Duration) (Status, error) {
	sid := s.SlurmJobID
	if s.OrphanPID != 0 {
		killOrphan(ctx, s.OrphanPID, s.orphanStart, sig, grace)
		if !slurm.Terminal(s.SchedulerState) && sid != "" {
			_ = st.sched.Cancel(ctx, sid, "", false)
		}
		st.forgetScheduler()
		return st.statusOf(id)
	}
	if s.Ended() {
		return s, nil
	}
	if err := st.writeStopRequest(id, stopRequest{Signal: int(sig), GraceMS: grace.Milliseconds()}); err != nil {
		return s, err
	}
	if sid == "" {
		return s, jobErr(result.CodeStartFailed, "job %s has no Slurm job id yet; stop it again in a moment", s.Handle)
	}
	supervised := s.svPID > 0 && s.Status != StatusPending
	var cerr error
	if supervised {
		cerr = st.sched.Cancel(ctx, sid, "TERM", true)
		if cerr != nil && s.svLocal && proctree.Alive(s.svPID, s.svStart) {
			_ = syscall.Kill(s.svPID, syscall.SIGTERM)
			cerr = nil
		}
	} else {
		cerr = st.sched.Cancel(ctx, sid, "", false)
	}
	st.forgetScheduler()
	wctx, cancel := context.WithTimeout(ctx, grace+st.answerWait)
	got, err := st.waitIDs(wctx, []string{id}, ForExit, false)
	cancel()
	if err == nil && len(got) == 1 {
		return got[0], nil
	}
	// The supervisor did not finish the stop: end the allocation, whose
	// processes Slurm kills wherever they run.
	if ferr := st.sched.Cancel(ctx, sid, "", false); ferr != nil && cerr != nil {
		return st.statusOf(id)
	}
	st.forgetScheduler()
	wctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if got, err := st.waitIDs(wctx, []string{id}, ForExit, false); err == nil && len(got) == 1 {
		return got[0], nil
	}
	return st.statusOf(id)
}
