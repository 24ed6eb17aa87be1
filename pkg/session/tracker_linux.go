package session

import (
	"bytes"
	"errors"
	"os"
	"strconv"
)

// lastPID is the id most recently allocated in this PID namespace: the
// fifth field of /proc/loadavg.
func lastPID() (int, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := bytes.Fields(b)
	if len(f) < 5 {
		return 0, errors.New("short /proc/loadavg")
	}
	return strconv.Atoi(string(f[4]))
}
