//go:build !linux

package ctlfile

import (
	"os"
	"strconv"
	"syscall"
)

// openedPath is where the open file f is: its name resolved again, if
// that leads to f's very file.
func openedPath(_ *os.File, path string, st os.FileInfo) string {
	return openedPathByName(path, st)
}

func links(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(s.Nlink)
	}
	return 1
}

// identity is the file's device, inode and birth time: an inode number
// is given again once freed, a birth time with it only to the same file.
func identity(_ *os.File, st os.FileInfo) string {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return strconv.FormatUint(uint64(s.Dev), 10) + ":" + strconv.FormatUint(uint64(s.Ino), 10) + ":" +
		strconv.FormatInt(int64(s.Birthtimespec.Sec), 10) + "." + strconv.FormatInt(int64(s.Birthtimespec.Nsec), 10)
}

// IdentityOf is identity for the file at path (its links followed), or ""
// when it cannot be told.
func IdentityOf(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	return identity(nil, st)
}
