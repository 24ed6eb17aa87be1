package proctree

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupPrefix names the cgroups guards create; Detach leaves every
// cgroup so named. The rest of the name is the owner's "pid.starttime"
// and the guard's token, dot-separated (guardCgroupName).
const cgroupPrefix = "agentplane-guard-"

// A guard's cgroup is removed by Release. When both the guarded process
// and its watchdog are SIGKILLed, nothing removes it: the next guard
// started below the same parent sweeps the cgroups whose owner (named in
// the cgroup's name) is provably dead, at most once per guardSweepEvery
// per user (a stamp in the temp dir, SweepDue). A live owner's cgroup is
// never touched, however empty (it is empty until its command starts); a
// dead owner's still holding processes is killed first, as its watchdog
// would have.
const (
	guardSweepStamp = "agentplane-guard-swept."
	guardSweepEvery = time.Minute
)

// guardCgroupName is the name of a guard's cgroup: the prefix, the
// owner (this process's pid and start time) and the token.
func guardCgroupName(token string) string {
	start, _ := StartTime(os.Getpid())
	return cgroupPrefix + strconv.Itoa(os.Getpid()) + "." + strconv.FormatUint(start, 10) + "." + token
}

// guardCgroupOwner parses a guard cgroup's name into its owner; ok is
// false for a name that is not one (an older agentplane's names carry
// no owner, and are left alone).
func guardCgroupOwner(name string) (pid int, start uint64, ok bool) {
	rest, found := strings.CutPrefix(name, cgroupPrefix)
	f := strings.Split(rest, ".")
	if !found || len(f) != 3 || f[2] == "" {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return 0, 0, false
	}
	return pid, start, true
}

// startSweep starts, when due, the sweep of dead guards' cgroups beside
// the guard's own (cgroup mode); Release waits for it, so that a short
// call does not exit in the middle of it.
func (g *Guard) startSweep() {
	if g.mode != GuardCgroup || !SweepDue("", guardSweepStamp, guardSweepEvery) {
		return
	}
	done := make(chan struct{})
	g.swept = done
	go func() {
		defer close(done)
		sweepGuardCgroups(filepath.Dir(g.cgDir))
	}()
}

// sweepGuardCgroups removes, in parent, the guard cgroups whose owner is
// dead, killing what is left in one first, and the empty tree cgroups
// (MakeTreeCgroup: a job's) whose owner is dead: one that holds a lost
// job's processes is left to the job's stop. An rmdir fails on a cgroup
// that still has members or children, so what it removes was empty.
func sweepGuardCgroups(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, start, ok := guardCgroupOwner(e.Name())
		kill := ok
		if !ok {
			pid, start, ok = treeCgroupOwner(e.Name())
		}
		if !e.IsDir() || !ok || Alive(pid, start) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		if populated, err := cgroupPopulated(dir); err == nil && populated && kill {
			killCgroup(dir, 2*time.Second)
		}
		_ = unix.Rmdir(dir)
	}
}

// treeCgroupOwner parses the name of a job's tree cgroup, made as
// "job-ID-PID.START" (jobs.jobCgroupName), into its owner, the supervisor.
func treeCgroupOwner(name string) (pid int, start uint64, ok bool) {
	rest, found := strings.CutPrefix(name, cgroupPrefix+"job-")
	i := strings.LastIndexByte(rest, '-')
	if !found || i < 0 {
		return 0, 0, false
	}
	p, s, found := strings.Cut(rest[i+1:], ".")
	pid, err1 := strconv.Atoi(p)
	start, err2 := strconv.ParseUint(s, 10, 64)
	if !found || err1 != nil || err2 != nil || pid <= 0 {
		return 0, 0, false
	}
	return pid, start, true
}

// Apply puts the process that attr starts into the guard's cgroup.
func (g *Guard) Apply(attr *syscall.SysProcAttr) {
	if g.mode == GuardCgroup {
		attr.UseCgroupFD = true
		attr.CgroupFD = g.cgFD
	}
}

// Empty reports whether the guard's cgroup has no member left; it is
// false in environ mode, where only a scan can tell.
func (g *Guard) Empty() bool {
	if g.mode != GuardCgroup {
		return false
	}
	var populated bool
	var err error
	if g.evFD >= 0 {
		// Opened with the cgroup, off the call's path: after the
		// command, only a read from offset 0, which regenerates the file.
		var buf [256]byte
		var n int
		if n, err = unix.Pread(g.evFD, buf[:], 0); err == nil {
			populated, err = parsePopulated(buf[:n])
		}
	} else {
		populated, err = cgroupPopulated(g.cgDir)
	}
	return err == nil && !populated
}

// EmptyBut reports whether the guard's cgroup holds no process but pid
// and has no cgroup below it; it is false in environ mode. pid is the
// caller's own child, not reaped yet, that has told the caller its tree is
// gone and it is exiting (a sandbox helper, whose exit waits for its
// namespaces' teardown and which stays a member until that is done), so
// the cgroup is empty but for an exit in progress. Release then leaves
// the cgroup's removal to the watchdog.
func (g *Guard) EmptyBut(pid int) bool {
	if g.mode != GuardCgroup {
		return false
	}
	procs, err := os.ReadFile(filepath.Join(g.cgDir, "cgroup.procs"))
	if err != nil || (strings.TrimSpace(string(procs)) != strconv.Itoa(pid) && len(strings.Fields(string(procs))) != 0) {
		return false
	}
	stat, err := os.ReadFile(filepath.Join(g.cgDir, "cgroup.stat"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, "nr_descendants "); ok {
			return v == "0"
		}
	}
	return false
}

// Members returns the pids in the guard's cgroup (nil in environ mode).
func (g *Guard) Members() []int {
	if g.mode != GuardCgroup {
		return nil
	}
	return cgroupProcs(g.cgDir)
}

// cgroupProcs returns the pids in the cgroup dir (nil when it cannot be
// read: gone, or not a cgroup).
func cgroupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// Kill kills every process under the guard (cgroup mode) and waits up to
// timeout for the cgroup to empty; it reports whether it did. The dead
// that were reparented to the caller (a subreaper) are left for it to
// reap (ReapChildren). In environ
// mode it does nothing and reports false: the caller kills its
// descendants itself.
func (g *Guard) Kill(timeout time.Duration) bool {
	if g.mode != GuardCgroup {
		return false
	}
	return killCgroup(g.cgDir, timeout)
}

// dropCgroup closes the guard's cgroup descriptors and removes the
// cgroup; it reports false when the cgroup is still there (a member is
// still exiting: EmptyBut).
func (g *Guard) dropCgroup() bool {
	if g.cgFD >= 0 {
		unix.Close(g.cgFD)
		g.cgFD = -1
	}
	if g.evFD >= 0 {
		unix.Close(g.evFD)
		g.evFD = -1
	}
	if g.cgDir != "" {
		err := unix.Rmdir(g.cgDir)
		return err == nil || errors.Is(err, unix.ENOENT)
	}
	return true
}

// killFile opens the guard's cgroup.kill for writing (cgroup mode; nil
// otherwise, or when it cannot be opened), for the watchdog's KillFD.
func (g *Guard) killFile() *os.File {
	if g.mode != GuardCgroup {
		return nil
	}
	fd, err := unix.Open(filepath.Join(g.cgDir, "cgroup.kill"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), "cgroup.kill")
}

// removeWhenEmpty removes the cgroup dir once its members are gone,
// trying for up to timeout; it reports whether dir is gone.
func removeWhenEmpty(dir string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shWatchdog is RunWatchdog's cgroup mode as a shell script: on end of
// file without "done", kill the cgroup and remove it once it is empty.
//
// Then every process whose environment holds the token ($2) is killed too:
// a member that moved itself out of the cgroup (root can, unsandboxed) is
// still a bearer. The scan repeats until it finds none.
//
// "rmdir" instead of "done" (Release, when a member of the cgroup is still
// exiting: EmptyBut) asks it to remove the cgroup once the guarded
// process is gone (end of file) and the member's exit is done.
const shWatchdog = `read -r x; [ "$x" = done ] && exit 0
if [ "$x" = rmdir ]; then while read -r x; do :; done; i=0; while ! rmdir "$1" 2>/dev/null; do [ -d "$1" ] || exit 0; i=$((i+1)); [ $i -gt 500 ] && exit 1; sleep 0.01; done; exit 0; fi
echo 1 > "$1/cgroup.kill"
i=0; while [ $i -lt 100 ]; do k=0; for f in $(grep -lsaF "$2" /proc/[0-9]*/environ); do p=${f#/proc/}; kill -9 "${p%/environ}" 2>/dev/null && k=1; done; [ $k = 0 ] && break; i=$((i+1)); done
i=0; while [ -d "$1" ] && ! rmdir "$1" 2>/dev/null; do i=$((i+1)); [ $i -gt 500 ] && exit 1; sleep 0.01; done`

// cgroup2Root returns where the cgroup v2 hierarchy is mounted: the whole
// of /sys/fs/cgroup on a unified system, /sys/fs/cgroup/unified on a
// hybrid one.
func cgroup2Root() (string, error) {
	for _, dir := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return dir, nil
		}
	}
	return "", errors.New("proctree: no cgroup v2 hierarchy")
}

// ownCgroup returns the calling process's cgroup v2 path ("0::/path").
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("proctree: not in a cgroup v2")
}

// makeCgroup creates the guard's cgroup below the caller's own and returns
// it with an fd for CLONE_INTO_CGROUP.
func makeCgroup(token string) (string, int, error) {
	return makeNamedCgroup(guardCgroupName(token))
}

// makeNamedCgroup creates the cgroup base below the caller's own and
// returns it with an fd for CLONE_INTO_CGROUP. A guard's name carries its
// owner, so the sweep may remove it once the owner is dead, killing what
// is left; a tree cgroup's (MakeTreeCgroup) does not parse as one, and the
// sweep removes it only when it is empty (treeCgroupOwner).
func makeNamedCgroup(base string) (string, int, error) {
	if !clone3Works() {
		return "", -1, errors.New("proctree: clone3 is refused here: no CLONE_INTO_CGROUP")
	}
	root, err := cgroup2Root()
	if err != nil {
		return "", -1, err
	}
	own, err := ownCgroup()
	if err != nil {
		return "", -1, err
	}
	dir := filepath.Join(root, own, base)
	if err := unix.Mkdir(dir, 0o755); err != nil {
		return "", -1, err
	}
	// cgroup.kill exists since Linux 5.14; without it the mode is useless.
	if err := unix.Access(filepath.Join(dir, "cgroup.kill"), unix.W_OK); err != nil {
		_ = unix.Rmdir(dir)
		return "", -1, err
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Rmdir(dir)
		return "", -1, err
	}
	return dir, fd, nil
}

// openEvents opens dir's cgroup.events for Empty, or returns -1 (Empty
// then opens it by name).
func openEvents(dir string) int {
	fd, err := unix.Open(filepath.Join(dir, "cgroup.events"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

func cgroupPopulated(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, err
	}
	return parsePopulated(b)
}

// parsePopulated reads the populated field of a cgroup.events file.
func parsePopulated(b []byte) (bool, error) {
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return v != "0", nil
		}
	}
	return false, errors.New("proctree: no populated in cgroup.events")
}

// killCgroup writes cgroup.kill and waits for the cgroup to empty: first
// for the members it saw before the kill, through their pidfds (readable
// once a process is a zombie, so its parent can reap it next), then, for
// any that joined meanwhile, by polling cgroup.events.
func killCgroup(dir string, timeout time.Duration) bool {
	var fds []unix.PollFd
	for _, pid := range cgroupProcs(dir) {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		}
	}
	defer func() {
		for _, p := range fds {
			unix.Close(int(p.Fd))
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return false
	}
	deadline := time.Now().Add(timeout)
	for pending := fds; len(pending) > 0; {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		n, err := unix.Poll(pending, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			break
		}
		rest := pending[:0]
		for _, p := range pending {
			if p.Revents == 0 {
				p.Revents = 0
				rest = append(rest, p)
			}
		}
		pending = rest
	}
	for backoff := time.Millisecond; ; {
		populated, err := cgroupPopulated(dir)
		if err != nil || !populated {
			return err == nil
		}
		if time.Now().After(deadline) {
			return false
		}
		// SIGKILLed processes die asynchronously; cgroup.events could be
		// watched with inotify, but this runs only on the kill path.
		time.Sleep(backoff)
		if backoff < 20*time.Millisecond {
			backoff *= 2
		}
	}
}

// watchdogAttr is how the watchdog starts: in a process group of its own
// (StartGuard), and with SIGCONT as its parent-death signal. The command,
// as the same user, may stop it (SIGSTOP needs no more than kill(2)) and
// SIGKILL the guarded process at once: the guarded process continues a
// stopped helper (ResumeStops), but not from the grave, and the watchdog
// stayed stopped for ever, or died of the SIGHUP the kernel sends to a
// stopped process group that the guarded process's exit orphans. The
// kernel sends the parent-death signal in that exit, before it looks for
// stopped groups to hang up: SIGCONT continues the watchdog, or drops the
// stop still pending, and the watchdog kills the tree. It is sent again,
// harmless, each time a thread of the guarded process that is the
// watchdog's parent ends; and it survives the front's exec of the shell.
// A command that keeps stopping the watchdog after the guarded process is
// gone still wins: unsandboxed, it can leave in other ways too (README).
func watchdogAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGCONT}
}

// watchdogArgvs are the ways to start the watchdog, in the order to try
// them (a program and its argv each): argv with StartGuard's arguments
// or, in cgroup mode, the shell, behind the front where there is one. A
// front that cannot be exec'd (refused by a security module, or its
// descriptor number taken by another file) leaves the shell.
func (g *Guard) watchdogArgvs(argv []string) [][]string {
	if g.mode == GuardCgroup {
		if _, err := os.Stat(shPath); err == nil {
			// The cgroup needs only a trigger, and a shell starts in a
			// fraction of the time (and CPU) of a Go program.
			sh := []string{shPath, "-c", shWatchdog, "agentplane-watchdog", g.cgDir, g.token}
			// The front starts in a fraction of the shell's time, and
			// runs the shell only if the guarded process dies.
			if front, err := watchFront(); err == nil {
				return [][]string{append([]string{front, "agentplane-watchdog"}, sh...), append([]string{shPath}, sh...)}
			}
			return [][]string{append([]string{shPath}, sh...)}
		}
	}
	return [][]string{append([]string{argv[0]}, append(argv[:len(argv):len(argv)], g.mode, g.token, g.cgDir)...)}
}

// watchFront is the path of the watchdog front: a static program of a
// few hundred bytes (front/front_ARCH.S, built into frontELF by
// front/gen.sh) that waits on its stdin and OwnerFD like the watchdog and, if the
// guarded process dies without saying "done", execs the rest of its
// argv (the shell watchdog) to do the killing. Exec'ing it costs about a
// fifth of the shell's start (no dynamic loader, no libc, no parsing),
// and it runs on every guarded call. It lives in a sealed memfd of this
// process (close-on-exec: a child reaches it through /proc/self/fd only
// while it execs it), which nothing can modify once sealed. An error
// (no front for this architecture, memfd or exec refused) means the
// shell is started directly.
func watchFront() (string, error) {
	front.mu.Lock()
	defer front.mu.Unlock()
	if front.fd >= 0 {
		// The descriptor is this process's for good, but a double close
		// elsewhere would hand its number to another file: the front is
		// used only while the number still names the sealed memfd made.
		var st unix.Stat_t
		if unix.Fstat(front.fd, &st) == nil && st.Dev == front.dev && st.Ino == front.ino {
			return front.path, nil
		}
		front.fd = -1 // not closed: the number is someone else's now
	}
	fd, path, err := makeFront()
	if err != nil {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return "", err
	}
	front.fd, front.dev, front.ino, front.path = fd, st.Dev, st.Ino, path
	return path, nil
}

// front is the memfd watchFront made, if any.
var front = struct {
	mu       sync.Mutex
	fd       int
	dev, ino uint64
	path     string
}{fd: -1}

func makeFront() (int, string, error) {
	if len(frontELF) == 0 {
		return -1, "", errors.New("proctree: no watchdog front for this architecture")
	}
	fd, err := unix.MemfdCreate("agentplane-watchdog", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if err == unix.EINVAL { // before Linux 6.3 there is no MFD_EXEC, and no need for it
		fd, err = unix.MemfdCreate("agentplane-watchdog", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return -1, "", err
	}
	fail := func(err error) (int, string, error) {
		unix.Close(fd)
		return -1, "", err
	}
	for b := frontELF; len(b) > 0; {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fail(err)
		}
		b = b[n:]
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fail(err)
	}
	path := "/proc/self/fd/" + strconv.Itoa(fd)
	if err := unix.Access(path, unix.X_OK); err != nil {
		return fail(err) // no /proc, or a noexec memfd (vm.memfd_noexec)
	}
	return fd, path, nil
}

// shPath is the shell of the cgroup watchdog.
const shPath = "/bin/sh"

// killGuardCgroup kills the cgroup of a dead guard's command and removes it.
func killGuardCgroup(cg string) bool {
	if killCgroup(cg, 10*time.Second) {
		_ = unix.Rmdir(cg)
		return true
	}
	return false
}

// killGuardCgroupOnly kills the cgroup's members without removing it (its
// owner removes it on Release).
func killGuardCgroupOnly(cg string) bool { return killCgroup(cg, 10*time.Second) }

// dropLeftCgroup kills what is left in the cgroup of a guard whose
// watchdog never started and removes it, once the kernel has let its last
// member go (a sandbox helper's exit waits for its namespaces' teardown).
func dropLeftCgroup(dir string) {
	killCgroup(dir, 2*time.Second)
	for i := 0; i < 200; i++ {
		if err := unix.Rmdir(dir); !errors.Is(err, unix.EBUSY) {
			return
		}
		time.Sleep(10 * time.Millisecond) // the emptying of a cgroup has no event here to wait on
	}
}

// leaveGuardCgroup makes cmd start in the nearest cgroup above every
// guard's, when the caller runs in a guard's cgroup.
func leaveGuardCgroup(cmd *exec.Cmd) (done func(), err error) {
	done = func() {}
	own, err := ownCgroup()
	if err != nil {
		return done, nil // no cgroup v2: no guard's cgroup to leave
	}
	out := own
	for strings.HasPrefix(filepath.Base(out), cgroupPrefix) {
		out = filepath.Dir(out)
	}
	if out == own || !clone3Works() {
		return done, nil
	}
	root, err := cgroup2Root()
	if err != nil {
		return done, err
	}
	fd, err := unix.Open(filepath.Join(root, out), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return done, fmt.Errorf("proctree: leave the guard's cgroup: %w", err)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = fd
	return func() { unix.Close(fd) }, nil
}

// clone3Works reports whether clone3, which CLONE_INTO_CGROUP needs, can be
// called: a runtime policy's guard refuses it to the tree it traces (its
// flags could ask for an untraced child), and old kernels lack it. A
// clone3 with no arguments fails with EINVAL where it exists.
func clone3Works() bool {
	_, _, e := unix.Syscall(unix.SYS_CLONE3, 0, 0, 0)
	return e != unix.ENOSYS
}
