package proctree

import (
	"errors"
	"os"
	"syscall"
)

// keeperWorks: macOS has no subreaper, so a keeper would lose the
// orphans it is there to hold.
func keeperWorks() bool { return false }

func socketPair() (*os.File, *os.File, error) {
	return nil, nil, errors.New("proctree: no keeper on macOS")
}

func releaseStdio(int) {}

func plainAttrOS(*syscall.SysProcAttr) bool { return false }

func waitExit(pid int) (syscall.WaitStatus, error) {
	var ws syscall.WaitStatus
	_, err := syscall.Wait4(pid, &ws, 0, nil)
	return ws, err
}

// keeperAttr is attr: macOS has no parent-death signal (and no keeper).
func keeperAttr(attr *syscall.SysProcAttr) *syscall.SysProcAttr { return attr }
