package files

import (
	"io/fs"
	"syscall"
)

// changeTime is the inode change time of fi (ok false when unknown): a
// write in place changes it even when the size and the modification time
// are set back as they were, and nothing but the kernel sets it.
func changeTime(fi fs.FileInfo) (syscall.Timespec, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return syscall.Timespec{}, false
	}
	return ctimOf(st), true
}
