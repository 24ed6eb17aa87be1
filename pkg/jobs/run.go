package jobs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/internal/faultpoint"
	"github.com/agentplane/agentplane/pkg/audit"
	"github.com/agentplane/agentplane/pkg/execguard"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox"
	"github.com/agentplane/agentplane/pkg/state"
	"golang.org/x/sys/unix"
)

// jobRun is one run of the job: its process, the pipes of its output and the
// goroutines that wait for and copy them.
type jobRun struct {
	cmd        *exec.Cmd
	pid        int
	exited     chan struct{} // closed once the main process exited (a zombie, not yet reaped)
	reaped     bool          // cmd.Wait returned: the pid, and the group it names, are free
	copied     chan struct{} // closed once both streams hit EOF
	outR, errR *os.File
	gate       *os.File // the write end of the job's gate; nil once opened
	guard      *execguard.Guard

	logRE     *regexp.Regexp // the --ready-log pattern, or nil
	readyCh   chan struct{}  // closed by markReady
	markReady func()

	stopProbes context.CancelFunc
	probes     sync.WaitGroup
}

// runOnce starts the job once and supervises it until it ends and its whole
// process tree is gone. An error means it could not be started.
func (sv *supervisor) runOnce(ctx context.Context, first bool, outSink, errSink *logSink,
	sigs, chld chan os.Signal, deadline <-chan time.Time) (runResult, error) {
	cmd, jc, err := sv.command()
	if err != nil {
		return runResult{}, err
	}
	defer jc.close()
	r, err := sv.startJob(cmd, jc, outSink, errSink)
	if err != nil {
		return runResult{}, err
	}
	if err := sv.recordRunning(r, first); err != nil {
		r.terminate(syscall.SIGKILL, 0)
		sv.drain(r)
		return runResult{}, err
	}
	sv.startProbes(ctx, r)
	res := sv.supervise(r, sigs, chld, deadline)
	r.finishProbes()
	sv.drain(r)
	return sv.outcome(r, res)
}

// jobCmd is what a run's command comes with: the runtime guard of a
// policed job, and the control socket to the sandbox helper of a
// sandboxed job with a probe (see ready_sandbox.go).
type jobCmd struct {
	guard   *execguard.Guard
	ctl     *sandbox.Control
	started func() // called once the command has started
}

func (jc *jobCmd) close() {
	jc.started()
	if jc.ctl != nil {
		jc.ctl.Close()
	}
	if jc.guard != nil {
		jc.guard.Cleanup()
	}
}

// command builds the job's command: its argv in its cwd with its
// environment, wrapped in the sandbox helper when the job is confined and
// in the runtime guard when it is policed (the guard is returned), in a
// process group of its own.
func (sv *supervisor) command() (*exec.Cmd, *jobCmd, error) {
	if fi, err := os.Stat(sv.spec.Cwd); err != nil || !fi.IsDir() {
		return nil, nil, &codedError{result.CodeCwdNotFound, fmt.Errorf("working directory %s does not exist", sv.spec.Cwd)}
	}
	argv, err := sv.execArgv()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = sv.spec.Cwd, sv.spec.Env
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = proctree.WithoutTokens(cmd.Env) // the job outlives its starter's guard
	// The mark by which the job's processes are found should this
	// supervisor die (see remains).
	self := proctree.ID{PID: sv.rec.SupervisorPID, Start: sv.rec.SupervisorStart}
	cmd.Env = append(slices.Clone(cmd.Env), sessionMark(self))
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	jc := &jobCmd{started: func() {}}
	if sv.sandbox != nil {
		// A program that does not exist must still fail the start, not
		// become a job whose helper exits 127.
		if cmd.Err != nil {
			return nil, nil, startError(&sv.spec, cmd.Err)
		}
		exe, err := os.Executable()
		if err != nil {
			return nil, nil, err
		}
		ctl, started, err := sv.sandboxProbe(cmd)
		if err != nil {
			return nil, nil, err
		}
		sv.ctl, jc.ctl, jc.started = ctl, ctl, started
		w := sv.sandbox.Wrap(exe, "agentjob", argv, cmd.Env)
		cmd.Path, cmd.Args, cmd.Env, cmd.SysProcAttr = w.Path, w.Argv, w.Env, w.SysProcAttr
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
	}
	g, err := sv.guard(cmd, sv.sandbox != nil)
	if err != nil {
		jc.close()
		return nil, nil, err
	}
	jc.guard = g
	// Its own group, but the supervisor's session: see remains.
	cmd.SysProcAttr.Setpgid = true
	if sv.cg != nil {
		sv.cg.Apply(cmd.SysProcAttr)
	}
	if sv.sandbox == nil && g == nil {
		if cmd, err = gated(&sv.spec, cmd); err != nil {
			jc.close()
			return nil, nil, err
		}
	}
	return cmd, jc, nil
}

// gateScript is the gate through which a job starts: it waits for a line
// on fd 3 (the supervisor writes it once status.json names the job's pid)
// and only then executes the job, without fd 3. Should the supervisor die
// before, the read meets EOF and the job never runs: nothing of it exists
// that no record names. (A sandboxed job starts through the sandbox
// helper, and a policed one through the runtime guard, instead: both are
// this program, whose argv[0] must stay its own; see remains for what
// finds their processes.)
const gateScript = `IFS= read -r _ <&3 || exit 125; exec 3<&-; exec "$@"`

// gatedShell is the shell of the gate: POSIX sh, small and fast to start.
const gatedShell = "/bin/sh"

// gated wraps cmd in the gate. What the gate's exec would fail at later,
// a program that is missing or not executable, is checked first, so that
// it still fails the start rather than becoming a job that exits 127.
func gated(spec *Spec, cmd *exec.Cmd) (*exec.Cmd, error) {
	if cmd.Err != nil {
		return nil, startError(spec, cmd.Err)
	}
	path := cmd.Path
	if !filepath.IsAbs(path) {
		path = filepath.Join(cmd.Dir, path)
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, startError(spec, err)
	case fi.IsDir() || unix.Access(path, unix.X_OK) != nil:
		return nil, startError(spec, fs.ErrPermission)
	}
	args := append([]string{"sh", "-c", gateScript, "agentjob"}, cmd.Path)
	cmd.Path, cmd.Args = gatedShell, append(args, cmd.Args[1:]...)
	return cmd, nil
}

// startJob starts cmd with its output piped to the sinks, and the
// goroutines that wait for it and copy its output.
func (sv *supervisor) startJob(cmd *exec.Cmd, jc *jobCmd, outSink, errSink *logSink) (*jobRun, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, outW, errW
	var gateR, gateW *os.File
	if cmd.Path == gatedShell && len(cmd.Args) > 2 && cmd.Args[2] == gateScript {
		if gateR, gateW, err = os.Pipe(); err != nil {
			outR.Close()
			outW.Close()
			errR.Close()
			errW.Close()
			return nil, err
		}
		cmd.ExtraFiles = []*os.File{gateR}
	}
	launched := func() {}
	if sv.sandbox != nil {
		// Each run hands over the proxy listener of its own namespace,
		// after the readiness control socket if the probe has one.
		files, started, err := sv.sandbox.Launch()
		if err != nil {
			outR.Close()
			outW.Close()
			errR.Close()
			errW.Close()
			return nil, err
		}
		launched = started
		cmd.ExtraFiles = append(cmd.ExtraFiles, files...)
	}
	if jc.guard != nil {
		// Last: the guard passes the files above on at their numbers
		// and adds its report pipe after them.
		cmd.Path, cmd.Args, cmd.ExtraFiles = jc.guard.Wrap(cmd.Path, cmd.Args, cmd.ExtraFiles)
	}
	err = sv.startKnown(cmd)
	if jc.guard != nil {
		jc.guard.Launched()
	}
	launched()
	jc.started()
	jc.started = func() {}
	outW.Close()
	errW.Close()
	if gateR != nil {
		gateR.Close()
	}
	if err != nil {
		outR.Close()
		errR.Close()
		if gateW != nil {
			gateW.Close()
		}
		return nil, startError(&sv.spec, err)
	}
	faultpoint.Hit("supervisor.forked")
	r := &jobRun{cmd: cmd, pid: cmd.Process.Pid, exited: make(chan struct{}), copied: make(chan struct{}),
		outR: outR, errR: errR, gate: gateW, guard: jc.guard, readyCh: make(chan struct{})}
	// The main process is waited for in two steps, as agentsh waits for
	// its command: its exit (it stays a zombie, so its pid, and the group
	// and session it leads, cannot be handed to another process), then,
	// once its group is killed, its reap (reap). A signal to the group
	// after the reap could reach a stranger that got the pid since.
	go func() {
		_ = proctree.WaitChild(r.pid) // an error: the reap tells
		close(r.exited)
	}()
	var readyOnce sync.Once
	r.markReady = func() { readyOnce.Do(func() { close(r.readyCh) }) }
	if sv.spec.Ready.Log != "" {
		r.logRE = regexp.MustCompile(sv.spec.Ready.Log) // validated by Start
	}
	var copiers sync.WaitGroup
	copiers.Go(func() { copyLog(outR, outSink, r.logRE, r.markReady) })
	copiers.Go(func() { copyLog(errR, errSink, r.logRE, r.markReady) })
	go func() { copiers.Wait(); close(r.copied) }()
	return r, nil
}

// recordRunning records the run in status.json, confirms the start to
// Start's caller and appends the started (or restarted) event. A first
// start whose record cannot be written is an error: Start's caller would
// have no job to hand over.
func (sv *supervisor) recordRunning(r *jobRun, first bool) error {
	st, _ := proctree.ReadStat(r.pid)
	sv.rec.Status, sv.rec.Ready = StatusRunning, false
	sv.rec.PID, sv.rec.PIDStart = r.pid, st.StartTime
	sv.rec.StartedAt, sv.rec.EndedAt = state.FormatTime(time.Now()), ""
	sv.rec.ExitCode, sv.rec.Signal, sv.rec.Reason, sv.rec.Denied = nil, "", "", nil
	if err := sv.reserveSpace(); err != nil && sv.hs != nil {
		// Without room to record its end, a job could end as lost.
		r.closeGate(false)
		return err
	}
	if err := sv.save(); err != nil && sv.hs != nil {
		r.closeGate(false)
		return err
	}
	faultpoint.Hit("supervisor.recorded")
	// The record names the job: let it run.
	r.closeGate(true)
	// Confirm before appending the event: the caller of Start waits only
	// for the record, and the event's fsync need not delay it.
	sv.answer(nil)
	faultpoint.Hit("supervisor.confirmed")
	switch {
	case sv.retrying: // the same start, tried again: its event is out already
	case first && sv.rec.Run == 1:
		sv.event("started")
	default:
		sv.event("restarted")
	}
	return nil
}

// startProbes starts the readiness probe of the job, if it has one that is
// not a log pattern (copyLog runs those).
func (sv *supervisor) startProbes(ctx context.Context, r *jobRun) {
	pctx, stop := context.WithCancel(ctx)
	r.stopProbes = stop
	if sv.spec.Ready.Set() && r.logRE == nil {
		r.probes.Go(func() { sv.probe(pctx, r.markReady) })
	}
}

// closeGate lets the gated job run (open) or makes it exit unrun.
func (r *jobRun) closeGate(open bool) {
	if r.gate == nil {
		return
	}
	if open {
		_, _ = r.gate.Write([]byte("\n"))
	}
	_ = r.gate.Close()
	r.gate = nil
}

func (r *jobRun) finishProbes() {
	r.stopProbes()
	r.probes.Wait()
}

// supervise waits for the run's main process to exit, meanwhile recording
// readiness and enforcing the ready timeout, the job's timeout and stop
// requests, and reaping adopted orphans.
func (sv *supervisor) supervise(r *jobRun, sigs, chld chan os.Signal, deadline <-chan time.Time) runResult {
	var readyTimeout <-chan time.Time
	if sv.spec.Ready.Set() {
		rt := time.NewTimer(sv.spec.Ready.Timeout)
		defer rt.Stop()
		readyTimeout = rt.C
	}
	readyCh := r.readyCh
	res := runResult{}
	for {
		select {
		case <-r.exited:
			return res
		case <-readyCh:
			readyCh, readyTimeout = nil, nil
			sv.rec.Status, sv.rec.Ready = StatusReady, true
			_ = sv.save()
			sv.event(StatusReady)
		case <-readyTimeout:
			res.status, res.reason = StatusFailed, "ready_timeout"
			r.terminate(syscall.SIGTERM, sv.spec.KillGrace)
		case <-deadline:
			res.status = StatusTimeout
			r.terminate(syscall.SIGTERM, sv.spec.KillGrace)
		case s := <-sigs:
			if s == syscall.SIGHUP {
				continue // no terminal to lose; stay up
			}
			req, reason := sv.stopRequest()
			res.status, res.reason = StatusStopped, reason
			r.terminate(syscall.Signal(req.Signal), time.Duration(req.GraceMS)*time.Millisecond)
		case <-chld:
			sv.reapOrphans()
		case <-sv.replaced:
			if sv.sandbox.Stale() == "" {
				continue // of a run before this one, whose start covered it
			}
			// A file the run's sandbox protects is a new one at its path,
			// which no mount of the running sandbox covers: nothing in it
			// may go on to write there (a .git/config the host's next git
			// reads). The next start covers the new file.
			res.status, res.reason = StatusFailed, ReasonSandboxRefreshed
			r.terminate(syscall.SIGKILL, 0)
		}
		if res.status != "" {
			<-r.exited
			return res
		}
	}
}

// stopRequest reads the request that came with a SIGTERM: stop.json as
// Stop wrote it, or when there is none (Stop could not write on a full or
// read-only state directory) SIGTERM with the default grace. A slurm job's
// SIGTERM without a request is the scheduler's.
func (sv *supervisor) stopRequest() (stopRequest, string) {
	req := stopRequest{Signal: int(syscall.SIGTERM), GraceMS: DefaultKillGrace.Milliseconds()}
	reason := ""
	if state.ReadJSON(filepath.Join(sv.dir, stopFile), &req) != nil && sv.slurmJobID != "" {
		reason = ReasonSchedulerSignal
	}
	if req.Signal <= 0 || req.Signal >= 65 {
		req.Signal = int(syscall.SIGTERM)
	}
	return req, reason
}

// terminate is proctree's kill sequence on the run: sig to the job's
// group and every descendant of the supervisor (those that left the group
// (setsid) are still below the supervisor, a subreaper), then SIGKILL
// after grace unless the main process exited first. It runs before the
// reap, so the group it signals is still the job's.
func (r *jobRun) terminate(sig syscall.Signal, grace time.Duration) {
	tree := proctree.Tree{Group: r.pid, Root: os.Getpid()}
	proctree.TerminateStep(context.Background(), tree, sig, grace, r.exited,
		func() { faultpoint.Hit("supervisor.stop.signalled") })
}

// reap kills the job's group while the main process, a zombie, still
// holds its id, and only then reaps it: after the reap the pid is free,
// and nothing here signals the group again.
func (sv *supervisor) reap(r *jobRun) {
	if r.reaped {
		return
	}
	<-r.exited
	_ = proctree.SignalGroup(r.pid, syscall.SIGKILL)
	_ = r.cmd.Wait() // the outcome is read from cmd.ProcessState
	r.reaped = true
	sv.forget(r.pid)
	faultpoint.Hit("supervisor.reaped")
}

// drain runs once the main process has exited: it gives output still in
// flight a moment, then kills the job's group and reaps the main process
// (reap), then everything else the job left behind, so no process and no
// pipe writer outlives the run.
func (sv *supervisor) drain(r *jobRun) {
	dt := time.NewTimer(drainTime)
	select {
	case <-r.copied:
	case <-dt.C:
	}
	dt.Stop()
	sv.reap(r)
	proctree.KillAllDescendants(killWait)
	if sv.cg != nil {
		// A member no scan of our descendants found is killed now, and
		// its zombie is ours to reap if it was reparented to us.
		sv.cg.Kill(killWait)
		proctree.ReapChildren()
	}
	// Every writer of the job is dead now: what is left in the pipes is
	// finite and already written, so it gets as long as a loaded machine
	// needs to be copied (not drainTime, which would drop it).
	ct := time.NewTimer(killWait)
	select {
	case <-r.copied:
	case <-ct.C:
		// A writer escaped (it was never our descendant): stop reading.
		r.outR.Close()
		r.errR.Close()
		<-r.copied
	}
	ct.Stop()
	r.outR.Close()
	r.errR.Close()
}

// outcome completes res, what supervise saw, with how the main process
// ended and what the runtime guard refused.
func (sv *supervisor) outcome(r *jobRun, res runResult) (runResult, error) {
	if r.cmd.ProcessState == nil {
		// Waiting failed, so the exit status is unknown: say so rather
		// than report a success.
		if res.status == "" {
			res.status, res.reason = StatusFailed, "exit_status_unknown"
		}
		return res, nil
	}
	if r.guard != nil {
		rep := r.guard.Report()
		if rep.Error != nil {
			return runResult{}, &codedError{rep.Error.Code, errors.New(rep.Error.Message)}
		}
		sv.auditRuntime(rep)
		if rep.Killed != nil {
			// The guard killed a program the policy refused, and the
			// run with it.
			res.status, res.reason, res.denied = StatusFailed, result.AsError(rep.Err()).Code, rep.Killed
		}
	}
	ws, _ := r.cmd.ProcessState.Sys().(syscall.WaitStatus)
	code, sig := ws.ExitStatus(), ""
	if ws.Signaled() {
		sig = proctree.SignalName(ws.Signal())
	}
	if sv.sandbox != nil {
		// A helper that could not set the sandbox up started nothing: the
		// run failed to start (its exit status, 125, is the helper's).
		if err := sv.sandbox.Failure(); err != nil {
			return runResult{}, err
		}
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
	if sv.sandbox != nil {
		sv.auditGit(sv.sandbox.EndReport(), res)
	}
	return res, nil
}

// auditGit records in the environment's audit log the git metadata one
// run of the job planted that the user's git will follow (the sandbox
// report's git.planted), when there is any: a job's status has no sandbox
// report to carry it.
func (sv *supervisor) auditGit(rep map[string]any, res runResult) {
	g, _ := rep["git"].(map[string]any)
	if g == nil || g["planted"] == nil {
		return
	}
	var command any = sv.spec.Argv
	if sv.spec.Shell != "" {
		command = sv.spec.Shell
	}
	rec := audit.Record{Program: "agentjob", Operation: "run", Command: command, Cwd: sv.spec.Cwd,
		Description: sv.spec.Description, Handle: sv.d.Mint("job", sv.id), Status: res.status,
		ExitCode: res.exitCode, Sandbox: rep}
	_ = (&audit.Log{Path: sv.d.Join(audit.FileName)}).Append(rec)
}

// guard prepares the runtime guard of the job's policy, when it has one,
// for cmd; startJob then makes cmd run this program as the guard, which
// runs and polices what cmd was. sandboxed says cmd starts the sandbox
// helper.
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
	// startJob wraps cmd in it once its extra files are known.
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
