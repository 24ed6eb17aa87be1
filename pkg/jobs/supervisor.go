package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/internal/faultpoint"
	"github.com/agentplane/agentplane/pkg/execguard"
	"github.com/agentplane/agentplane/pkg/launch"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/run"
	"github.com/agentplane/agentplane/pkg/sandbox"
	"github.com/agentplane/agentplane/pkg/state"
	"golang.org/x/sys/unix"
)

// runLockFile is held by the job's live supervisor.
const runLockFile = "supervisor.lock"

// handshakeFD is the descriptor on which Start passes the confirmation pipe.
const handshakeFD = 3

// Supervisor timing.
const (
	drainTime      = 500 * time.Millisecond // output still arriving after the main process exited
	killWait       = 5 * time.Second        // how long KillAllDescendants keeps trying
	probeInterval  = 100 * time.Millisecond // between readiness attempts: a port opening has no event
	backoffInitial = 100 * time.Millisecond
	backoffMax     = 30 * time.Second
	stableRun      = 10 * time.Second // a run this long resets the restart backoff
)

// supervisor runs one job: it owns status.json, the logs and the process
// tree.
type supervisor struct {
	d    *state.Dir
	id   string
	dir  string
	spec Spec
	rec  record
	hs   *os.File // confirmation pipe; nil once answered

	// mu guards known: the children that exec.Cmd values will wait for,
	// which the orphan reaper must leave alone.
	mu    sync.Mutex
	known map[int]bool

	// reserve is a file of reserveSize bytes that the supervisor gives
	// back when the disk is full, so that it can still record the end.
	reserve string

	// sandbox is the job's prepared confinement, shared by its restarts.
	sandbox *sandbox.Prepared
	// replaced tells of a protected or hidden path a process outside
	// replaced (sandbox.WatchReplaced): the run is killed at once.
	replaced <-chan string
	// retrying: the next start is one tried again because the last was
	// overtaken (loop): it appends no started or restarted event.
	retrying bool
	// ctl reaches the sandbox helper of the current run, which runs the
	// readiness probes inside the sandbox (ready_sandbox.go); nil without.
	ctl *sandbox.Control

	// prevTotals are the stream totals the previous run's end recorded,
	// from which a damaged log sidecar is rebuilt.
	prevTotals [2]int64

	// slurmJobID is set when a scheduler started this supervisor.
	slurmJobID string

	// admit decides the spec before each automatic restart
	// (SupervisorOptions.Admit).
	admit func(Spec) error

	// argv is the command's argv once computed (execArgv).
	argv []string

	// cg is the cgroup every run of the job starts in, where one could be
	// made (see remains); nil otherwise.
	cg *proctree.TreeCgroup
}

// execArgv is the argv that runs the job's command. A shell string too long
// for one argument reaches the shell through a file, written once per
// supervisor in the job's directory (the sandbox's temp dir when sandboxed)
// and shared by the restarts.
func (sv *supervisor) execArgv() ([]string, error) {
	if sv.argv != nil {
		return sv.argv, nil
	}
	if sv.spec.Shell == "" {
		sv.argv = sv.spec.execArgv()
		return sv.argv, nil
	}
	dir := sv.dir
	if sv.sandbox != nil {
		dir = sv.sandbox.TempDir
	}
	argv, _, err := run.ScriptArgv(sv.spec.ShellProgram, sv.spec.Shell, dir)
	if err != nil {
		return nil, err
	}
	sv.argv = argv
	return argv, nil
}

// RunSupervisor is the body of the hidden supervisor command that Start
// launches (its argv is NewStore's supervisorArgv plus the job id). It
// expects the confirmation pipe on fd 3, as Start arranges, runs the job to
// its end with its timeout, readiness probe and restart policy, records
// every transition in status.json and the event log, and returns when the
// job has ended and nothing of its process tree remains.
//
// specDigest is SpecDigest of the spec file its launcher wrote or decided
// (SpecDigestEnv), or "" (a scheduled supervisor's, an old launcher's): a
// spec file whose bytes differ is refused.
func RunSupervisor(ctx context.Context, d *state.Dir, id, specDigest string, opt SupervisorOptions) error {
	return runSupervisor(ctx, d, id, "", specDigest, opt)
}

// SupervisorOptions are what the program that runs a supervisor decides
// for it.
type SupervisorOptions struct {
	// Admit, when set, decides the job's spec again before each automatic
	// restart (the restart policy's), as Store.Admit decides an
	// `agentjob restart`: an error ends the job, failed, with the error's
	// code as its reason, instead of running it again. (Under the sandbox
	// lock, a job started before the lock does not go on restarting with
	// less than the floor.)
	Admit func(Spec) error
}

// RunScheduledSupervisor is RunSupervisor for a job that a cluster
// scheduler placed (the slurm backend's batch script runs it on the
// allocated node): there is no confirmation pipe, since the submitter
// returned long ago, and the record carries the scheduler's job id.
func RunScheduledSupervisor(ctx context.Context, d *state.Dir, id, slurmJobID string, opt SupervisorOptions) error {
	return runSupervisor(ctx, d, id, slurmJobID, "", opt)
}

// ReasonSchedulerSignal is the reason of a slurm job that its supervisor
// saw stopped by a signal nobody asked agentjob for: the scheduler's
// (scancel, a time limit, preemption). Status then asks the scheduler
// which it was.
const ReasonSchedulerSignal = "scheduler_signal"

// restartsOnChange bounds the starts tried again in a row because a
// protected file changed during the start (see loop).
const restartsOnChange = 8

// ReasonSandboxRefreshed is the reason of a run its supervisor killed
// because a process outside replaced a file the run's sandbox protects
// (git config, an editor's save): the new file is no mount's of that
// sandbox. A restart (the restart policy's) covers it.
const ReasonSandboxRefreshed = "sandbox_refreshed"

func runSupervisor(ctx context.Context, d *state.Dir, id, slurmJobID, specDigest string, opt SupervisorOptions) error {
	sv := &supervisor{d: d, id: id, dir: d.Join("jobs", id), known: map[int]bool{}, slurmJobID: slurmJobID, admit: opt.Admit}
	// The pipe must not leak into the job: a job holding it would keep
	// Start waiting for EOF. A scheduled supervisor has none, and its fd 3
	// is whatever the scheduler left there.
	if slurmJobID == "" && isPipe(handshakeFD) {
		unix.CloseOnExec(handshakeFD)
		sv.hs = os.NewFile(handshakeFD, "handshake")
	}
	// Whatever ends this function before the job runs (a panic included)
	// must not read as a confirmation.
	defer sv.answer(errors.New("the supervisor ended before the job started"))
	// Notify before anything records our PID: from then on Stop may send
	// SIGTERM, which must reach this handler rather than kill us.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)

	specJSON, err := state.ReadFile(filepath.Join(sv.dir, specFile))
	if err == nil && specDigest != "" && SpecDigest(specJSON) != specDigest {
		err = jobErr(result.CodeStateCorrupt, "job %s: its spec file changed between the launch and the supervisor's start", id)
	}
	if err == nil {
		if jerr := json.Unmarshal(specJSON, &sv.spec); jerr != nil {
			err = jobErr(result.CodeStateCorrupt, "job %s: its spec does not parse: %v", id, jerr)
		}
	}
	if err != nil {
		sv.answer(err)
		return err
	}
	// One supervisor per job at a time: two concurrent restarts must not
	// both run it. The lock dies with the process, so a SIGKILLed
	// supervisor never blocks the next one.
	lock, err := state.OpenFile(filepath.Join(sv.dir, runLockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		sv.answer(err)
		return err
	}
	defer lock.Close()
	if !lockExclusive(lock) {
		err := &codedError{result.CodeJobRunning, fmt.Errorf("job %s already has a running supervisor", sv.d.Mint("job", id))}
		sv.answer(err)
		return err
	}
	if self, err := proctree.ReadStat(os.Getpid()); err == nil {
		writeLockIdentity(lock, self)
	}
	faultpoint.Hit("supervisor.locked")
	// Holding the run lock proves that whoever wrote the temp files of
	// this directory's supervisor-owned files is dead.
	removeStaleTemps(sv.dir)
	if err := sv.begin(); err != nil {
		sv.answer(err)
		return err
	}
	faultpoint.Hit("supervisor.began")
	if err := proctree.SetSubreaper(); err != nil {
		sv.answer(err)
		return err
	}
	if sv.slurmJobID == "" {
		self := proctree.ID{PID: sv.rec.SupervisorPID, Start: sv.rec.SupervisorStart}
		if cg, err := proctree.MakeTreeCgroup(jobCgroupName(id, self)); err == nil {
			// Removed once the job's last run is over and its tree dead;
			// a supervisor that dies leaves it to Stop.
			sv.cg, sv.rec.Cgroup = cg, cg.Dir
			defer cg.Remove()
		}
	}
	if p := sv.spec.Sandbox; p != nil && !p.Empty() {
		exe, err := os.Executable()
		if err == nil {
			sv.sandbox, err = sandbox.Prepare(*p, exe)
		}
		if err != nil {
			sv.answer(err)
			return err
		}
		defer sv.sandbox.Cleanup()
		faultpoint.Hit("supervisor.prepared")
		var stopWatch func()
		sv.replaced, stopWatch = sv.sandbox.WatchReplaced()
		defer stopWatch()
		if nr := sv.recordNetwork(sv.sandbox); nr != nil {
			sv.rec.Proxy = true
			// Before Cleanup (deferred earlier, so run later) closes the proxy.
			defer nr.close()
		}
	}
	return sv.loop(ctx, sigs, chld)
}

func isPipe(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}

// answer completes the handshake once: ok when err is nil.
func (sv *supervisor) answer(err error) {
	if sv.hs == nil {
		return
	}
	var ce *codedError
	var re *result.Error
	switch {
	case errors.As(err, &ce):
		err = result.Errorf(ce.code, "%s", err.Error()).Wrap(err)
	case err != nil && state.Classify(err) != nil:
		err = state.Classify(err) // a full or read-only disk, told as such
	case err != nil && !errors.As(err, &re):
		err = result.Errorf(result.CodeStartFailed, "%s", err.Error()).Wrap(err)
	}
	launch.Answer(sv.hs, err)
	sv.hs = nil
}

// codedError is a start failure with a stable code for the handshake.
type codedError struct {
	code string
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

// begin prepares the record of this run: the supervisor's identity (PID,
// start time, boot id), which every status.json it writes carries, so that
// a dead supervisor is always detectable from the record.
func (sv *supervisor) begin() error {
	var prev record
	hadPrev := state.ReadJSON(filepath.Join(sv.dir, statusFile), &prev) == nil
	self, err := proctree.ReadStat(os.Getpid())
	if err != nil {
		return err
	}
	boot, _ := proctree.BootID()
	sv.rec = record{
		Status: StatusStarting, Name: sv.spec.Name, Description: sv.spec.Description,
		Shell: sv.spec.Shell, Argv: sv.spec.Argv, Cwd: sv.spec.Cwd,
		SupervisorPID: self.PID, SupervisorStart: self.StartTime, BootID: boot,
		Run: 1,
	}
	if sv.slurmJobID != "" {
		host, _ := os.Hostname()
		sv.rec.Backend, sv.rec.SlurmJobID, sv.rec.Host = BackendSlurm, sv.slurmJobID, host
	}
	if hadPrev {
		sv.prevTotals = [2]int64{prev.StdoutBytes, prev.StderrBytes}
		// A manual restart: a new run of the same job.
		sv.rec.Run = prev.Run + 1
		sv.rec.Restarts = prev.Restarts + 1
	}
	_, serr := os.Lstat(filepath.Join(sv.dir, statusFile))
	if errors.Is(serr, fs.ErrNotExist) && sv.slurmJobID == "" {
		// A first run whose job a stop already found without a supervisor
		// (and answered lost) does not run after all; a stop request
		// written before this supervisor took the lock is this run's, and
		// its SIGTERM is already on its way.
		if _, err := os.Lstat(filepath.Join(sv.dir, lostMarker)); err == nil {
			return jobErr(result.CodeStartFailed, "job %s was stopped before its supervisor started", sv.d.Mint("job", sv.id))
		}
	} else {
		// A stop request or lost marker belongs to the previous run.
		_ = os.Remove(filepath.Join(sv.dir, stopFile))
		_ = os.Remove(filepath.Join(sv.dir, lostMarker))
	}
	if !hadPrev {
		// A first run needs no "starting" record: no handle exists until
		// Start has the confirmation, and the "running" record written
		// right after the job starts is the one that matters. Each
		// durable write costs an fsync on Start's path.
		return nil
	}
	// A new run replaces the previous run's end at once, so nobody reads
	// the old end as this run's; only then may a resubmitted slurm job's
	// marker go, which until now said the old end is not the answer.
	err = sv.save()
	_ = os.Remove(filepath.Join(sv.dir, resubmittedMarker))
	return err
}

func (sv *supervisor) save() error {
	// Compact, not indented: List parses one of these per job.
	b, err := json.Marshal(sv.rec)
	if err != nil {
		return err
	}
	return sv.withSpace(func() error {
		return state.WriteFileAtomic(filepath.Join(sv.dir, statusFile), append(b, '\n'), 0o600)
	})
}

func (sv *supervisor) event(typ string) {
	e := state.Event{Handle: sv.d.Mint("job", sv.id), Name: sv.spec.Name, Type: typ,
		ExitCode: sv.rec.ExitCode, Signal: sv.rec.Signal, Reason: sv.rec.Reason}
	if typ == "restarted" {
		e.Restarts = sv.rec.Restarts
	}
	_ = sv.withSpace(func() error { _, err := sv.d.AppendEvent(e); return err })
}

// reserveSize is how much space a supervisor sets aside for its last
// records: an end that happens on a full disk must still be written, or a
// job that ran to its end would read as lost. A few pages: the status.json
// temp file, the growth of the event log.
const reserveSize = 16 << 10

// reserveSpace writes the reserve file before the job is confirmed: a
// disk too full for it is too full to start a job on (no_space).
func (sv *supervisor) reserveSpace() error {
	if sv.reserve != "" {
		return nil
	}
	path := filepath.Join(sv.dir, reserveFile)
	if err := os.WriteFile(path, make([]byte, reserveSize), 0o600); err != nil {
		_ = os.Remove(path)
		return err
	}
	sv.reserve = path
	return nil
}

// withSpace runs write and, if it fails for want of space, gives the
// reserve back to the filesystem and tries once more.
func (sv *supervisor) withSpace(write func() error) error {
	err := write()
	if err == nil || sv.reserve == "" || !state.IsNoSpace(err) {
		return err
	}
	_ = os.Remove(sv.reserve)
	sv.reserve = ""
	return write()
}

// runResult is how one run of the job ended.
type runResult struct {
	status   string // exited, failed, stopped, timeout
	exitCode *int
	signal   string
	reason   string
	denied   *execguard.Exec // the exec the runtime guard refused
}

func (sv *supervisor) loop(ctx context.Context, sigs, chld chan os.Signal) error {
	var deadline <-chan time.Time
	if sv.spec.Timeout > 0 {
		t := time.NewTimer(sv.spec.Timeout)
		defer t.Stop()
		deadline = t.C
	}
	outSink, err := openSink(sv.dir, Stdout, sv.spec.LogLimit, sv.prevTotals[0])
	if err != nil {
		sv.answer(err)
		return err
	}
	defer outSink.Close()
	errSink, err := openSink(sv.dir, Stderr, sv.spec.LogLimit, sv.prevTotals[1])
	if err != nil {
		sv.answer(err)
		return err
	}
	defer errSink.Close()

	backoff := backoffInitial
	first := true
	changed := 0
	for {
		began := time.Now()
		res, err := sv.runOnce(ctx, first, outSink, errSink, sigs, chld, deadline)
		sv.retrying = false
		answered := sv.hs == nil
		if err != nil && (!first || answered) && sv.overtaken(err) && changed < restartsOnChange {
			// A file the sandbox protects was replaced again between
			// this start's record of it and the helper's check (a host
			// rewriting .git/config in a loop): the start is tried
			// again, as a session's new shell is, not made final. The
			// first start too, once Start's caller has its answer (the
			// helper checks after the record is written: on a loaded
			// machine the host's first rewrite came in between, and
			// the job was failed with sandbox_failed). The command did
			// not run: no event, no restart counted; only a stop asked
			// for meanwhile ends the job instead.
			if sv.stopPending(sigs) {
				sv.rec.Status, sv.rec.Final, sv.rec.Ready = StatusStopped, true, false
				sv.rec.PID, sv.rec.PIDStart = 0, 0
				sv.event(StatusStopped)
				sv.finish(outSink, errSink)
				return nil
			}
			changed++
			first, sv.retrying = false, true
			continue
		}
		changed = 0
		if err != nil {
			// The job could not start: record the failure honestly.
			sv.rec.Status, sv.rec.Final, sv.rec.Ready = StatusFailed, true, false
			sv.rec.PID, sv.rec.PIDStart = 0, 0
			var ce *codedError
			var re *result.Error
			if errors.As(err, &ce) {
				sv.rec.Reason = ce.code
			} else if errors.As(err, &re) {
				sv.rec.Reason = re.Code
			} else {
				sv.rec.Reason = result.CodeStartFailed
			}
			if !first || answered {
				// A job whose start was confirmed ends with an event.
				sv.event(StatusFailed)
			}
			sv.finish(outSink, errSink)
			sv.answer(err)
			return err
		}
		first = false
		sv.rec.ExitCode, sv.rec.Signal, sv.rec.Reason, sv.rec.Denied = res.exitCode, res.signal, res.reason, res.denied
		if !sv.shouldRestart(res) {
			sv.rec.Status, sv.rec.Final, sv.rec.Ready = res.status, true, false
			sv.event(res.status)
			sv.finish(outSink, errSink)
			return nil
		}
		if time.Since(began) >= stableRun {
			backoff = backoffInitial
		}
		sv.rec.Status, sv.rec.Ready = StatusStarting, false
		_ = sv.save()
		faultpoint.Hit("supervisor.restart.backoff")
		// Wait out the backoff, still answering stop requests and the
		// overall timeout.
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case s := <-sigs:
			t.Stop()
			if s == syscall.SIGHUP {
				break
			}
			sv.rec.Status, sv.rec.Final = StatusStopped, true
			sv.event(StatusStopped)
			sv.finish(outSink, errSink)
			return nil
		case <-deadline:
			sv.rec.Status, sv.rec.Final = StatusTimeout, true
			sv.event(StatusTimeout)
			sv.finish(outSink, errSink)
			return nil
		}
		if sv.admit != nil {
			if err := sv.admit(sv.spec); err != nil {
				// Refused: the job ends here, as one that could not
				// start again.
				sv.rec.Status, sv.rec.Final, sv.rec.Ready = StatusFailed, true, false
				sv.rec.PID, sv.rec.PIDStart = 0, 0
				sv.rec.Reason = result.CodeStartFailed
				var re *result.Error
				if errors.As(err, &re) {
					sv.rec.Reason = re.Code
				}
				sv.event(StatusFailed)
				sv.finish(outSink, errSink)
				return nil
			}
		}
		backoff = min(2*backoff, backoffMax)
		sv.rec.Restarts++
	}
}

// overtaken reports whether err, a start's failure, is the sandbox
// helper's refusal of a protected file that a process outside replaced
// during the start: by the helper's word (sandbox.ChangedError), or by
// the file's identity now (Stale), which a new file that took the old
// one's inode number hides.
func (sv *supervisor) overtaken(err error) bool {
	if sv.sandbox == nil {
		return false
	}
	var ce *sandbox.ChangedError
	return errors.As(err, &ce) || sv.sandbox.Stale() != ""
}

// stopPending reports a stop asked for while no run was supervised: Stop's
// request file, written before its SIGTERM (which may not have been
// delivered yet), or a stop signal that came; SIGHUP is dropped, as
// supervise drops it.
func (sv *supervisor) stopPending(sigs chan os.Signal) bool {
	if _, err := os.Lstat(filepath.Join(sv.dir, stopFile)); err == nil {
		return true
	}
	for {
		select {
		case s := <-sigs:
			if s != syscall.SIGHUP {
				return true
			}
		default:
			return false
		}
	}
}

func (sv *supervisor) shouldRestart(res runResult) bool {
	if res.status != StatusExited && res.status != StatusFailed {
		return false
	}
	switch sv.spec.Restart {
	case RestartAlways:
	case RestartOnFailure:
		if res.status != StatusFailed {
			return false
		}
	default:
		return false
	}
	return sv.spec.MaxRestarts == 0 || sv.rec.Restarts < sv.spec.MaxRestarts
}

// finish writes the final record. The final event is appended before it:
// whoever sees the final status also finds the event, and a supervisor
// killed in between leaves the event, not a silent end.
func (sv *supervisor) finish(out, errs *logSink) {
	faultpoint.Hit("supervisor.final.event")
	sv.rec.EndedAt = state.FormatTime(time.Now())
	sv.rec.StdoutBytes, sv.rec.StderrBytes = out.total(), errs.total()
	sv.rec.StdoutLost, sv.rec.StderrLost = out.lost, errs.lost
	_ = sv.save()
	faultpoint.Hit("supervisor.final.saved")
	if sv.reserve != "" {
		_ = os.Remove(sv.reserve)
	}
}

// copyLog copies one stream into its sink, and while a log probe waits,
// matches complete lines against re.
func copyLog(r io.Reader, sink *logSink, re *regexp.Regexp, ready func()) {
	buf := make([]byte, 32<<10)
	var line []byte
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = sink.Write(buf[:n])
			if re != nil {
				line = append(line, buf[:n]...)
				for {
					i := indexNL(line)
					if i < 0 {
						break
					}
					if re.Match(line[:i]) {
						ready()
						re = nil
						break
					}
					line = line[i+1:]
				}
				if re != nil && len(line) > 64<<10 {
					// An endless line: match what we have and move on.
					if re.Match(line) {
						ready()
						re = nil
					}
					line = line[:0]
				}
				if re == nil {
					line = nil
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func indexNL(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}

// probe runs the HTTP, TCP or command readiness check until it passes or
// ctx ends. These have no event to wait for, so they retry on an interval.
func (sv *supervisor) probe(ctx context.Context, ready func()) {
	p := sv.spec.Ready
	client := &http.Client{Timeout: time.Second}
	ctl := sv.ctl
	try := func() bool {
		if ctl != nil {
			return sv.probeInSandbox(ctx, ctl)
		}
		switch {
		case p.HTTP != "":
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.HTTP, nil)
			if err != nil {
				return false
			}
			resp, err := client.Do(req)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode < 500
		case p.TCP != "":
			var d net.Dialer
			dctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			c, err := d.DialContext(dctx, "tcp", p.TCP)
			if err != nil {
				return false
			}
			c.Close()
			return true
		case p.Cmd != "":
			shell := sv.spec.ShellProgram
			if shell == "" {
				shell = "sh"
			}
			cmd := exec.CommandContext(ctx, shell, "-c", p.Cmd)
			cmd.Dir, cmd.Env = sv.spec.Cwd, proctree.WithoutTokens(sv.spec.Env)
			// The readiness command is held to the job's policy: it
			// runs under its own guard, and a probe whose guard refused
			// an exec (or could not police it) is not a pass.
			g, err := sv.guard(cmd, false)
			if err != nil {
				return false
			}
			if g != nil {
				defer g.Cleanup()
				cmd.Path, cmd.Args, cmd.ExtraFiles = g.Wrap(cmd.Path, cmd.Args, cmd.ExtraFiles)
			}
			err = sv.startKnown(cmd)
			if g != nil {
				g.Launched()
			}
			if err != nil {
				return false
			}
			err = cmd.Wait()
			sv.forget(cmd.Process.Pid)
			if g != nil {
				rep := g.Report()
				sv.auditRuntime(rep)
				if rep.Err() != nil {
					return false
				}
			}
			return err == nil
		}
		return false
	}
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		if try() {
			ready()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
