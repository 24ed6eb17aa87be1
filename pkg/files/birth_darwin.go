package files

import (
	"os"
	"syscall"
)

// birthOf is the birth time of the inode f has open, in nanoseconds, or 0
// where the file system keeps none.
func birthOf(f *os.File) int64 {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	return st.Birthtimespec.Nano()
}
