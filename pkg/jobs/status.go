package jobs

import (
	"github.com/agentplane/agentplane/pkg/execguard"
	"github.com/agentplane/agentplane/pkg/netproxy"

	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/state"
)

// Files in a job directory.
const (
	specFile      = "spec.json"
	statusFile    = "status.json"
	stopFile      = "stop.json"
	stopLockFile  = "stop.lock"
	lostMarker    = "lost"
	logLockFile   = "logs.lock"
	svLogFile     = "supervisor.log"
	cursorsDir    = "cursors"
	reserveFile   = "reserve"
	startingGrace = time.Minute // how long a job with no status yet may still be starting
)

// record is status.json. Only the job's supervisor writes it, and always
// with an atomic replace, so it parses whenever it exists. It carries the
// fields a status needs so that listing reads one small file per job.
type record struct {
	Status      string `json:"status"`
	Final       bool   `json:"final"`
	Name        string `json:"name,omitempty"`
	Description string `json:"description,omitempty"`
	// The command as given: Shell, or else Argv. Two typed fields rather
	// than one of either type, because List decodes thousands of these.
	Shell           string   `json:"shell,omitempty"`
	Argv            []string `json:"argv,omitempty"`
	Cwd             string   `json:"cwd"`
	SupervisorPID   int      `json:"supervisor_pid"`
	SupervisorStart uint64   `json:"supervisor_start"`
	BootID          string   `json:"boot_id"`
	PID             int      `json:"pid,omitempty"`
	PIDStart        uint64   `json:"pid_start,omitempty"`
	StartedAt       string   `json:"started_at,omitempty"`
	EndedAt         string   `json:"ended_at,omitempty"`
	ExitCode        *int     `json:"exit_code,omitempty"`
	Signal          string   `json:"signal,omitempty"`
	Ready           bool     `json:"ready"`
	Restarts        int      `json:"restarts"`
	Run             int      `json:"run"`
	Reason          string   `json:"reason,omitempty"`
	// Denied is the exec the runtime guard refused in the run that ended
	// (reason policy_denied or approval_required).
	Denied      *execguard.Exec `json:"denied,omitempty"`
	StdoutBytes int64           `json:"stdout_bytes,omitempty"`
	StderrBytes int64           `json:"stderr_bytes,omitempty"`
	// StdoutLost and StderrLost count output that could not be written
	// (a full disk).
	StdoutLost int64 `json:"stdout_lost_bytes,omitempty"`
	StderrLost int64 `json:"stderr_lost_bytes,omitempty"`
	// Backend, the Slurm job id and the supervisor's host: a supervisor
	// placed by a scheduler may run on another node, where its PID means
	// nothing to this one.
	Backend    string `json:"backend,omitempty"`
	SlurmJobID string `json:"slurm_job_id,omitempty"`
	Host       string `json:"host,omitempty"`
	// Proxy: the job runs under --net proxy, and networkFile reports
	// its network.
	Proxy bool `json:"proxy,omitempty"`
	// Cgroup is the cgroup v2 the supervisor made for the job's processes
	// (where it could: see jobCgroupName), by which a stop kills them all
	// once the supervisor is dead.
	Cgroup string `json:"cgroup,omitempty"`
}

// Status is a job's status as CONTRACT §3 reports it.
type Status struct {
	Handle   string  `json:"handle"`
	Name     string  `json:"name"`
	Status   string  `json:"status"`
	ExitCode *int    `json:"exit_code"`
	Signal   *string `json:"signal"`
	PID      int     `json:"pid"`
	// Command is the shell string, or the argv as a []string.
	Command     any     `json:"command"`
	Cwd         string  `json:"cwd"`
	StartedAt   string  `json:"started_at"`
	EndedAt     *string `json:"ended_at"`
	Ready       bool    `json:"ready"`
	Restarts    int     `json:"restarts"`
	StdoutBytes int64   `json:"stdout_bytes"`
	StderrBytes int64   `json:"stderr_bytes"`
	Description string  `json:"description"`
	// StdoutLostBytes and StderrLostBytes are output the job wrote that
	// could not be kept (the state directory's disk was full); it is in
	// no offset.
	StdoutLostBytes int64 `json:"stdout_lost_bytes,omitempty"`
	StderrLostBytes int64 `json:"stderr_lost_bytes,omitempty"`
	// Reason says why a job failed when no exit code does:
	// ready_timeout, sandbox_refreshed, or the code of a start failure.
	Reason string `json:"reason,omitempty"`
	// Denied is the exec the runtime policy refused, which ended the run
	// (with reason policy_denied or approval_required): its argv, parent
	// chain, decision and the rule that decided it.
	Denied     *execguard.Exec `json:"denied,omitempty"`
	LostReason string          `json:"lost_reason,omitempty"`
	// OrphanPID is the job's process, still alive although its
	// supervisor is gone; Stop can kill it.
	OrphanPID int `json:"orphan_pid,omitempty"`
	// Backend is local or slurm.
	Backend string `json:"backend"`
	// SlurmJobID is the scheduler's id of a slurm job.
	SlurmJobID string `json:"slurm_job_id,omitempty"`
	// SchedulerState is the scheduler's own state of a slurm job
	// (PENDING, RUNNING, CANCELLED, TIMEOUT, NODE_FAIL, …) when it was
	// consulted; the status is derived from it and the supervisor's record.
	SchedulerState string `json:"scheduler_state,omitempty"`
	// SchedulerError says why the scheduler could not be consulted; the
	// status is then what the supervisor's record proves.
	SchedulerError string `json:"scheduler_error,omitempty"`
	// Error is set, in a list, on a job whose state cannot be read
	// (state_corrupt): it is still listed, and still stoppable.
	Error *result.Error `json:"-"`
	// Network is the allowlist and the connections it refused, for a job
	// under --net proxy (since its supervisor started).
	Network *netproxy.Report `json:"network,omitempty"`

	// ID is the job's id inside the state directory, for the engine's
	// callers that need to address files; it is not shown to users.
	ID string `json:"-"`
	// orphanStart identifies the orphan by start time, for Stop.
	orphanStart uint64
	// supervisor identity, for Wait and Stop; svLocal says it runs on
	// this host, so its PID can be checked and signalled.
	svPID   int
	svStart uint64
	svLocal bool
	// cgroup is the record's Cgroup, for Stop.
	cgroup string
	// lostBy is when a job that no supervisor has recorded, nor holds the
	// run lock of, turns lost unless one does meanwhile (see noRecord);
	// nothing else changes then, so Wait sets a timer for it.
	lostBy time.Time
	// settling: the supervisor recorded an end, but the scheduler is still
	// completing the job and will say whether the end was its own.
	settling bool
}

// Ended reports whether the job has reached a state it will not leave on
// its own: a recorded end, or lost.
func (s Status) Ended() bool {
	if s.settling {
		return false
	}
	switch s.Status {
	case StatusExited, StatusFailed, StatusStopped, StatusTimeout, StatusLost:
		return true
	}
	return false
}

func (st *Store) jobDir(id string) string { return st.dir.Join("jobs", id) }

// statusOf resolves the status of job id without scanning other jobs.
func (st *Store) statusOf(id string) (Status, error) {
	var rec record
	err := state.ReadJSON(filepath.Join(st.jobDir(id), statusFile), &rec)
	if errors.Is(err, fs.ErrNotExist) {
		return st.noRecord(id)
	}
	if err != nil {
		return Status{}, err
	}
	return st.fromRecord(id, &rec), nil
}

// fromRecord resolves a status from the job's record: the recorded end if
// there is one, otherwise what the supervisor said, if the supervisor is
// provably still alive on this boot, otherwise lost.
func (st *Store) fromRecord(id string, rec *record) Status {
	dir := st.jobDir(id)
	s := Status{
		Handle: st.dir.Mint("job", id), ID: id,
		Name: rec.Name, Status: rec.Status, ExitCode: rec.ExitCode,
		PID: rec.PID, Command: commandOf(rec.Shell, rec.Argv), Cwd: rec.Cwd, StartedAt: rec.StartedAt,
		Ready: rec.Ready, Restarts: rec.Restarts, Description: rec.Description,
		Reason: rec.Reason, Denied: rec.Denied, svPID: rec.SupervisorPID, svStart: rec.SupervisorStart,
		Backend: BackendLocal, svLocal: true, cgroup: rec.Cgroup,
	}
	if rec.Proxy {
		s.Network = readNetwork(dir)
	}
	if rec.Signal != "" {
		sig := rec.Signal
		s.Signal = &sig
	}
	if rec.EndedAt != "" {
		e := rec.EndedAt
		s.EndedAt = &e
	}
	if rec.Backend == BackendSlurm {
		return st.fromSlurm(id, rec, s)
	}
	if rec.Final {
		s.StdoutBytes, s.StderrBytes = rec.StdoutBytes, rec.StderrBytes
		s.StdoutLostBytes, s.StderrLostBytes = rec.StdoutLost, rec.StderrLost
		return s
	}
	s.StdoutBytes, s.StderrBytes = logTotal(dir, "stdout"), logTotal(dir, "stderr")
	owner := proctree.Owner{PID: rec.SupervisorPID, Start: rec.SupervisorStart, Boot: rec.BootID}
	switch verdict := owner.CheckOn(st.bootID); {
	case verdict == proctree.OwnerHostRestarted:
		// PIDs and start times from another boot mean nothing now.
		st.lose(&s, LostHostRestarted)
	case verdict == proctree.OwnerAlive:
	case st.finalNow(id, rec):
		// The supervisor recorded the end and exited between our read and
		// the liveness check: that end is the answer, not lost.
		return st.fromRecord(id, rec)
	case rec.PID > 0 && proctree.Alive(rec.PID, rec.PIDStart):
		s.OrphanPID, s.orphanStart = rec.PID, rec.PIDStart
		st.lose(&s, LostSupervisorDied)
	default:
		st.lose(&s, LostSupervisorDied)
	}
	return s
}

// finalNow re-reads the record of a job whose supervisor was just found
// dead, replacing *rec and reporting true when it now holds the end. A
// supervisor writes the end before it exits, so after its death this read
// is conclusive.
func (st *Store) finalNow(id string, rec *record) bool {
	var again record
	if state.ReadJSON(filepath.Join(st.jobDir(id), statusFile), &again) != nil || !again.Final {
		return false
	}
	*rec = again
	return true
}

func commandOf(shell string, argv []string) any {
	if shell != "" {
		return shell
	}
	return argv
}

// noRecord answers for a job directory without status.json: a supervisor
// that Start launched moments ago, or the remains of a Start that died
// before its supervisor wrote anything.
func (st *Store) noRecord(id string) (Status, error) {
	fi, err := os.Stat(filepath.Join(st.jobDir(id), specFile))
	if err != nil {
		// A Start killed before it wrote the spec leaves the bare
		// directory, which its age then shows lost.
		if fi, err = os.Stat(st.jobDir(id)); err != nil {
			return Status{}, jobErr(result.CodeJobExpired, "job %s was removed", st.dir.Mint("job", id))
		}
	}
	var spec Spec
	_ = state.ReadJSON(filepath.Join(st.jobDir(id), specFile), &spec)
	s := Status{Handle: st.dir.Mint("job", id), ID: id, Name: spec.Name, Status: StatusStarting,
		Command: spec.command(), Cwd: spec.Cwd, Description: spec.Description, Backend: BackendLocal}
	if spec.Backend == BackendSlurm {
		// Queued, or placed with a supervisor that has not written yet.
		s.Backend, s.SlurmJobID = BackendSlurm, spec.SlurmJobID
		return st.fromSlurmQueued(id, s, fi.ModTime()), nil
	}
	// The run lock tells what no record does yet: a supervisor that holds
	// it is starting the job (and is waited for, signalled and killed by
	// its identity there); one that held it and is gone, or a job that a
	// stop found without a supervisor (the lost marker), will never run.
	sv, held := st.runLock(id)
	if sv.PID > 0 && (!held || proctree.Present(sv.PID, sv.StartTime)) {
		// (A holder that is not the process named is a stop holding
		// the lock for a moment, or a supervisor yet to write its own.)
		// A supervisor SIGKILLed a moment ago may show a zombie while its
		// other threads still die holding the lock: it is named too, so
		// that a wait (and a stop's) wakes when it is gone and the lock
		// free, rather than at its own end.
		s.svPID, s.svStart, s.svLocal = sv.PID, sv.StartTime, true
	}
	switch {
	case held:
	case sv.PID > 0, exists(filepath.Join(st.jobDir(id), lostMarker)), time.Since(fi.ModTime()) > startingGrace:
		st.lose(&s, LostSupervisorDied)
	default:
		s.lostBy = fi.ModTime().Add(startingGrace)
	}
	return s, nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// lose marks s lost and appends the lost event once per run: the marker
// file is created with O_EXCL, so of many concurrent observers exactly one
// reports it. A new run (Restart) removes the marker.
func (st *Store) lose(s *Status, reason string) {
	s.Status, s.LostReason, s.Ready = StatusLost, reason, false
	f, err := os.OpenFile(filepath.Join(st.jobDir(s.ID), lostMarker), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	_ = f.Close()
	_, _ = st.dir.AppendEvent(state.Event{Handle: s.Handle, Name: s.Name, Type: StatusLost, Reason: reason})
}

// removeStaleTemps removes what killed writes of the supervisor's own
// files left in a job directory: temp files of status.json and the log
// sidecars, and trim copies. The caller holds the run lock, so the
// supervisor that wrote them is dead; files others write (stop.json,
// cursors) are not touched.
func removeStaleTemps(dir string) {
	state.RemoveTemps(dir, statusFile, Stdout+".meta.json", Stderr+".meta.json")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		for _, stream := range []string{Stdout, Stderr} {
			if strings.HasPrefix(e.Name(), trimPrefix(stream)) {
				_ = os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
	_ = os.Remove(filepath.Join(dir, reserveFile))
}
