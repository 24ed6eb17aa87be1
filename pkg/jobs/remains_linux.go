package jobs

import (
	"bytes"
	"os"
	"strconv"
)

// hasEnv reports whether process pid's environment holds the entry kv
// (KEY=VALUE), as /proc shows it.
func hasEnv(pid int, kv string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for _, e := range bytes.Split(b, []byte{0}) {
		if string(e) == kv {
			return true
		}
	}
	return false
}
