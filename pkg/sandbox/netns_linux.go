package sandbox

import (
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// hostUnixSockets lists the pathname Unix sockets bound in the caller's
// network namespace, for --net none to cover: neither a network namespace
// nor Landlock (before ABI 9) stops a connect() to one.
func hostUnixSockets() []string {
	data, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 8 || !filepath.IsAbs(f[7]) || seen[f[7]] {
			continue
		}
		p := f[7]
		seen[p] = true
		if st, err := os.Lstat(p); err == nil && st.Mode().Type() == os.ModeSocket {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// handoverPair is the socket pair over which the helper passes the
// listener: SEQPACKET, so that the one message arrives whole.
func handoverPair() ([2]int, error) {
	return unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
}
