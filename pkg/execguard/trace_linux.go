//go:build linux

package execguard

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/internal/faultpoint"
	"github.com/agentplane/agentplane/pkg/policy"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox/confine"
)

// Available reports whether runtime enforcement can work on this platform
// (policy_unavailable when it cannot).
func Available() error { return nil }

// traceOptions follow the whole tree and kill it if the guard dies.
const traceOptions = unix.PTRACE_O_TRACEEXEC | unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK |
	unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_EXITKILL

// Main is the guard: args are what follows Command on the command line,
// DIR FD PATH -- ARGV..., where FD is the guard's first own descriptor (the
// report pipe; in session mode the control pipes follow) and 3 to FD-1 are
// the command's, passed on at the same numbers. It returns the command's
// exit status (or dies of the command's signal), after writing its report.
func Main(args []string) int {
	// Every ptrace request must come from the thread that attached, and
	// the child started with Ptrace set is attached to this thread.
	runtime.LockOSThread()
	if len(args) < 5 || args[3] != "--" {
		fmt.Fprintln(os.Stderr, "usage: "+Command+" DIR FD PATH -- PROGRAM [ARG...]")
		return exitRefused
	}
	dir, path, argv := args[0], args[2], args[4:]
	first, err := strconv.Atoi(args[1])
	if err != nil || first < 3 {
		fmt.Fprintln(os.Stderr, Command+": bad descriptor "+args[1])
		return exitRefused
	}
	// Nothing but the command's own descriptors goes on to it: the
	// guard's pipes (and anything else inherited) close at exec.
	closeOnExecFrom(3)
	out := &reportWriter{f: os.NewFile(uintptr(first), "guard-reports")}
	rep := &Report{Enforced: EnforceRuntime, Approved: []Exec{}}
	fail := func(code, format string, a ...any) int {
		rep.Error = &Failure{Code: code, Message: fmt.Sprintf(format, a...)}
		out.sendEnd(rep)
		return exitRefused
	}
	sp, err := readSpec(dir)
	if err != nil {
		return fail(result.CodePolicyUnavailable, "the guard cannot read its spec: %v", err)
	}
	files := []uintptr{0, 1, 2}
	for fd := 3; fd < first; fd++ {
		files = append(files, uintptr(fd))
	}
	t := &tracer{
		pol:     &policy.Policy{Rules: sp.Rules, Default: sp.Default},
		sp:      sp,
		rep:     rep,
		out:     out,
		files:   files,
		self:    os.Getpid(),
		byFile:  map[fileID]string{},
		tracees: map[int]bool{},

		refusedPIDs: map[int]bool{},
		argvs:       map[int][]string{},
		born:        map[int]bool{},
	}
	if faultpoint.Late("execguard.fork") {
		t.lateForks = map[int]int{}
	}
	if path == "" {
		if path, err = exec.LookPath(argv[0]); err != nil {
			if errors.Is(err, exec.ErrNotFound) {
				return fail(result.CodeCommandNotFound, "command not found: %s", argv[0])
			}
			return fail(result.CodeCommandNotExecutable, "command cannot be executed: %s: %v", argv[0], err)
		}
	}
	if sp.Session {
		t.session = &sessionState{reports: map[int]*Report{}, out: out,
			ctl: os.NewFile(uintptr(first+1), "guard-control"), ack: os.NewFile(uintptr(first+2), "guard-answers")}
	}
	// Nothing the command runs may open the guard's descriptors or read
	// its memory through /proc (same user, no root).
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	t.learnPrograms()
	// Termination signals reach the whole process group, the command
	// included; the guard stays until the command is gone (and if it is
	// killed itself, EXITKILL takes the command with it). Every signal is
	// taken, none acted on: as PID 1 of a sandbox's PID namespace the
	// guard gets from inside only the signals it handles, and a signal
	// the Go runtime treats as fatal (SIGABRT, SIGSYS, SIGTRAP, SIGILL
	// sent with kill) would otherwise end it, report unwritten.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs)
	go func() {
		for range sigs {
		}
	}()
	ws, code := t.run(path, argv)
	out.sendEnd(rep)
	if code >= 0 {
		return code
	}
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		dieBy(ws.Signal())
		return 128 + int(ws.Signal())
	}
	return exitRefused
}

// closeOnExecFrom marks every descriptor from first on close-on-exec.
func closeOnExecFrom(first int) {
	err := unix.CloseRange(uint(first), ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return
	}
	entries, _ := os.ReadDir("/proc/self/fd")
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= first {
			unix.CloseOnExec(fd)
		}
	}
}

// fileID identifies an executable file.
type fileID struct{ dev, ino uint64 }

type tracer struct {
	pol  *policy.Policy
	sp   spec
	rep  *Report
	self int
	main int
	// byFile maps the files of the programs the rules name to that name,
	// so a hard link or a renamed copy is decided as the program it is.
	byFile map[fileID]string
	bySize map[int64][]program
	// session is set in session mode: the policy changes with each call.
	session *sessionState
	// out is the report pipe; files the descriptors the command gets.
	out   *reportWriter
	files []uintptr
	// tracees are the processes and threads traced, the main one aside.
	tracees map[int]bool
	// refusedPIDs are the images the guard killed, whose deaths are no
	// limit's.
	refusedPIDs map[int]bool
	// argvs are the argv each traced process was decided on (a forked
	// child's is its parent's): a report's parent chain is made of
	// these, not of /proc/PID/cmdline, which a running process can
	// rewrite (perl's $0 = "make test").
	argvs map[int][]string
	// born are the processes seen (stopped, or dead: true) before their
	// parent's fork event: the kernel may report a new child, and let it
	// run and execute, before the event of the parent that made it. That
	// late event must not give the child its parent's argv over its own,
	// nor bring a dead one back to be killed under a reused PID.
	born map[int]bool
	// lateForks holds fork events back until their child has executed
	// or died (child to parent), under the fault point
	// execguard.fork=late: the order above, made certain for a test.
	lateForks map[int]int
}

type program struct {
	name, path string
	sum        []byte // computed on first use
}

// run starts the command and traces its tree until its main process ends.
// It returns that process's wait status, or code >= 0 when the guard itself
// ends the run (a refusal, a failure to start).
func (t *tracer) run(path string, argv []string) (syscall.WaitStatus, int) {
	attr := &syscall.ProcAttr{Env: os.Environ(), Files: t.files,
		Sys: &syscall.SysProcAttr{Ptrace: true}}
	// On this (locked) thread, so that the command inherits it: no
	// process of the tree can make a child the guard does not trace.
	if err := confine.LoadGuardFilter(); err != nil {
		if t.session != nil {
			t.session.ack.Close()
		}
		return 0, t.unavailable("cannot load the guard's seccomp filter (clone without tracing): %v", err)
	}
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		if t.session != nil {
			t.session.ack.Close() // the controller learns it from the report
		}
		return 0, t.startFailure(path, argv, err)
	}
	t.main = pid
	if t.session != nil {
		// The controller signals and inspects the shell itself.
		_, _ = fmt.Fprintf(t.session.ack, "{\"pid\":%d}\n", pid)
		go t.session.serve()
	}
	var ws unix.WaitStatus
	// The first image stops with SIGTRAP before its first instruction.
	if _, err := wait(pid, &ws, unix.WALL); err != nil || !ws.Stopped() {
		return syscall.WaitStatus(ws), -1
	}
	if !t.sp.TrustFirst && !t.decide(pid) && t.session == nil {
		return 0, exitRefused
	}
	// TRACEME gives the legacy ptrace semantics, in which a group stop
	// cannot be told from a signal and job control breaks. Hand the
	// stopped image over to PTRACE_SEIZE: detach with SIGSTOP pending, so
	// it stops again before it runs, and seize it there.
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(pid), 0, uintptr(unix.SIGSTOP), 0, 0); e != 0 {
		unix.Kill(pid, unix.SIGKILL)
		return 0, t.unavailable("cannot hand the command over to PTRACE_SEIZE: %v", e)
	}
	for {
		if _, err := wait(pid, &ws, unix.WUNTRACED); err != nil {
			return syscall.WaitStatus(ws), -1
		}
		if !ws.Stopped() {
			return syscall.WaitStatus(ws), -1
		}
		if ws.StopSignal() == unix.SIGSTOP {
			break
		}
	}
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, traceOptions, 0, 0); e != 0 {
		unix.Kill(pid, unix.SIGKILL)
		return 0, t.unavailable("PTRACE_SEIZE failed: %v", e)
	}
	// Seizing a stopped process traps it (PTRACE_EVENT_STOP); from there
	// it is resumed as if the stop had never been.
	if _, err := wait(pid, &ws, unix.WALL); err == nil && ws.Stopped() {
		_ = unix.PtraceCont(pid, 0)
	}
	_ = unix.Kill(pid, unix.SIGCONT)
	return t.loop()
}

func wait(pid int, ws *unix.WaitStatus, opts int) (int, error) {
	return waitUsage(pid, ws, opts, nil)
}

func waitUsage(pid int, ws *unix.WaitStatus, opts int, ru *unix.Rusage) (int, error) {
	for {
		wpid, err := unix.Wait4(pid, ws, opts, ru)
		if err != unix.EINTR {
			return wpid, err
		}
	}
}

// noteDeath records a traced process's death by a limit's signal in the
// report (of the current call, in a session).
func (t *tracer) noteDeath(ws syscall.WaitStatus, cpuMillis int64) {
	if !ws.Signaled() {
		return
	}
	if t.session == nil {
		t.rep.Deaths.Note(ws, cpuMillis)
		return
	}
	call, pol, _ := t.session.current()
	if pol == nil {
		return
	}
	t.session.record(call, func(cr *Report) { cr.Deaths.Note(ws, cpuMillis) })
}

func (t *tracer) loop() (syscall.WaitStatus, int) {
	var ws unix.WaitStatus
	var ru unix.Rusage
	for {
		pid, err := waitUsage(-1, &ws, unix.WALL, &ru)
		if err != nil {
			// No tracee and no child left: the main process is gone
			// without a status we saw.
			return syscall.WaitStatus(ws), exitRefused
		}
		if ws.Exited() || ws.Signaled() {
			if _, early := t.born[pid]; early || (pid != t.main && !t.tracees[pid]) {
				t.born[pid] = true
			}
			delete(t.tracees, pid)
			delete(t.argvs, pid)
			t.releaseFork(pid)
			// The tracer learns how every process of the tree died,
			// whoever its parent: a limit a child hit is reported
			// from here without process accounting.
			if !t.refusedPIDs[pid] && !(pid == t.main && t.sp.TrustFirst) {
				ms := (ru.Utime.Nano() + ru.Stime.Nano()) / 1e6
				t.noteDeath(syscall.WaitStatus(ws), ms)
			}
			delete(t.refusedPIDs, pid)
			if pid == t.main {
				return syscall.WaitStatus(ws), -1
			}
			continue
		}
		if !ws.Stopped() {
			continue
		}
		if pid != t.main && !t.tracees[pid] {
			t.tracees[pid] = true
			t.born[pid] = false
		}
		sig := ws.StopSignal()
		event := int(uint32(ws)>>16) & 0xff
		switch {
		case sig == unix.SIGTRAP && event == unix.PTRACE_EVENT_EXEC:
			if !t.decide(pid) {
				if t.session == nil {
					// Nothing of the tree may act after a refusal, nor
					// touch the report before it is written.
					for p := range t.tracees {
						_ = unix.Kill(p, unix.SIGKILL)
					}
					return 0, exitRefused
				}
				// A session lives on; only the refused image dies.
				t.releaseFork(pid)
				continue
			}
			_ = unix.PtraceCont(pid, 0)
			t.releaseFork(pid)
		case event == unix.PTRACE_EVENT_STOP:
			switch sig {
			case unix.SIGSTOP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU:
				// A group stop: stay stopped until SIGCONT, as an
				// untraced process would.
				_, _, _ = unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_LISTEN, uintptr(pid), 0, 0, 0, 0)
			default:
				// A new child's first stop, or the end of a group stop.
				_ = unix.PtraceCont(pid, 0)
			}
		case event != 0:
			// Fork, vfork and clone events: the new task is traced
			// already and reports its own first stop.
			if event == unix.PTRACE_EVENT_FORK || event == unix.PTRACE_EVENT_VFORK || event == unix.PTRACE_EVENT_CLONE {
				if child, err := unix.PtraceGetEventMsg(pid); err == nil {
					if t.lateForks != nil && event != unix.PTRACE_EVENT_CLONE && !t.born[int(child)] {
						t.lateForks[int(child)] = pid // the parent stays stopped
						continue
					}
					t.announce(pid, int(child))
				}
			}
			_ = unix.PtraceCont(pid, 0)
		default:
			// A signal on its way to the tracee: deliver it.
			_ = unix.PtraceCont(pid, int(sig))
		}
	}
}

// announce takes in child, made by parent: traced, with its parent's argv
// until it executes its own, unless it was seen first (see born).
func (t *tracer) announce(parent, child int) {
	if dead, early := t.born[child]; early {
		delete(t.born, child)
		if dead {
			return
		}
		if _, ok := t.argvs[child]; ok {
			return // it has executed already: that argv is its own
		}
	}
	t.tracees[child] = true
	if a, ok := t.argvs[parent]; ok {
		t.argvs[child] = a
	}
}

// releaseFork lets the fork event held for child (see lateForks) be seen
// now, and its parent go on.
func (t *tracer) releaseFork(child int) {
	parent, ok := t.lateForks[child]
	if !ok {
		return
	}
	delete(t.lateForks, child)
	t.announce(parent, child)
	_ = unix.PtraceCont(parent, 0)
}

// decide judges the image pid has just executed. It returns false after
// killing a refused image and recording why. What must survive the guard
// being killed later (an image run on approval; in a session, a refusal)
// goes out on the report pipe at once.
func (t *tracer) decide(pid int) bool {
	if t.session == nil {
		n := len(t.rep.Approved)
		ok := t.decideWith(pid, t.pol, t.sp.Approved, t.rep)
		switch {
		case len(t.rep.Approved) != n:
			t.out.send(0, t.rep)
		case ok:
			t.out.sendCount(t.rep.Execs)
		}
		return ok
	}
	call, pol, approved := t.session.current()
	if pol == nil {
		return true // this call has no policy
	}
	var r Report
	ok := t.decideWith(pid, pol, approved, &r)
	cr := t.session.record(call, func(cr *Report) {
		cr.Execs += r.Execs
		cr.Approved = append(cr.Approved, r.Approved...)
		if len(cr.Approved) > maxApproved {
			cr.Approved = cr.Approved[:maxApproved]
		}
		if cr.Killed == nil {
			cr.Killed = r.Killed
		}
	})
	if r.Killed != nil || len(r.Approved) > 0 {
		// The controller stops the rest of the call on a refusal.
		t.out.send(call, cr)
	}
	return ok
}

func (t *tracer) decideWith(pid int, pol *policy.Policy, approved bool, rep *Report) bool {
	argv := cmdline(pid)
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if len(argv) == 0 {
		argv = []string{exe}
	}
	t.argvs[pid] = argv
	d := pol.DecideExec(argv)
	names := []string{}
	if exe != "" && filepath.Base(exe) != filepath.Base(argv[0]) {
		names = append(names, exe)
	}
	if name := t.identify(pid); name != "" && name != filepath.Base(argv[0]) {
		names = append(names, name)
	}
	alts := [][]string{}
	for _, n := range names {
		alts = append(alts, append([]string{n}, argv[1:]...))
	}
	// An exec of a #! script runs its interpreter with the script's path
	// in place of argv[0] (after the #! line's optional argument): the
	// program the caller asked for is the script, with what follows.
	// (env in a #! line, #!/usr/bin/env node, puts it one further.)
	// A renamed copy of a script the rules name is that script.
	if s := t.scriptIn(pid, argv); s > 0 {
		alts = append(alts, argv[s:])
		if name := t.identifyPath(pid, argv[s]); name != "" && name != filepath.Base(argv[s]) {
			alts = append(alts, append([]string{name}, argv[s+1:]...))
		}
	}
	// ld.so PROGRAM, and valgrind's tool, run PROGRAM without an exec:
	// decide it here, under its name and as the rules' program its file
	// is.
	var prog []string
	switch {
	case policy.IsLoader(exe) || t.identify(pid) == loaderName:
		prog = policy.LoaderProgram(argv)
	case policy.IsValgrind(exe):
		prog = policy.ValgrindProgram(argv)
	}
	if prog != nil {
		alts = append(alts, prog)
		if name := t.identifyPath(pid, prog[0]); name != "" && name != loaderName {
			alts = append(alts, append([]string{name}, prog[1:]...))
		}
	}
	for _, alt := range alts {
		if d2 := pol.DecideExec(alt); policy.Stricter(d2.Decision, d.Decision) {
			d = d2
			d.Argv = argv
		}
	}
	rep.Execs++
	if d.Decision == policy.Allow {
		return true
	}
	x := Exec{PID: pid, Argv: argv, Exe: exe, Chain: t.chain(pid), Decision: d.Decision,
		Rule: d.Rule, Justification: d.Justification, Source: d.Source, Action: ActionRan}
	if d.Decision == policy.Prompt && approved {
		if len(rep.Approved) < maxApproved {
			rep.Approved = append(rep.Approved, x)
		}
		return true
	}
	if t.session != nil {
		// A session's shell lives on, so the refused image's parents
		// (the shell, a subshell) would go on to the next command as
		// soon as it dies. Stop them first: a pending SIGSTOP is taken
		// before they run another instruction, and the session engine's
		// cancellation of the call then kills the call's processes and
		// brings the shell back.
		for p := parentOf(pid); p > 1 && p != t.self; p = parentOf(p) {
			_ = unix.Kill(p, unix.SIGSTOP)
		}
	}
	// Still stopped at the exec: SIGKILL ends it before its first
	// instruction.
	_ = unix.Kill(pid, unix.SIGKILL)
	t.refusedPIDs[pid] = true
	x.Action = ActionKilled
	rep.Killed = &x
	return false
}

// maxScriptArg bounds where a #! script's path can be in its interpreter's
// argv: after the interpreter, its optional argument and, through env,
// the program env runs and that one's argument.
const maxScriptArg = 4

// scriptIn returns the index in argv (of the image pid executes) of the
// #! script it runs, or 0: the first argument, among the first few, that
// names a file starting with "#!" (as pid opens it).
func (t *tracer) scriptIn(pid int, argv []string) int {
	for i := 1; i < len(argv) && i <= maxScriptArg; i++ {
		a := argv[i]
		if a == "" || strings.HasPrefix(a, "-") {
			continue
		}
		// As pid sees it: from its working directory, under its root
		// (a sandbox's mount namespace has its own /tmp).
		path := filepath.Join("/proc", strconv.Itoa(pid), "root", a)
		if !filepath.IsAbs(a) {
			path = filepath.Join("/proc", strconv.Itoa(pid), "cwd", a)
		}
		if hasShebang(path) {
			return i
		}
	}
	return 0
}

// hasShebang reports whether path is a regular file that starts with
// "#!". It never blocks: a FIFO opens non-blocking and is not read.
func hasShebang(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	var b [2]byte
	n, _ := unix.Pread(fd, b[:], 0)
	return n == 2 && b[0] == '#' && b[1] == '!'
}

// chain returns the argv of pid's parents up to the guard, or up to the
// command when the first image is the sandbox helper (TrustFirst), which
// is not the command's: each as it was decided at its exec.
func (t *tracer) chain(pid int) [][]string {
	out := [][]string{}
	for i := 0; i < 32; i++ {
		ppid := parentOf(pid)
		if ppid <= 1 || ppid == t.self || (t.sp.TrustFirst && ppid == t.main) {
			break
		}
		a, ok := t.argvs[ppid]
		if !ok {
			a = cmdline(ppid)
		}
		out = append(out, a)
		pid = ppid
	}
	return out
}

func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

func cmdline(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	b = bytes.TrimSuffix(b, []byte{0})
	return strings.Split(string(b), "\x00")
}

// learnPrograms finds, on PATH, the file of every program a non-allow rule
// names, so that a copy of it under another name is still that program.
func (t *tracer) learnPrograms() {
	t.bySize = map[int64][]program{}
	seen := map[string]bool{}
	for _, r := range t.pol.Rules {
		if r.Decision == policy.Allow || len(r.Pattern) == 0 {
			continue
		}
		for _, name := range r.Pattern[0] {
			if seen[name] || strings.Contains(name, "/") {
				continue
			}
			seen[name] = true
			p, err := exec.LookPath(name)
			if err != nil {
				continue
			}
			var st unix.Stat_t
			if unix.Stat(p, &st) != nil {
				continue
			}
			t.byFile[fileID{uint64(st.Dev), st.Ino}] = name
			t.bySize[st.Size] = append(t.bySize[st.Size], program{name: name, path: p})
		}
	}
	if len(t.byFile) == 0 {
		return
	}
	// The dynamic loader, so that a copy of it under another name is
	// still taken for the loader whose argument is the program it runs.
	for _, p := range loaderPaths {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil {
			continue
		}
		if _, dup := t.byFile[fileID{uint64(st.Dev), st.Ino}]; dup {
			continue
		}
		t.byFile[fileID{uint64(st.Dev), st.Ino}] = loaderName
		t.bySize[st.Size] = append(t.bySize[st.Size], program{name: loaderName, path: p})
	}
}

// loaderName stands for the dynamic loader among the programs identify
// knows; loaderPaths are where the loaders of the architectures live.
const loaderName = "ld.so"

var loaderPaths = []string{"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1", "/lib/ld-musl-x86_64.so.1", "/lib/ld-musl-aarch64.so.1"}

// identify names the program whose file pid executes, when it is one the
// rules name under another name: a hard link, or a byte-for-byte copy.
func (t *tracer) identify(pid int) string {
	return t.identifyFile("/proc/" + strconv.Itoa(pid) + "/exe")
}

// identifyPath names the program of path as process pid would open it
// (a relative path from its working directory).
func (t *tracer) identifyPath(pid int, path string) string {
	if !filepath.IsAbs(path) {
		path = filepath.Join("/proc", strconv.Itoa(pid), "cwd", path)
	}
	return t.identifyFile(path)
}

func (t *tracer) identifyFile(exe string) string {
	if len(t.byFile) == 0 {
		return ""
	}
	var st unix.Stat_t
	if unix.Stat(exe, &st) != nil {
		return ""
	}
	if name, ok := t.byFile[fileID{uint64(st.Dev), st.Ino}]; ok {
		return name
	}
	cands := t.bySize[st.Size]
	if len(cands) == 0 {
		return ""
	}
	sum := fileSum(exe)
	if sum == nil {
		return ""
	}
	for i := range cands {
		c := &t.bySize[st.Size][i]
		if c.sum == nil {
			c.sum = fileSum(c.path)
		}
		if bytes.Equal(c.sum, sum) {
			return c.name
		}
	}
	return ""
}

func fileSum(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil
	}
	return h.Sum(nil)
}

func (t *tracer) startFailure(path string, argv []string, err error) int {
	switch {
	case errors.Is(err, syscall.ENOENT):
		t.rep.Error = &Failure{Code: result.CodeCommandNotFound, Message: "command not found: " + argv[0]}
	case errors.Is(err, syscall.EPERM):
		// PTRACE_TRACEME is refused when the process is traced already
		// (strace -f, gdb) or the kernel forbids tracing (Yama, seccomp).
		return t.unavailable("the kernel refused to trace the command (%v): is agentplane itself traced, or ptrace forbidden here?", err)
	default:
		t.rep.Error = &Failure{Code: result.CodeCommandNotExecutable, Message: fmt.Sprintf("command cannot be executed: %s: %v", path, err)}
	}
	return exitRefused
}

func (t *tracer) unavailable(format string, a ...any) int {
	t.rep.Error = &Failure{Code: result.CodePolicyUnavailable, Message: fmt.Sprintf(format, a...) +
		"; use --policy-enforce static to rely on the check before the call only"}
	return exitRefused
}

// dieBy ends the guard with the signal that ended the command, so the
// runner sees the same wait status. The Go runtime handles some signals
// itself; their default action is restored first.
func dieBy(sig syscall.Signal) {
	signal.Reset(sig)
	var act [4]uint64 // struct sigaction with SIG_DFL, no flags, empty mask
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	var set [1]uint64
	set[0] = 1 << (uint(sig) - 1)
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_UNBLOCK, uintptr(unsafe.Pointer(&set)), 0, 8, 0, 0)
	_ = unix.Tgkill(os.Getpid(), unix.Gettid(), sig)
}
