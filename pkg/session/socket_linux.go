package session

import (
	"os"
	"path/filepath"
	"strconv"
)

// longSocketAddr names a socket whose path is too long for a socket
// address through /proc/self/fd of its directory, held open until the
// returned function is called.
func longSocketAddr(path string) (string, func(), error) {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return "", nil, err
	}
	return "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + filepath.Base(path), func() { d.Close() }, nil
}
