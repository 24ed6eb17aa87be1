//go:build !linux

package ctlfile

import (
	"os"
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
