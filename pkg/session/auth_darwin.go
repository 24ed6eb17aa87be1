package session

import (
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

const noFollow = syscall.O_NOFOLLOW

// identityOf is the uid alone on macOS: it has no namespaces and no
// no_new_privs to compare. A Seatbelt-sandboxed caller is kept out by its
// profile instead (it cannot read what the sandbox hides), and by the
// session secret.
func identityOf(int) (peerIdentity, error) { return peerIdentity{UID: os.Geteuid()}, nil }

// peerOf reads the peer's effective uid from the socket (LOCAL_PEERCRED),
// so that another user is refused even if it got hold of the secret.
func peerOf(c *net.UnixConn) (id peerIdentity, still func() error, release func(), err error) {
	still, release = func() error { return nil }, func() {}
	raw, err := c.SyscallConn()
	if err != nil {
		return id, still, release, err
	}
	var cred *unix.Xucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	}); err != nil {
		return id, still, release, err
	}
	if serr != nil {
		return id, still, release, serr
	}
	return peerIdentity{UID: int(cred.Uid)}, still, release, nil
}
