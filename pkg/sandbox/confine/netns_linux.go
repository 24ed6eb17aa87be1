package confine

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// handOverProxyListener is the helper's half of --net proxy, run inside the
// new network namespace after the loopback is up: it listens on
// 127.0.0.1:port there, sends the listening descriptor over fd, and closes
// both, so that the command inherits neither.
func handOverProxyListener(fd, port int) error {
	defer unix.Close(fd)
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %v", err)
	}
	defer unix.Close(ln)
	if err := unix.SetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fmt.Errorf("setsockopt: %v", err)
	}
	if err := unix.Bind(ln, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fmt.Errorf("bind 127.0.0.1:%d: %v", port, err)
	}
	if err := unix.Listen(ln, unix.SOMAXCONN); err != nil {
		return fmt.Errorf("listen: %v", err)
	}
	if err := unix.Sendmsg(fd, []byte{1}, unix.UnixRights(ln), nil, 0); err != nil {
		return fmt.Errorf("cannot hand the listener to agentplane: %v", err)
	}
	return nil
}

// proxyFD is the helper's descriptor of its end of the handover socket
// pair: the extra file after the spec's pipe (Prepared.Launch).
func (sp Spec) proxyFD() int { return SpecFD(sp.Control) + 1 }
