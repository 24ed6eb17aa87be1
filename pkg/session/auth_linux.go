package session

import (
	"bufio"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/execguard"
)

const noFollow = unix.O_NOFOLLOW

// soPeerPidfd is SO_PEERPIDFD (Linux 6.5): a pidfd of the peer, which
// cannot name a recycled pid.
const soPeerPidfd = 77

// identityOf reads pid's uid, namespaces and no_new_privs from /proc.
func identityOf(pid int) (peerIdentity, error) {
	var id peerIdentity
	base := "/proc/" + strconv.Itoa(pid)
	var err error
	if id.UserNS, err = os.Readlink(base + "/ns/user"); err != nil {
		return id, err
	}
	if id.MountNS, err = os.Readlink(base + "/ns/mnt"); err != nil {
		return id, err
	}
	if id.NetNS, err = os.Readlink(base + "/ns/net"); err != nil {
		return id, err
	}
	f, err := os.Open(base + "/status")
	if err != nil {
		return id, err
	}
	defer f.Close()
	id.UID = -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		switch k {
		case "Uid":
			if len(fields) > 1 {
				id.UID, _ = strconv.Atoi(fields[1]) // effective
			}
		case "NoNewPrivs":
			id.NoNewPrivs = fields[0] == "1"
		case "TracerPid":
			if fields[0] != "0" && isGuard(fields[0]) {
				id.Guard = fields[0]
			}
		}
	}
	if id.UID < 0 {
		return id, errors.New("no Uid in /proc status")
	}
	return id, nil
}

// peerOf identifies the process at the other end of c. The pidfd taken
// from the socket is checked alive by still, after /proc was read, so
// what was read belongs to the peer and not to a process that took its
// pid meanwhile; release closes it.
func peerOf(c *net.UnixConn) (id peerIdentity, still func() error, release func(), err error) {
	still, release = func() error { return nil }, func() {}
	raw, err := c.SyscallConn()
	if err != nil {
		return id, still, release, err
	}
	var cred *unix.Ucred
	pidfd := -1
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if serr == nil {
			if p, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, soPeerPidfd); err == nil {
				pidfd = p
			}
		}
	}); err != nil {
		return id, still, release, err
	}
	if serr != nil {
		return id, still, release, serr
	}
	if pidfd >= 0 {
		release = func() { unix.Close(pidfd) }
		still = func() error {
			if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
				return errors.New("the peer exited before it could be identified")
			}
			return nil
		}
	}
	if cred.Pid <= 0 {
		return id, still, release, errors.New("the peer's pid is not visible (another pid namespace)")
	}
	if id, err = identityOf(int(cred.Pid)); err != nil {
		return id, still, release, err
	}
	// The uid the kernel recorded at connect() is authoritative.
	if int(cred.Uid) != id.UID {
		id.UID = int(cred.Uid)
	}
	return id, still, release, nil
}

// isGuard reports whether pid is a runtime policy guard (execguard's
// hidden command). A traced process cannot change its tracer, so the
// command cannot make this false.
func isGuard(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil {
		return true // a tracer that hides its command line is not trusted to be none
	}
	args := strings.Split(string(b), "\x00")
	return len(args) > 1 && args[1] == execguard.Command
}
