package proctree

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// macOS has no cgroups: a Guard there is always in environ mode.
var errNoCgroup = errors.New("proctree: no cgroups on macOS")

func makeCgroup(string) (string, int, error)      { return "", -1, errNoCgroup }
func cgroupPopulated(string) (bool, error)        { return false, errNoCgroup }
func killCgroup(string, time.Duration) bool       { return false }
func leaveGuardCgroups(*exec.Cmd) (func(), error) { return func() {}, nil }
func applyCgroup(*syscall.SysProcAttr, int)       {}
func closeFD(fd int)                              { _ = unix.Close(fd) }
func rmdir(dir string)                            { _ = os.Remove(dir) }

// processEnviron returns the NUL-separated environment pid started with:
// what follows the arguments in kern.procargs2.
func processEnviron(pid int) ([]byte, error) {
	b, err := unix.SysctlRaw("kern.procargs2", pid)
	if err != nil {
		return nil, err
	}
	if len(b) < 4 {
		return nil, errors.New("proctree: short kern.procargs2")
	}
	argc := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	// The executable path, its padding, then argc arguments.
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = bytes.TrimLeft(b[i:], "\x00")
	}
	for ; argc > 0 && len(b) > 0; argc-- {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return nil, nil
		}
		b = b[i+1:]
	}
	return b, nil
}
