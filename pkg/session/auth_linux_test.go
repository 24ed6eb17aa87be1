package session

import (
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAdmitPeerGone: the caller is identified when the server accepts its
// connection, before its request; a caller that is gone by the time its
// request is admitted is refused, as one gone while /proc was read would
// be (a process that took its pid meanwhile is not it).
func TestAdmitPeerGone(t *testing.T) {
	if path := os.Getenv("AGENTPLANE_PEER_CHILD"); path != "" {
		c, err := net.Dial("unix", path)
		if err != nil {
			os.Exit(3)
		}
		_, _ = io.Copy(io.Discard, os.Stdin) // until the test lets go
		c.Close()
		os.Exit(0)
	}
	a, err := newAuthority()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	child := exec.Command(os.Args[0], "-test.run=^TestAdmitPeerGone$")
	child.Env = append(os.Environ(), "AGENTPLANE_PEER_CHILD="+path)
	hold, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	who := a.identify(c)
	defer who.release()
	if err := a.admit(who, a.token); err != nil {
		t.Fatalf("a live caller like the server refused: %v", err)
	}
	if err := a.admit(who, "wrong"); err == nil || !strings.Contains(err.Error(), "secret") {
		t.Fatalf("a wrong secret: %v", err)
	}
	hold.Close()
	if err := child.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	if !hasPeerPidfd(t, c) {
		t.Skip("no SO_PEERPIDFD (Linux 6.5): a recycled pid is not told from the caller")
	}
	err = a.admit(who, a.token)
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("a caller gone before its request was admitted: %v", err)
	}
}

func hasPeerPidfd(t *testing.T, c net.Conn) bool {
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	ok := false
	_ = raw.Control(func(fd uintptr) {
		if p, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, soPeerPidfd); err == nil {
			unix.Close(p)
			ok = true
		}
	})
	return ok
}
