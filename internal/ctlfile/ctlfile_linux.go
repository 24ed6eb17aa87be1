package ctlfile

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// openedPath is the kernel's path of the open file f (its descriptor's
// link in /proc), or, without /proc, its name resolved again.
func openedPath(f *os.File, path string, st os.FileInfo) string {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		return openedPathByName(path, st)
	}
	if strings.HasSuffix(p, " (deleted)") || !strings.HasPrefix(p, "/") {
		return "" // gone from every directory, or no path at all
	}
	return p
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
