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

func identity(st os.FileInfo) string {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return strconv.FormatUint(uint64(s.Dev), 10) + ":" + strconv.FormatUint(uint64(s.Ino), 10)
	}
	return ""
}
