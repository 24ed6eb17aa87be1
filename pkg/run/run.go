// Package run runs one command to completion for an agent: non-interactive,
// with a timeout that kills the whole process tree, bounded output capture
// and no hang when a descendant keeps the output pipes open.
//
// The order of events after start is fixed:
//
//  1. wait for the main process (or its report that the command is over,
//     Request.Ended), a timeout, or cancellation of ctx;
//  2. on timeout or cancellation, send the first signal to the process group,
//     then SIGKILL the group and every descendant after the grace;
//  3. once the main process is gone, give the pipe readers up to Drain to see
//     end-of-file (a background process may hold the pipes forever);
//  4. kill every remaining descendant, then close the pipes.
//
// Step 4 relies on the calling process being a child subreaper that owns no
// other children (Request.ReapAll): orphans that double-forked or called
// setsid are reparented to it and found in /proc. Without ReapAll only the
// process group and the main process's descendants are killed.
package run

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/internal/faultpoint"
	"github.com/agentplane/agentplane/pkg/capture"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
)

// Status values of a finished run.
const (
	StatusCompleted = "completed"
	StatusTimeout   = "timeout"
	StatusCancelled = "cancelled"
	StatusError     = "error"
)

// Request describes one command. Argv is what is executed; the shell, if
// any, is already part of it.
type Request struct {
	Argv []string
	// Path, when set, is the executable to run with Argv as its arguments
	// (Argv[0] is then only the name the program sees); otherwise Argv[0]
	// is looked up in the PATH of Env.
	Path      string
	Dir       string
	Env       []string // the complete environment
	Stdin     []byte   // used when StdinFile is empty; nil means /dev/null
	StdinFile string

	Timeout   time.Duration // 0: none
	KillAfter time.Duration // grace between Signal and SIGKILL
	Signal    syscall.Signal
	Drain     time.Duration // wait for pipe EOF after the main process exits

	MaxOutput int
	Keep      capture.Keep
	Merge     bool   // one pipe for stdout and stderr
	SaveDir   string // also write the whole streams there

	// Tee, when set, receives a live copy of both streams.
	Tee io.Writer
	// OnStart is called once with the main process's PID.
	OnStart func(pid int)
	// OnOutput is called with each chunk read, in order per stream
	// ("stdout", "stderr", or "output" when merged). It runs on the reader
	// goroutines; it must not block for long.
	OnOutput func(stream string, p []byte)

	// ReapAll makes the runner a child subreaper and kills every
	// descendant of this process at the end. Only a process that runs one
	// command at a time may set it (the agentsh CLI, a job supervisor).
	ReapAll bool
	// Exempt, with ReapAll, spares a descendant and everything below it
	// from the final cleanup: the detached servers (job supervisors,
	// session servers) that a command started to outlive it.
	Exempt func(proctree.Stat) bool

	// SysProcAttr is applied to the child; Setsid is always forced on.
	SysProcAttr *syscall.SysProcAttr
	// ExtraFiles are the child's descriptors 3 on (the sandbox's
	// Prepared.Launch); the runner closes them once the child started.
	ExtraFiles []*os.File
	// Ended, when set, blocks until the main process reports that the
	// command is over, its own tree gone but itself, and returns the
	// status the main process is about to exit with; ok is false when it
	// will not report (it died or failed first), and Run then waits for
	// its exit. On a report Run finishes without waiting for that exit
	// (the sandbox helper's, PID 1 of its namespaces, waits for their
	// teardown: sandbox.Prepared.Ended) and reaps the main process in the
	// background; the final cleanup accepts it, still exiting, as the one
	// member of the guard's cgroup. Not used under a keeper.
	Ended func() (exitCode int, ok bool)

	// Start, when set, starts the main process in place of an exec of
	// Path: a process already running, in the guard's cgroup, that takes
	// the environment (Env), the working directory and the three standard
	// streams it is given and starts the command (the sandbox's helper
	// started ahead: sandbox.Prepared.StartEarly). That process contains
	// its own tree (it dies with this process, and the tree with it: the
	// helper is PID 1 of its namespaces, with a parent-death signal), so
	// it starts without waiting for AwaitGuard, whose guard Run takes once
	// it has started, for the cleanup, and without the guard's token.
	// Path, Argv, SysProcAttr and ExtraFiles are not used then, nor a
	// keeper.
	Start func(env []string, dir string, stdio [3]*os.File) (*os.Process, error)

	// Guard, when set, contains the command's tree (proctree.StartGuard):
	// it is killed even when this process is SIGKILLed before it can clean
	// up, and the final cleanup asks the guard's cgroup instead of
	// scanning /proc. The caller releases the guard after Run.
	Guard *proctree.Guard
	// AwaitGuard, when Guard is nil, returns the guard once it has
	// started (proctree.StartGuardAsync): Run prepares what does not
	// depend on it (the path lookup, stdin, the pipes) while the watchdog
	// starts, then waits for it before the command starts. An error is a
	// start failure.
	AwaitGuard func() (*proctree.Guard, error)
}

// Result is what happened.
type Result struct {
	Status    string
	ExitCode  int // -1 when the command never ran
	Signal    string
	TimedOut  bool
	PID       int
	StartedAt time.Time
	Elapsed   time.Duration

	Stdout *capture.HeadTail // nil when Merge
	Stderr *capture.HeadTail // nil when Merge
	Output *capture.HeadTail // only when Merge

	StdoutFile string
	StderrFile string
	OutputFile string

	// Leftover lists descendants that could not be killed (should be empty).
	Leftover []int
	// Guard is the mode of the guard that contained the tree (cgroup or
	// environ), "" without Request.Guard.
	Guard string
}

// Run executes req. It returns an error (a *result.Error) only when the
// command could not be started; everything that happens after start is in
// the Result.
func Run(ctx context.Context, req Request) (*Result, error) {
	if len(req.Argv) == 0 {
		return nil, result.Errorf(result.CodeInvalidRequest, "no command given")
	}
	if req.ReapAll {
		if err := proctree.SetSubreaper(); err != nil {
			return nil, result.Errorf(result.CodeStartFailed, "cannot become a child subreaper: %v", err).Wrap(err)
		}
	}
	if req.Dir != "" {
		if err := CheckDir(req.Dir); err != nil {
			return nil, err
		}
	}
	path := req.Path
	if path == "" {
		var err error
		if path, err = lookPath(req.Argv[0], req.Env); err != nil {
			return nil, err
		}
	}

	r := &runner{req: req, res: &Result{ExitCode: -1}, guard: req.Guard}
	if req.Guard != nil {
		r.res.Guard = req.Guard.Mode()
	}
	return r.run(ctx, path)
}

// CheckDir reports a working directory that does not exist or is not a
// directory, as code cwd_not_found.
func CheckDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return result.Errorf(result.CodeCwdNotFound, "working directory %s does not exist", dir).Wrap(err)
	}
	if !st.IsDir() {
		return result.Errorf(result.CodeCwdNotFound, "working directory %s is not a directory", dir)
	}
	return nil
}

// lookPath resolves argv[0] against the PATH of the command's environment,
// not agentsh's, so that --env PATH=… and --clear-env behave as a shell would.
func lookPath(name string, env []string) (string, error) {
	notFound := func() error {
		return result.Errorf(result.CodeCommandNotFound, "command not found: %s", name).With("hint", "check the program name and PATH")
	}
	check := func(p string) (string, error) {
		st, err := os.Stat(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", notFound()
			}
			return "", result.Errorf(result.CodeCommandNotExecutable, "cannot run %s: %v", name, err)
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return "", result.Errorf(result.CodeCommandNotExecutable, "%s is not an executable file", p)
		}
		return p, nil
	}
	if filepath.Base(name) != name || name == "." || name == ".." {
		return check(name)
	}
	pathEnv := "/usr/local/bin:/usr/bin:/bin"
	for i := len(env) - 1; i >= 0; i-- {
		if len(env[i]) > 5 && env[i][:5] == "PATH=" {
			pathEnv = env[i][5:]
			break
		}
	}
	var firstErr error
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p, err := check(filepath.Join(dir, name))
		if err == nil {
			return p, nil
		}
		if firstErr == nil && result.AsError(err).Code == result.CodeCommandNotExecutable {
			firstErr = err
		}
	}
	if firstErr != nil {
		return "", firstErr
	}
	return "", notFound()
}

type runner struct {
	req   Request
	res   *Result
	guard *proctree.Guard // nil without Request.Guard
	// keeper, in the guard's environ mode, is the command's parent and
	// subreaper that outlives this process (proctree.Keeper).
	keeper *proctree.Keeper
	kws    syscall.WaitStatus // the command's status, as the keeper saw it
	// ended: the main process reported the command's end (Request.Ended)
	// with exit status endCode, and is exiting on its own.
	ended   bool
	endCode int

	readers sync.WaitGroup

	proc  *os.Process      // the main process, once started
	mu    sync.Mutex       // guards state, which a background reap sets
	state *os.ProcessState // its exit, once reaped
}

type stream struct {
	name string
	r    *os.File
	cap  *capture.HeadTail
	file *os.File
}

func (r *runner) run(ctx context.Context, path string) (*Result, error) {
	req := r.req
	cmd := &exec.Cmd{Path: path, Args: req.Argv, Dir: req.Dir, Env: req.Env}
	attr := &syscall.SysProcAttr{}
	if req.SysProcAttr != nil {
		a := *req.SysProcAttr
		attr = &a
	}
	// A new session: no controlling terminal, and a process group of its
	// own whose id is the child's pid.
	attr.Setsid = true
	attr.Setpgid = false
	cmd.SysProcAttr = attr
	cmd.ExtraFiles = req.ExtraFiles
	defer func() {
		for _, f := range req.ExtraFiles {
			f.Close()
		}
	}()

	stdin, err := r.openStdin()
	if err != nil {
		return nil, err
	}
	cmd.Stdin = stdin

	streams, err := r.openStreams(cmd)
	if err != nil {
		return nil, err
	}
	unopen := func() {
		for _, s := range streams {
			s.r.Close()
		}
		closeChildEnds(cmd)
	}

	// The rest needs the guard, which may still be starting; a main
	// process that contains its own tree (Start) does not wait for it.
	if r.guard == nil && req.AwaitGuard != nil && req.Start == nil {
		g, err := req.AwaitGuard()
		if err != nil {
			unopen()
			return nil, result.Errorf(result.CodeStartFailed, "cannot start the watchdog: %v", err).Wrap(err)
		}
		r.guard, r.res.Guard = g, g.Mode()
	}
	if r.guard != nil {
		r.guard.Apply(attr)
		cmd.Env = r.guard.Env(cmd.Env)
	}
	if r.guard != nil && req.ReapAll && req.Start == nil {
		// Without a cgroup, the guard holds the tree through a keeper
		// between this process and the command (nil where it has none).
		k, err := r.guard.Keep(cmd)
		if err != nil {
			unopen()
			return nil, result.Errorf(result.CodeStartFailed, "cannot prepare the keeper: %v", err).Wrap(err)
		}
		r.keeper = k
	}

	r.res.StartedAt = time.Now()
	if req.Start != nil {
		stdout, _ := cmd.Stdout.(*os.File)
		stderr, _ := cmd.Stderr.(*os.File)
		r.proc, err = req.Start(cmd.Env, cmd.Dir, [3]*os.File{stdin, stdout, stderr})
	} else if err = cmd.Start(); err == nil {
		r.proc = cmd.Process
	}
	if err == nil && r.guard == nil && req.AwaitGuard != nil {
		// Started: now the guard, for the cleanup (its cgroup, which the
		// process went into at its start). One that failed leaves the
		// tree to the process's own containment.
		if g, err := req.AwaitGuard(); err == nil {
			r.guard, r.res.Guard = g, g.Mode()
		}
	}
	var kept proctree.ID
	if err == nil && r.keeper != nil {
		kept, err = r.keeper.Started()
		if errors.Is(err, proctree.ErrKeeperLost) {
			// It may have forked the command first (a command that
			// kills its parent at once, or the keeper killed by anyone):
			// what runs is this process's now, a subreaper, and nothing
			// else would kill it.
			proctree.KillAllDescendantsExcept(5*time.Second, r.exempt())
		}
	}
	if err != nil {
		unopen()
		return nil, startError(req.Argv[0], err)
	}
	// The child has its copies; ours must go or EOF never comes.
	closeChildEnds(cmd)
	pid := r.proc.Pid
	if r.keeper != nil {
		pid = kept.PID
	}
	r.res.PID = pid
	if r.guard != nil && r.guard.Mode() != proctree.GuardCgroup {
		// environ mode kills the command's Unix session too. The child
		// is not reaped before Wait, so its stat is still its own.
		if r.keeper != nil {
			r.guard.Watch(kept)
		} else if id, err := proctree.Identify(pid); err == nil {
			r.guard.Watch(id)
		}
	}
	if req.OnStart != nil {
		req.OnStart(pid)
	}

	done := make(chan struct{})
	for _, s := range streams {
		r.readers.Add(1)
		go r.pump(s)
	}
	go func() {
		r.readers.Wait()
		close(done)
	}()

	// The command is waited for in two steps: its exit (it stays a zombie,
	// so its pid, and the group and session it leads, cannot be recycled),
	// then, once what it left behind is killed, its reap. A kill of the
	// group after the reap could reach a stranger that got the pid since.
	waited := make(chan error, 1)
	if r.keeper != nil {
		// The keeper waits the same way: the command stays its zombie
		// until Kill.
		go func() { waited <- r.waitKept() }()
	} else {
		go func() { waited <- proctree.WaitChild(pid) }()
	}

	// The report, when the main process makes one, comes before its exit.
	ended := make(chan int, 1)
	if req.Ended != nil && r.keeper == nil {
		go func() {
			if code, ok := req.Ended(); ok {
				ended <- code
			}
		}()
	}

	var timer <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timer = t.C
	}

	select {
	case <-waited:
	case r.endCode = <-ended:
		r.ended = true
	case <-timer:
		r.res.Status = StatusTimeout
		r.res.TimedOut = true
		_ = r.terminate(pid, waited)
	case <-ctx.Done():
		r.res.Status = StatusCancelled
		_ = r.terminate(pid, waited)
	}
	r.res.Elapsed = time.Since(r.res.StartedAt)

	// Drain: a background descendant may hold the pipes open forever.
	if req.Drain > 0 {
		t := time.NewTimer(req.Drain)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	// The group first, while the zombie holds its id; then the reap; then
	// whatever left the group. Under a keeper, the zombie is the
	// keeper's: its Kill does the three in the same order.
	if k := r.keeper; k != nil {
		r.res.Leftover = k.Kill(5 * time.Second)
		k.Release()
	} else if r.ended {
		// The main process reported that its tree is gone: its group
		// holds nothing but itself, still exiting. It is reaped once it
		// is done (or by ReapChildren, or, should this process exit
		// first, by whoever inherits it); nothing signals its pid.
		go func() { _ = r.reap() }()
	} else {
		_ = proctree.SignalGroup(pid, syscall.SIGKILL)
		_ = r.reap()
	}
	faultpoint.Hit("run.reaped")
	r.setExit()
	r.killRest()
	// Anything killed above released its pipe ends; wait briefly for the
	// readers to collect what it wrote, then force them off the pipes.
	t := time.NewTimer(100 * time.Millisecond)
	select {
	case <-done:
	case <-t.C:
		for _, s := range streams {
			s.r.Close()
		}
		<-done
	}
	t.Stop()
	for _, s := range streams {
		s.r.Close()
		if s.file != nil {
			s.file.Close()
		}
	}
	return r.res, nil
}

// closeChildEnds closes this process's copies of the child's stdio.
func closeChildEnds(cmd *exec.Cmd) {
	if f, ok := cmd.Stdout.(*os.File); ok {
		f.Close()
	}
	if f, ok := cmd.Stderr.(*os.File); ok && cmd.Stderr != cmd.Stdout {
		f.Close()
	}
	if f, ok := cmd.Stdin.(*os.File); ok {
		f.Close()
	}
}

// terminate is proctree's kill sequence on the command: the first signal
// to its group and its descendants, the grace, SIGKILL to the rest.
func (r *runner) terminate(pid int, waited <-chan error) error {
	var err error
	exited := make(chan struct{})
	go func() { err = <-waited; close(exited) }()
	tree := proctree.Tree{Group: pid, Root: pid}
	proctree.Terminate(context.Background(), tree, r.req.Signal, r.req.KillAfter, exited)
	<-exited
	return err
}

// waitKept waits for the command through its keeper. A keeper that dies
// first (the command, or anyone, killed it) has left the tree to this
// process, a subreaper: it is killed at once, as the keeper would have,
// since nothing else would kill it should this process die too.
func (r *runner) waitKept() error {
	ws, err := r.keeper.Wait()
	if errors.Is(err, proctree.ErrKeeperLost) {
		proctree.KillAllDescendantsExcept(5*time.Second, r.exempt())
		ws = syscall.WaitStatus(syscall.SIGKILL)
	}
	r.kws = ws
	return err
}

// exempt is what the final cleanup spares: the guard's watchdog and the
// detached servers (Request.Exempt).
func (r *runner) exempt() func(proctree.Stat) bool {
	g := r.guard
	if g == nil {
		return r.req.Exempt
	}
	return func(s proctree.Stat) bool {
		return g.IsWatchdog(s) || (r.req.Exempt != nil && r.req.Exempt(s))
	}
}

// endedMain spares the main process once it reported the command's end
// (Request.Ended): what it leaves is its own exit, its tree being gone.
func (r *runner) endedMain(exempt func(proctree.Stat) bool) func(proctree.Stat) bool {
	if !r.ended {
		return exempt
	}
	return func(s proctree.Stat) bool {
		return s.PID == r.res.PID || (exempt != nil && exempt(s))
	}
}

// killRest kills whatever the command left behind outside its group.
func (r *runner) killRest() {
	if g := r.guard; g != nil && g.Mode() == proctree.GuardCgroup {
		// Every descendant of the command is in the guard's cgroup but
		// the detached servers, which left it (proctree.Detach): an
		// empty cgroup is the whole answer, without a scan of /proc.
		// A main process that reported the command's end may still be
		// there, exiting.
		if !g.Empty() && !(r.ended && g.EmptyBut(r.res.PID)) && !g.Kill(5*time.Second) {
			r.res.Leftover = g.Members()
		}
		// The dead that were reparented to us must not linger as
		// zombies in /proc after we return.
		if r.req.ReapAll {
			proctree.ReapChildren()
		}
		return
	}
	if r.req.ReapAll {
		r.res.Leftover = append(r.res.Leftover, proctree.KillAllDescendantsExcept(5*time.Second, r.endedMain(r.exempt()))...)
	}
}

// reap waits for the main process's exit and keeps its status.
func (r *runner) reap() error {
	st, err := r.proc.Wait()
	if err == nil {
		r.mu.Lock()
		r.state = st
		r.mu.Unlock()
	}
	return err
}

func (r *runner) setExit() {
	if r.res.Status == "" {
		r.res.Status = StatusCompleted
	}
	if r.ended {
		r.res.ExitCode = r.endCode
		return
	}
	ws := r.kws
	if r.keeper == nil {
		r.mu.Lock()
		st := r.state
		r.mu.Unlock()
		if st == nil {
			return
		}
		var ok bool
		if ws, ok = st.Sys().(syscall.WaitStatus); !ok {
			r.res.ExitCode = st.ExitCode()
			return
		}
	}
	switch {
	case ws.Exited():
		r.res.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		r.res.Signal = proctree.SignalName(ws.Signal())
		r.res.ExitCode = 128 + int(ws.Signal())
	}
}

func (r *runner) openStdin() (*os.File, error) {
	switch {
	case r.req.StdinFile != "":
		f, err := os.Open(r.req.StdinFile)
		if err != nil {
			return nil, result.Errorf(result.CodeStdinFile, "cannot open stdin file %s: %v", r.req.StdinFile, unwrapPathErr(err)).Wrap(err)
		}
		// A directory opens fine and reads as an error the command would
		// take for end of input: refuse it here, where the caller sees why.
		if st, err := f.Stat(); err == nil && st.IsDir() {
			f.Close()
			return nil, result.Errorf(result.CodeStdinFile, "cannot use stdin file %s: it is a directory", r.req.StdinFile)
		}
		return f, nil
	case r.req.Stdin != nil:
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, result.Errorf(result.CodeStartFailed, "pipe: %v", err)
		}
		data := r.req.Stdin
		go func() {
			// A command that does not read all of its input gets EPIPE
			// here, which is not an error of the run.
			_, _ = pw.Write(data)
			pw.Close()
		}()
		return pr, nil
	default:
		f, err := os.Open(os.DevNull)
		if err != nil {
			return nil, result.Errorf(result.CodeStartFailed, "open %s: %v", os.DevNull, err)
		}
		return f, nil
	}
}

func (r *runner) openStreams(cmd *exec.Cmd) ([]*stream, error) {
	names := []string{"stdout", "stderr"}
	if r.req.Merge {
		names = []string{"output"}
	}
	var streams []*stream
	for _, name := range names {
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, result.Errorf(result.CodeStartFailed, "pipe: %v", err)
		}
		s := &stream{name: name, r: pr, cap: capture.NewHeadTail(r.req.MaxOutput, r.req.Keep)}
		if r.req.SaveDir != "" {
			f, err := createSaveFile(r.req.SaveDir, name)
			if err != nil {
				pr.Close()
				pw.Close()
				return nil, err
			}
			s.file = f
			switch name {
			case "stdout":
				r.res.StdoutFile = f.Name()
			case "stderr":
				r.res.StderrFile = f.Name()
			default:
				r.res.OutputFile = f.Name()
			}
		}
		switch name {
		case "stdout":
			cmd.Stdout = pw
			r.res.Stdout = s.cap
		case "stderr":
			cmd.Stderr = pw
			r.res.Stderr = s.cap
		default:
			cmd.Stdout = pw
			cmd.Stderr = pw
			r.res.Output = s.cap
		}
		streams = append(streams, s)
	}
	return streams, nil
}

func createSaveFile(dir, stream string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, result.Errorf(result.CodeSaveOutput, "cannot create %s: %v", dir, unwrapPathErr(err)).Wrap(err)
	}
	prefix := "agentsh-" + time.Now().UTC().Format("20060102T150405") + "-" + strconv.Itoa(os.Getpid()) + "-*." + stream
	f, err := os.CreateTemp(dir, prefix)
	if err != nil {
		return nil, result.Errorf(result.CodeSaveOutput, "cannot create an output file in %s: %v", dir, unwrapPathErr(err)).Wrap(err)
	}
	abs, err := filepath.Abs(f.Name())
	if err == nil && abs != f.Name() {
		// Report an absolute path: the caller's cwd may differ from ours.
		f.Close()
		if f, err = os.OpenFile(abs, os.O_WRONLY, 0); err != nil {
			return nil, result.Errorf(result.CodeSaveOutput, "reopen %s: %v", abs, err)
		}
	}
	return f, nil
}

// pump copies one pipe into its capture and the optional sinks. It owns
// the read loop so that nothing can bypass the capture's bound (no
// io.Copy/ReadFrom fast paths into a growing buffer).
func (r *runner) pump(s *stream) {
	defer r.readers.Done()
	buf := make([]byte, 256<<10)
	for {
		n, err := s.r.Read(buf)
		if n > 0 {
			p := buf[:n]
			s.cap.Write(p)
			if s.file != nil {
				if _, werr := s.file.Write(p); werr != nil {
					s.file.Close()
					s.file = nil
				}
			}
			if r.req.Tee != nil {
				_, _ = r.req.Tee.Write(p)
			}
			if r.req.OnOutput != nil {
				r.req.OnOutput(s.name, p)
			}
		}
		if err != nil {
			return
		}
	}
}

func startError(name string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return result.Errorf(result.CodeCommandNotFound, "command not found: %s", name).Wrap(err)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOEXEC):
		return result.Errorf(result.CodeCommandNotExecutable, "cannot run %s: %v", name, err).Wrap(err)
	}
	return result.Errorf(result.CodeStartFailed, "cannot start %s: %v", name, err).Wrap(err)
}

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
