package proctree

import (
	"os"
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

// plainAttrOS: nothing of attr but its session and group settings, and a
// cgroup, which the keeper's child joins by inheritance.
func plainAttrOS(a *syscall.SysProcAttr) bool {
	return a.Credential == nil && !a.Ptrace && !a.Setctty && !a.Noctty && !a.Foreground &&
		a.Pdeathsig == 0 && a.Cloneflags == 0 && a.Unshareflags == 0 && a.UidMappings == nil &&
		a.GidMappings == nil && a.AmbientCaps == nil && a.PidFD == nil && a.Chroot == ""
}
