package sandbox

import (
	"os"

	"golang.org/x/sys/unix"
)

// NewControl makes a control socket pair for one run: pass child as the
// first of cmd.ExtraFiles (and close it after the start), set
// prep.Control before calling prep.Argv, and probe through the returned
// Control.
func NewControl() (ctl *Control, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	return newControl(os.NewFile(uintptr(fds[0]), "sandbox-control")), os.NewFile(uintptr(fds[1]), "sandbox-control-child"), nil
}
