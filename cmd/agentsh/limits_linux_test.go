package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// zeroLimits sets the resource limits that a program needs to start (its
// descriptors, address space, data, stack and file size) of process pid
// to zero, soft and hard, as prlimit(2) lets a process of the same user.
func zeroLimits(pid int) error {
	for _, r := range []int{unix.RLIMIT_NOFILE, unix.RLIMIT_AS, unix.RLIMIT_DATA, unix.RLIMIT_STACK, unix.RLIMIT_FSIZE} {
		if err := unix.Prlimit(pid, r, &unix.Rlimit{}, nil); err != nil {
			return fmt.Errorf("prlimit %d: %w", r, err)
		}
	}
	return nil
}
