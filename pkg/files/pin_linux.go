package files

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// fdPath names the open descriptor fd as a path whose open reaches that
// very file (a /proc magic link), not whatever a name now points to.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// noOtherOpen reports whether no other open file description reaches the
// file f has open, read-only, so that nothing can write it after the
// commit replaces its name: a write lease is granted only then (and only
// to the file's owner). It is taken and given back at once.
func noOtherOpen(f *os.File) bool {
	fd := int(f.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_WRLCK); err != nil {
		return false
	}
	_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_UNLCK)
	return true
}
