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

	"github.com/agentplane/agentplane/pkg/audit"
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

	hooks hooks

	// sandbox is the job's prepared confinement, shared by its restarts.
	sandbox *sandbox.Prepared
	// ctl reaches the sandbox helper of the current run, which runs the
	// readiness probes inside the sandbox (ready_sandbox.go); nil without.
	ctl *sandbox.Control

	// slurmJobID is set when a scheduler started this supervisor.
	slurmJobID string

	// argv is the command's argv once computed (execArgv).
	argv []string
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
func RunSupervisor(ctx context.Context, d *state.Dir, id string) error {
	return runSupervisor(ctx, d, id, "", hooks{})
}

// RunScheduledSupervisor is RunSupervisor for a job that a cluster
// scheduler placed (the slurm backend's batch script runs it on the
// allocated node): there is no confirmation pipe, since the submitter
// returned long ago, and the record carries the scheduler's job id.
func RunScheduledSupervisor(ctx context.Context, d *state.Dir, id, slurmJobID string) error {
	return runSupervisor(ctx, d, id, slurmJobID, hooks{})
}

// ReasonSchedulerSignal is the reason of a slurm job that its supervisor
// saw stopped by a signal nobody asked agentjob for: the scheduler's
// (scancel, a time limit, preemption). Status then asks the scheduler
// which it was.
const ReasonSchedulerSignal = "scheduler_signal"

// hooks let crash tests stop the supervisor at chosen moments; production
// leaves them nil.
type hooks struct {
	afterBegin    func() // status.json says starting, no job yet
	afterJobStart func() // the job runs and status.json says so, unconfirmed
}

func runSupervisor(ctx context.Context, d *state.Dir, id, slurmJobID string, h hooks) error {
	sv := &supervisor{d: d, id: id, dir: d.Join("jobs", id), known: map[int]bool{}, hooks: h, slurmJobID: slurmJobID}
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

	if err := state.ReadJSON(filepath.Join(sv.dir, specFile), &sv.spec); err != nil {
		sv.answer(err)
		return err
	}
	// One supervisor per job at a time: two concurrent restarts must not
	// both run it. The lock dies with the process, so a SIGKILLed
	// supervisor never blocks the next one.
	lock, err := os.OpenFile(filepath.Join(sv.dir, runLockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		sv.answer(err)
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		err = &codedError{result.CodeJobRunning, fmt.Errorf("job %s already has a running supervisor", sv.d.Mint("job", id))}
		sv.answer(err)
		return err
	}
	if err := sv.begin(); err != nil {
		sv.answer(err)
		return err
	}
	if err := proctree.SetSubreaper(); err != nil {
		sv.answer(err)
		return err
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
	}
	if sv.hooks.afterBegin != nil {
		sv.hooks.afterBegin()
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
		// A manual restart: a new run of the same job.
		sv.rec.Run = prev.Run + 1
		sv.rec.Restarts = prev.Restarts + 1
	}
	// A stop request or lost marker belongs to the previous run.
	_ = os.Remove(filepath.Join(sv.dir, stopFile))
	_ = os.Remove(filepath.Join(sv.dir, lostMarker))
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
	return state.WriteFileAtomic(filepath.Join(sv.dir, statusFile), append(b, '\n'), 0o600)
}

func (sv *supervisor) event(typ string) {
	e := state.Event{Handle: sv.d.Mint("job", sv.id), Name: sv.spec.Name, Type: typ,
		ExitCode: sv.rec.ExitCode, Signal: sv.rec.Signal, Reason: sv.rec.Reason}
	if typ == "restarted" {
		e.Restarts = sv.rec.Restarts
	}
	_, _ = sv.d.AppendEvent(e)
}

// runResult is how one run of the job ended.
type runResult struct {
	status   string // exited, failed, stopped, timeout
	exitCode *int
	signal   string
	reason   string
}

func (sv *supervisor) loop(ctx context.Context, sigs, chld chan os.Signal) error {
	var deadline <-chan time.Time
	if sv.spec.Timeout > 0 {
		t := time.NewTimer(sv.spec.Timeout)
		defer t.Stop()
		deadline = t.C
	}
	outSink, err := openSink(sv.dir, Stdout, sv.spec.LogLimit)
	if err != nil {
		sv.answer(err)
		return err
	}
	defer outSink.Close()
	errSink, err := openSink(sv.dir, Stderr, sv.spec.LogLimit)
	if err != nil {
		sv.answer(err)
		return err
	}
	defer errSink.Close()

	backoff := backoffInitial
	first := true
	for {
		began := time.Now()
		res, err := sv.runOnce(ctx, first, outSink, errSink, sigs, chld, deadline)
		if err != nil {
			// The job could not start: record the failure honestly.
			sv.rec.Status, sv.rec.Final, sv.rec.Ready = StatusFailed, true, false
			sv.rec.PID, sv.rec.PIDStart = 0, 0
			var ce *codedError
			if errors.As(err, &ce) {
				sv.rec.Reason = ce.code
			} else {
				sv.rec.Reason = result.CodeStartFailed
			}
			if !first {
				sv.event(StatusFailed)
			}
			sv.finish(outSink, errSink)
			sv.answer(err)
			return err
		}
		first = false
		sv.rec.ExitCode, sv.rec.Signal, sv.rec.Reason = res.exitCode, res.signal, res.reason
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
		backoff = min(2*backoff, backoffMax)
		sv.rec.Restarts++
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
	sv.rec.EndedAt = state.FormatTime(time.Now())
	sv.rec.StdoutBytes, sv.rec.StderrBytes = out.total(), errs.total()
	_ = sv.save()
}

// startError classifies a failure to start the job.
func startError(spec *Spec, err error) error {
	var pe *fs.PathError
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist) && !(errors.As(err, &pe) && pe.Op == "chdir"):
		return &codedError{result.CodeCommandNotFound, fmt.Errorf("command not found: %s", spec.execArgv()[0])}
	case errors.As(err, &pe) && pe.Op == "chdir":
		return &codedError{result.CodeCwdNotFound, fmt.Errorf("working directory %s does not exist", spec.Cwd)}
	case errors.Is(err, fs.ErrPermission):
		return &codedError{result.CodeCommandNotExecutable, fmt.Errorf("command cannot be executed: %s", spec.execArgv()[0])}
	}
	return &codedError{result.CodeStartFailed, fmt.Errorf("start %s: %w", spec.execArgv()[0], err)}
}

// runOnce starts the job once and supervises it until it ends and its whole
// process tree is gone. An error means it could not be started.
func (sv *supervisor) runOnce(ctx context.Context, first bool, outSink, errSink *logSink,
	sigs, chld chan os.Signal, deadline <-chan time.Time) (runResult, error) {
	if fi, err := os.Stat(sv.spec.Cwd); err != nil || !fi.IsDir() {
		return runResult{}, &codedError{result.CodeCwdNotFound, fmt.Errorf("working directory %s does not exist", sv.spec.Cwd)}
	}
	argv, err := sv.execArgv()
	if err != nil {
		return runResult{}, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = sv.spec.Cwd, sv.spec.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	afterStart := func() {}
	if sv.sandbox != nil {
		// A program that does not exist must still fail the start, not
		// become a job whose helper exits 127.
		if cmd.Err != nil {
			return runResult{}, startError(&sv.spec, cmd.Err)
		}
		exe, err := os.Executable()
		if err != nil {
			return runResult{}, err
		}
		ctl, started, err := sv.sandboxProbe(cmd)
		if err != nil {
			return runResult{}, err
		}
		sv.ctl, afterStart = ctl, started
		defer started()
		if ctl != nil {
			defer ctl.Close()
		}
		w := sv.sandbox.Wrap(exe, "agentjob", argv, cmd.Env)
		cmd.Path, cmd.Args, cmd.Env, cmd.SysProcAttr = w.Path, w.Argv, w.Env, w.SysProcAttr
	}
	g, err := sv.guard(cmd, sv.sandbox != nil)
	if err != nil {
		return runResult{}, err
	}
	if g != nil {
		defer g.Cleanup()
	}
	cmd.SysProcAttr.Setpgid = true
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return runResult{}, err
	}
	defer devnull.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return runResult{}, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return runResult{}, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, outW, errW
	err = sv.startKnown(cmd)
	afterStart()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return runResult{}, startError(&sv.spec, err)
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the outcome is read from cmd.ProcessState
		sv.forget(pid)
		close(exited)
	}()

	pctx, stopProbe := context.WithCancel(ctx)
	readyCh := make(chan struct{})
	var readyOnce sync.Once
	markReady := func() { readyOnce.Do(func() { close(readyCh) }) }
	var logRE *regexp.Regexp
	if sv.spec.Ready.Log != "" {
		logRE = regexp.MustCompile(sv.spec.Ready.Log) // validated by Start
	}
	var copiers sync.WaitGroup
	copiers.Go(func() { copyLog(outR, outSink, logRE, markReady) })
	copiers.Go(func() { copyLog(errR, errSink, logRE, markReady) })
	copied := make(chan struct{})
	go func() { copiers.Wait(); close(copied) }()

	st, _ := proctree.ReadStat(pid)
	sv.rec.Status, sv.rec.Ready = StatusRunning, false
	sv.rec.PID, sv.rec.PIDStart = pid, st.StartTime
	sv.rec.StartedAt, sv.rec.EndedAt = state.FormatTime(time.Now()), ""
	sv.rec.ExitCode, sv.rec.Signal, sv.rec.Reason = nil, "", ""
	_ = sv.save()
	if sv.hooks.afterJobStart != nil {
		sv.hooks.afterJobStart()
	}
	// Confirm before appending the event: the caller of Start waits only
	// for the record, and the event's fsync need not delay it.
	sv.answer(nil)
	switch {
	case first && sv.rec.Run == 1:
		sv.event("started")
	default:
		sv.event("restarted")
	}

	var probes sync.WaitGroup
	var readyTimeout <-chan time.Time
	if sv.spec.Ready.Set() {
		rt := time.NewTimer(sv.spec.Ready.Timeout)
		defer rt.Stop()
		readyTimeout = rt.C
		if logRE == nil {
			probes.Go(func() { sv.probe(pctx, markReady) })
		}
	}
	finishProbes := func() { stopProbe(); probes.Wait() }
	defer finishProbes()

	res := runResult{}
	terminate := func(status string, sig syscall.Signal, grace time.Duration, reason string) {
		res.status, res.reason = status, reason
		// Descendants that left the group (setsid) are still below the
		// supervisor, a subreaper.
		proctree.Terminate(context.Background(), proctree.Tree{Group: pid, Root: os.Getpid()}, sig, grace, exited)
	}
wait:
	for {
		select {
		case <-exited:
			break wait
		case <-readyCh:
			readyCh = nil
			readyTimeout = nil
			sv.rec.Status, sv.rec.Ready = StatusReady, true
			_ = sv.save()
			sv.event(StatusReady)
		case <-readyTimeout:
			terminate(StatusFailed, syscall.SIGTERM, sv.spec.KillGrace, "ready_timeout")
		case <-deadline:
			terminate(StatusTimeout, syscall.SIGTERM, sv.spec.KillGrace, "")
		case s := <-sigs:
			if s == syscall.SIGHUP {
				continue // no terminal to lose; stay up
			}
			req := stopRequest{Signal: int(syscall.SIGTERM), GraceMS: DefaultKillGrace.Milliseconds()}
			reason := ""
			if state.ReadJSON(filepath.Join(sv.dir, stopFile), &req) != nil && sv.slurmJobID != "" {
				reason = ReasonSchedulerSignal
			}
			terminate(StatusStopped, syscall.Signal(req.Signal), time.Duration(req.GraceMS)*time.Millisecond, reason)
		case <-chld:
			sv.reapOrphans()
		}
		if res.status != "" {
			<-exited
			break
		}
	}
	finishProbes()
	// The main process is gone. Give output still in flight a moment, then
	// kill everything it left behind, so no process and no pipe writer
	// outlives the run.
	dt := time.NewTimer(drainTime)
	select {
	case <-copied:
	case <-dt.C:
	}
	dt.Stop()
	proctree.KillAllDescendants(killWait)
	ct := time.NewTimer(drainTime)
	select {
	case <-copied:
	case <-ct.C:
		// A writer escaped (it was never our descendant): stop reading.
		outR.Close()
		errR.Close()
		<-copied
	}
	ct.Stop()
	outR.Close()
	errR.Close()

	if cmd.ProcessState == nil {
		// Waiting failed, so the exit status is unknown: say so rather
		// than report a success.
		if res.status == "" {
			res.status, res.reason = StatusFailed, "exit_status_unknown"
		}
		return res, nil
	}
	if g != nil {
		rep := g.Report()
		if rep.Error != nil {
			return runResult{}, &codedError{rep.Error.Code, errors.New(rep.Error.Message)}
		}
		sv.auditRuntime(rep)
		if rep.Killed != nil {
			// The guard killed a program the policy refused, and the
			// run with it.
			res.status, res.reason = StatusFailed, result.AsError(rep.Err()).Code
		}
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	code, sig := ws.ExitStatus(), ""
	if ws.Signaled() {
		sig = proctree.SignalName(ws.Signal())
	}
	if sv.sandbox != nil {
		// The sandbox helper is PID 1 of the job's namespace and reports
		// a signal death of the job through its status file.
		code, sig = sv.sandbox.ExitStatus(code, sig)
	}
	if sig != "" {
		res.signal = sig
	} else {
		res.exitCode = &code
	}
	if res.status == "" {
		res.status = StatusFailed
		if res.exitCode != nil && *res.exitCode == 0 {
			res.status = StatusExited
		}
	}
	return res, nil
}

// guard puts cmd under the job's runtime policy, when it has one: cmd then
// runs this program as the guard, which runs and polices what cmd was.
// sandboxed says cmd already starts the sandbox helper.
func (sv *supervisor) guard(cmd *exec.Cmd, sandboxed bool) (*execguard.Guard, error) {
	if sv.spec.Policy == nil {
		return nil, nil
	}
	// A program that does not exist fails the start, as without a guard.
	if cmd.Err != nil {
		return nil, startError(&sv.spec, cmd.Err)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, &codedError{result.CodePolicyUnavailable, fmt.Errorf("cannot find the executable for the policy guard: %v", err)}
	}
	g, err := execguard.Prepare(sv.spec.Policy, sv.spec.PolicyApproved, exe)
	if err != nil {
		return nil, &codedError{result.CodePolicyUnavailable, err}
	}
	if sandboxed {
		g.TrustFirst()
	}
	cmd.Args, cmd.Path = g.Argv(cmd.Path, cmd.Args), exe
	return g, nil
}

// auditRuntime records in the environment's audit log what the runtime
// guard refused or let run on approval during one run of the job.
func (sv *supervisor) auditRuntime(rep *execguard.Report) {
	if rep.Killed == nil && len(rep.Approved) == 0 {
		return
	}
	var command any = sv.spec.Argv
	if sv.spec.Shell != "" {
		command = sv.spec.Shell
	}
	rec := audit.Record{Program: "agentjob", Operation: "run", Command: command, Cwd: sv.spec.Cwd,
		Description: sv.spec.Description, Handle: sv.d.Mint("job", sv.id), Status: "completed",
		PolicyRuntime: rep, Approved: sv.spec.PolicyApproved && len(rep.Approved) > 0}
	if err := rep.Err(); err != nil {
		rec.Status, rec.ErrorCode = "refused", result.AsError(err).Code
	}
	_ = (&audit.Log{Path: sv.d.Join(audit.FileName)}).Append(rec)
}

// startKnown starts cmd while holding the reaper lock, so the reaper never
// mistakes the new child for an orphan before it is registered.
func (sv *supervisor) startKnown(cmd *exec.Cmd) error {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	sv.known[cmd.Process.Pid] = true
	return nil
}

func (sv *supervisor) forget(pid int) {
	sv.mu.Lock()
	delete(sv.known, pid)
	sv.mu.Unlock()
}

// reapOrphans collects the zombies of adopted orphans while the job runs
// (a subreaper inherits them), leaving alone the children exec.Cmd waits
// for.
func (sv *supervisor) reapOrphans() {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	snap, err := proctree.Snapshot()
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, s := range snap {
		if s.PPID == self && s.Dead() && !sv.known[s.PID] {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(s.PID, &ws, syscall.WNOHANG, nil)
		}
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
			cmd.Dir, cmd.Env = sv.spec.Cwd, sv.spec.Env
			// The readiness command is held to the job's policy.
			g, err := sv.guard(cmd, false)
			if err != nil {
				return false
			}
			if g != nil {
				defer g.Cleanup()
			}
			if sv.startKnown(cmd) != nil {
				return false
			}
			err = cmd.Wait()
			sv.forget(cmd.Process.Pid)
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
