package proctree

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// keeperWorks: Linux has child subreapers.
func keeperWorks() bool { return true }

// socketPair returns the two ends of a Unix stream socket, both
// close-on-exec (os/exec clears the flag on the copy it passes).
func socketPair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "keeper"), os.NewFile(uintptr(fds[1]), "keeper"), nil
}

// releaseStdio points the keeper's descriptors 0 to 2 at /dev/null and
// closes the command's extra descriptors (4 on), now that the command has
// its own copies.
func releaseStdio(nextra int) {
	if fd, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
		for i := 0; i < 3; i++ {
			_ = unix.Dup3(fd, i, 0)
		}
		unix.Close(fd)
	}
	for i := 0; i < nextra; i++ {
		_ = syscall.Close(4 + i)
	}
}

// keeperAttr is attr (the command's, which plainAttr accepted) for the
// keeper, with SIGCONT as its parent-death signal, for the reason the
// watchdog has one (watchdogAttr): a keeper the command stopped right
// before it SIGKILLed the guarded process is continued by the kernel in
// that process's exit, and kills what is below it. The command, the
// keeper's child, does not inherit it.
func keeperAttr(attr *syscall.SysProcAttr) *syscall.SysProcAttr {
	a := syscall.SysProcAttr{}
	if attr != nil {
		a = *attr
	}
	a.Pdeathsig = syscall.SIGCONT
	return &a
}

// plainAttrOS: nothing of attr but its session and group settings, and a
// cgroup, which the keeper's child joins by inheritance.
func plainAttrOS(a *syscall.SysProcAttr) bool {
	return a.Credential == nil && !a.Ptrace && !a.Setctty && !a.Noctty && !a.Foreground &&
		a.Pdeathsig == 0 && a.Cloneflags == 0 && a.Unshareflags == 0 && a.UidMappings == nil &&
		a.GidMappings == nil && a.AmbientCaps == nil && a.PidFD == nil && a.Chroot == ""
}

// waitExit waits for the child pid to exit without reaping it (WNOWAIT)
// and returns its wait status, which the zombie's /proc/PID/stat carries
// (field 52, exit_code, in waitpid's form).
func waitExit(pid int) (syscall.WaitStatus, error) {
	if err := WaitChild(pid); err != nil {
		return 0, err
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, errors.New("proctree: unreadable stat")
	}
	f := strings.Fields(string(b[i+2:])) // field N is f[N-3]
	if len(f) < 50 {
		return 0, errors.New("proctree: stat without exit_code")
	}
	n, err := strconv.Atoi(f[49])
	return syscall.WaitStatus(n), err
}
