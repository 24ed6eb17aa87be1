package files

import (
	"os"

	"golang.org/x/sys/unix"
)

// birthOf is the birth time of the inode f has open, in nanoseconds, or 0
// where the file system keeps none.
func birthOf(f *os.File) int64 {
	var stx unix.Statx_t
	if unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_BTIME, &stx) != nil || stx.Mask&unix.STATX_BTIME == 0 {
		return 0
	}
	return stx.Btime.Sec*1e9 + int64(stx.Btime.Nsec)
}
