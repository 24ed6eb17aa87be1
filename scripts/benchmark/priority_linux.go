package main

import (
	"os/exec"

	"golang.org/x/sys/unix"
)

// normalPriority makes argv run under the normal scheduler when the
// benchmark itself runs at real-time priority (`chrt -f 10 scripts/bench`,
// to keep others' load off the timings). The Go toolchain's builds do not
// finish there on a 2-core machine: the linker's threads spin at a
// priority that the SCHED_OTHER kernel threads they wait for never get
// (minutes at 100% of both cores, until the real-time throttle), and every
// process that waits for an RCU grace period meanwhile waits a second.
func normalPriority(argv []string) []string {
	attr, err := unix.SchedGetAttr(0, 0)
	if err != nil || (attr.Policy != unix.SCHED_FIFO && attr.Policy != unix.SCHED_RR) {
		return argv
	}
	if _, err := exec.LookPath("chrt"); err != nil {
		return argv
	}
	return append([]string{"chrt", "-o", "0"}, argv...)
}
