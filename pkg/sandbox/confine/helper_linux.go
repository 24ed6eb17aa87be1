package confine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"unsafe"

	"github.com/agentplane/agentplane/pkg/result"
	"golang.org/x/sys/unix"
)

func (h *helper) run(argv []string) int {
	sp := h.sp
	// The command runs as the helper's uid with a subset of its
	// capabilities, which the kernel takes as leave to trace it, take its
	// descriptors (pidfd_getfd: the gate's listener, the status file) and
	// write its memory; the helper's other threads keep what the command
	// gave up. Not dumpable, it needs CAP_SYS_PTRACE, which the command
	// never has. (execve makes the command's own image dumpable again.)
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot make the helper undumpable: %v", err)
	}
	for _, dir := range sp.Cgroups {
		// "0" is this process; everything it starts stays inside.
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("0"), 0); err != nil {
			return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot join cgroup %s: %v", dir, unwrap(err))
		}
	}
	// In the new PID namespace and still privileged: every process of the
	// run leaves an accounting record when it exits.
	if err := startAccounting(sp.Acct); err != nil {
		return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot turn on process accounting: %v", err)
	}
	// A cgroup namespace rooted at the run's cgroup: /proc/self/cgroup
	// shows no path above it. (Leaving it is stopped by the read-only
	// cgroup filesystem below and the missing CAP_SYS_ADMIN.) This thread
	// only, which is the one that starts the target.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot create a cgroup namespace: %v", err)
	}
	if sp.NetNone {
		if err := loopbackUp(); err != nil {
			return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot bring up the loopback interface: %v", err)
		}
	}
	if sp.ProxyPort > 0 {
		// In the new network namespace, before anything else can use
		// the descriptor: the listener goes out to the runner's proxy.
		if err := handOverProxyListener(sp.proxyFD(), sp.ProxyPort); err != nil {
			return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot set up the network proxy: %v", err)
		}
	}
	// The directory's own path (getcwd), not $PWD's name for it: entered
	// again below, it cannot lead through a symlink the mounts changed.
	cwd, cwdErr := unix.Getwd()
	reopen := func() (clonedMount, error) {
		f, m, err := openDetached(sp.Status)
		if err != nil {
			return m, fmt.Errorf("cannot reopen the status file: %v", err)
		}
		// The same file as the one checked at the start (Main), not
		// another put in its place since.
		var was, now unix.Stat_t
		if unix.Fstat(int(h.status.Fd()), &was) != nil || unix.Fstat(int(f.Fd()), &now) != nil || was.Dev != now.Dev || was.Ino != now.Ino {
			f.Close()
			_ = unix.Close(m.fd)
			return clonedMount{}, fmt.Errorf("cannot reopen the status file: %s was replaced", sp.Status)
		}
		h.status.Close()
		h.status = f
		return m, nil
	}
	if err := setupMounts(sp, reopen); err != nil {
		return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "%v", err)
	}
	// The cwd still points into the mounts it was on before; entering it
	// again by name lands on the writable bind (or the cover) on top.
	if cwdErr == nil {
		if err := os.Chdir(cwd); err != nil {
			return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot enter %s in the sandbox: %v", cwd, unwrap(err))
		}
	}
	if sp.DropCaps {
		if err := dropBoundingSet(sp.DropFileCaps); err != nil {
			return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot drop capabilities: %v", err)
		}
	}
	if sp.ClearAmbient {
		// A non-root target then starts with no capabilities at all, in
		// its user namespace too, so it cannot undo the mounts.
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
			return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot clear ambient capabilities: %v", err)
		}
	}
	if sp.UID >= 0 {
		if err := switchUser(sp.UID, sp.GID, sp.Groups); err != nil {
			return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot switch to uid %d: %v", sp.UID, err)
		}
	}
	if sp.DropCaps {
		if err := limitCaps(sp.DropFileCaps); err != nil {
			return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot drop capabilities: %v", err)
		}
	}
	// Set on every sandboxed run: a setuid or file-capability binary then
	// runs without gaining anything.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot set no_new_privs: %v", err)
	}
	if sp.LandlockABI > 0 {
		if err := restrictFS(sp.LandlockABI, sp.Writable, sp.WritableIDs, sp.WriteFiles, sp.WriteFileIDs); err != nil {
			return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot apply the Landlock policy: %v", err)
		}
	}
	if err := loadFilter(); err != nil {
		return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot load the seccomp filter: %v", err)
	}
	if sp.NetNone {
		// Under --net none and --net proxy: calls that name a peer go
		// through the helper (unixgate_linux.go).
		if err := startUnixGate(); err != nil {
			return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "%v", err)
		}
	}
	path, code, err := lookPath(argv[0])
	if err != nil {
		exit := ExitNotExecutable
		if code == result.CodeCommandNotFound {
			exit = ExitNotFound
		}
		return h.fail(exit, code, "%v", err)
	}
	// Only stdin, stdout, stderr and what the runner passes on purpose
	// reach the target: a descriptor the caller of agentplane left open
	// (a secret file, a socket) is closed at exec.
	// The control socket (fd 3 when there is one) is the helper's own,
	// and so are the spec's descriptor after it (closed by ReadSpec, or
	// kept close-on-exec for the end report) and the proxy's handover
	// socket after that (closed above).
	first := SpecFD(sp.Control) + 1
	if sp.ProxyPort > 0 {
		first++
	}
	files := []uintptr{0, 1, 2}
	for i := 0; i < sp.KeepFDs; i++ {
		files = append(files, uintptr(first+i))
	}
	if sp.Control {
		unix.CloseOnExec(ControlFD)
	}
	if err := closeOnExecFrom(first + sp.KeepFDs); err != nil {
		return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot close inherited descriptors: %v", err)
	}
	// Last, so that the helper's own Go runtime is held to the command's
	// limits as briefly as possible (rlimits are per process; the helper
	// only waits from here on).
	for _, r := range sp.Rlimits {
		lim := syscall.Rlimit{Cur: r.Cur, Max: r.Max}
		if err := syscall.Setrlimit(r.Resource, &lim); err != nil {
			return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot set resource limit %d: %v", r.Resource, err)
		}
	}
	// The target is a child of this thread, so it inherits the thread's
	// credentials, Landlock domain and seccomp filter; it dies with the
	// helper (and, the helper being PID 1, so does every process of the
	// namespace).
	if h.end >= 0 {
		// The runner's word that the target may run from here: a helper
		// that dies before this (a crash of its runtime, the OOM killer)
		// did not start the command, whatever its exit status says. Not
		// after the fork: the target can run (and kill the helper) before
		// the helper's thread runs again on a busy machine, and a
		// command that ran would be reported as not started. A fork that
		// fails after it is reported in the status file.
		_ = unix.Sendto(h.end, StartedMessage, unix.MSG_NOSIGNAL, nil)
	}
	if sp.TimerSlack > 0 {
		// The target is this thread's child and takes its timer slack:
		// the caller's, not the coarse one the helper started with.
		if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(sp.TimerSlack), 0, 0, 0); err != nil {
			return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot set the command's timer slack: %v", err)
		}
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: files,
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return h.execFailed(argv[0], err)
	}
	if sp.Control {
		return h.serve(pid, os.NewFile(ControlFD, "sandbox-control"))
	}
	return h.reap(pid)
}

// reap waits for the target, reaping every orphan of the namespace on the
// way (they are reparented to PID 1), and returns the target's exit
// status. A signal death is recorded in the status file: PID 1 cannot die
// of a signal itself.
func (h *helper) reap(target int) int {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, 0, &ru)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "wait for the command: %v", err)
		}
		if ws.Stopped() || ws.Continued() {
			continue
		}
		if pid != target {
			h.deaths.Note(ws, CPUMillis(&ru)) // an orphan, reparented to PID 1
			continue
		}
		exit := h.exitOf(ws)
		h.report(exit)
		if ws.Signaled() && os.Getpid() != 1 {
			setDisposition(ws.Signal(), sigDFL)
			_ = unix.Kill(os.Getpid(), ws.Signal())
		}
		return exit
	}
}

// report tells the runner that the command is over (Spec.Report), before
// the helper's own exit: for PID 1 of a mount namespace the kernel tears
// the namespace down in the exit (an expedited RCU grace period, one to
// three milliseconds, more on a loaded machine) before its parent can see
// it. The report comes only once the namespace is provably empty
// (emptyNamespace) and the status file is complete, so that the runner
// can give the result at once: nothing of the command is left to outlive
// it. The command never holds the socket (close-on-exec, and the helper
// is not dumpable, so neither /proc/1/fd nor pidfd_getfd reaches it).
func (h *helper) report(exit int) {
	if h.end < 0 || os.Getpid() != 1 || !emptyNamespace() {
		return
	}
	// The helper's copies of the command's standard streams would close
	// only at its exit, after the teardown: the runner's readers see
	// their end now.
	for fd := 0; fd <= 2; fd++ {
		_ = unix.Close(fd)
	}
	// MSG_NOSIGNAL: a runner that closed its end (it does not read the
	// report) is no reason to die.
	_ = unix.Sendto(h.end, EndMessage(exit), unix.MSG_NOSIGNAL, nil)
}

// emptyNamespace kills every other process of the helper's PID namespace
// and reaps them all, as the kernel would at the helper's exit; it reports
// whether it saw the namespace empty. kill(-1) from PID 1 reaches every
// process of the namespace (and of any below it) but the helper, and no
// fork escapes it (a fork that races the signal fails). Every process of
// the namespace is a descendant of the helper, which is the reaper of its
// orphans, so wait4 with __WALL fails with ECHILD exactly when no other
// process is left, not even a zombie or a clone child with no exit signal.
// The helper's thread keeps the right to signal every process of the
// command (CAP_KILL, or the command's own uid without capabilities to
// change it). The same ECHILD, asked first, spares the kill when the
// command left nothing behind (most runs): kill(-1) walks every process
// of the machine to find those of the namespace.
func emptyNamespace() bool {
	var ws unix.WaitStatus
	_, err := unix.Wait4(-1, &ws, unix.WALL|unix.WNOHANG, nil)
	for err == unix.EINTR {
		_, err = unix.Wait4(-1, &ws, unix.WALL|unix.WNOHANG, nil)
	}
	if err == unix.ECHILD {
		return true
	}
	for {
		_ = unix.Kill(-1, unix.SIGKILL)
		_, err := unix.Wait4(-1, &ws, unix.WALL, nil)
		switch err {
		case nil, unix.EINTR:
		case unix.ECHILD:
			return true
		default:
			return false
		}
	}
}

// exitOf is the helper's exit status for the target's wait status, and
// writes the status file.
func (h *helper) exitOf(ws syscall.WaitStatus) int {
	// Orphans that died before the target are zombies by now: their
	// deaths count too.
	for {
		var ows syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ows, syscall.WNOHANG, &ru)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			break
		}
		h.deaths.Note(ows, CPUMillis(&ru))
	}
	if ws.Exited() {
		if len(h.deaths) > 0 {
			data, _ := json.Marshal(Failure{Deaths: h.deaths})
			_, _ = h.status.Write(data)
		}
		return ws.ExitStatus()
	}
	sig := ws.Signal()
	data, _ := json.Marshal(Failure{Signal: int(sig), Deaths: h.deaths})
	_, _ = h.status.Write(data)
	return 128 + int(sig)
}

// closeOnExecFrom marks every descriptor from first on close-on-exec.
func closeOnExecFrom(first int) error {
	err := unix.CloseRange(uint(first), ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil || !(errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL)) {
		return err
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= first {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}

// loopbackUp sets IFF_UP on lo, which a new network namespace starts
// without, so that servers on 127.0.0.1 work.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// dropBoundingSet removes every capability but keptCaps from the bounding
// set, which limits what any later execve can grant, root included. The
// kernel's capabilities are numbered from 0 without a gap: the first
// number it calls invalid (EINVAL) is past the last one, which spares
// reading /proc/sys/kernel/cap_last_cap.
func dropBoundingSet(dropFile bool) error {
	keep := map[int]bool{}
	for _, c := range keptCaps(dropFile) {
		keep[c] = true
	}
	for c := 0; c <= 63; c++ {
		if keep[c] {
			continue
		}
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break
		}
		if err != nil {
			return fmt.Errorf("capability %d: %v", c, err)
		}
	}
	return unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
}

// limitCaps reduces this thread's permitted and effective sets to keptCaps
// and empties the inheritable set, which execve would otherwise add to a
// root program's permitted set.
func limitCaps(dropFile bool) error {
	var mask [2]uint32
	for _, c := range keptCaps(dropFile) {
		mask[c/32] |= 1 << (c % 32)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	for i := range data {
		data[i].Permitted &= mask[i]
		data[i].Effective &= mask[i]
		data[i].Inheritable = 0
	}
	return unix.Capset(&hdr, &data[0])
}

// switchUser drops to uid/gid. The raw syscalls act on this thread, which
// is the one that execs.
func switchUser(uid, gid int, groups []int) error {
	gs := make([]uint32, len(groups))
	for i, g := range groups {
		gs[i] = uint32(g)
	}
	var gp *uint32
	if len(gs) > 0 {
		gp = &gs[0]
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gs)), uintptr(unsafe.Pointer(gp)), 0); e != 0 {
		return fmt.Errorf("setgroups: %v", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("setresgid: %v", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("setresuid: %v", e)
	}
	return nil
}

// keptCaps are the capabilities a root command keeps inside an isolating
// sandbox: enough to manage files it owns or that its workspace holds (as
// container runtimes allow by default), and none that crosses a namespace
// or mount boundary (SYS_ADMIN for setns and umount, DAC_READ_SEARCH for
// open_by_handle_at, SYS_PTRACE, SYS_MODULE, NET_ADMIN, …).
//
// In the filesystem modes (dropFile) CHOWN, FOWNER and FSETID go too: with
// them root changes the owner, mode, times and extended attributes of
// files it does not own, which Landlock does not mediate. Writes stay
// possible where the mounts and Landlock allow them (DAC_OVERRIDE).
func keptCaps(dropFile bool) []int {
	caps := []int{unix.CAP_DAC_OVERRIDE, unix.CAP_KILL, unix.CAP_SETGID, unix.CAP_SETUID, unix.CAP_NET_BIND_SERVICE}
	if !dropFile {
		caps = append(caps, unix.CAP_CHOWN, unix.CAP_FOWNER, unix.CAP_FSETID)
	}
	return caps
}
