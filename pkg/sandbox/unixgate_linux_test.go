package sandbox

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/sandbox/confine"
)

// Class 9, sockets bound after the start: under --net none (and --net
// proxy) a host daemon's pathname Unix socket that appears while the
// command runs is as unreachable as one that existed at its start, by
// every call that names a peer, while the command's own sockets keep
// working. The attacks run in the test binary's hidden mode sockCommand.

const sockCommand = "__sock"

// sockMain is the hidden mode: "attack DIR" waits for DIR/go, which lists
// "KIND PATH" lines of host sockets, and attacks each; "own" exercises
// the command's own sockets. Each line of output is "name: ok" or
// "name: ERRNO".
func sockMain(args []string) int {
	switch args[0] {
	case "attack":
		return sockAttack(args[1])
	case "own":
		return sockOwn()
	case "orphaned":
		return sockOrphaned(args[1])
	}
	fmt.Println("unknown mode", args[0])
	return 2
}

func sockRes(name string, err error) {
	if err == nil {
		fmt.Printf("%s: ok\n", name)
		return
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		fmt.Printf("%s: %s\n", name, unix.ErrnoName(en))
		return
	}
	fmt.Printf("%s: %v\n", name, err)
}

func sockConnect(typ int, path string) error {
	fd, err := unix.Socket(unix.AF_UNIX, typ, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: path})
}

// rawSockaddrUnix encodes path as a sockaddr_un.
func rawSockaddrUnix(path string) []byte {
	b := make([]byte, 2, 2+len(path)+1)
	binary.NativeEndian.PutUint16(b, unix.AF_UNIX)
	b = append(b, path...)
	return append(b, 0)
}

// sendmmsgTo sends one datagram to path with sendmmsg(2).
func sendmmsgTo(fd int, path string, data []byte) error {
	name := rawSockaddrUnix(path)
	iov := unix.Iovec{Base: &data[0], Len: uint64(len(data))}
	var mm [2]struct {
		hdr unix.Msghdr
		n   uint32
		_   uint32
	}
	mm[0].hdr = unix.Msghdr{Name: &name[0], Namelen: uint32(len(name)), Iov: &iov, Iovlen: 1}
	mm[1] = mm[0]
	n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&mm[0])), 2, 0, 0, 0)
	if e != 0 {
		return e
	}
	if n != 2 || mm[0].n != uint32(len(data)) || mm[1].n != uint32(len(data)) {
		return fmt.Errorf("sendmmsg sent %d, lengths %d %d", n, mm[0].n, mm[1].n)
	}
	return nil
}

func dgramTo(path, how string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	msg := []byte("datagram")
	sa := &unix.SockaddrUnix{Name: path}
	switch how {
	case "sendto":
		return unix.Sendto(fd, msg, 0, sa)
	case "sendmsg":
		_, err := unix.SendmsgN(fd, msg, nil, sa, 0)
		return err
	case "sendmmsg":
		return sendmmsgTo(fd, path, msg)
	case "pair-sendmsg": // a connected socketpair end naming another peer
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fds[0])
		defer unix.Close(fds[1])
		_, err = unix.SendmsgN(fds[0], msg, nil, sa, 0)
		return err
	}
	return fmt.Errorf("unknown %s", how)
}

func sockAttack(dir string) int {
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644); err != nil {
		fmt.Println("ready:", err)
		return 1
	}
	var list []byte
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go"))
		if err == nil && bytes.HasSuffix(b, []byte("end\n")) {
			list = b
			break
		}
		if time.Now().After(deadline) {
			fmt.Println("go: never came")
			return 1
		}
		time.Sleep(10 * time.Millisecond)
	}
	tmp := os.Getenv("TMPDIR")
	for i, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		loc, kind, path := f[0], f[1], f[2]
		n := loc + "/" + kind
		switch kind {
		case "stream":
			sockRes(n+" connect", sockConnect(unix.SOCK_STREAM, path))
			link := filepath.Join(tmp, "link"+strconv.Itoa(i))
			if err := os.Symlink(path, link); err == nil {
				sockRes(n+" symlink", sockConnect(unix.SOCK_STREAM, link))
			}
			if err := os.Chdir(filepath.Dir(path)); err == nil {
				sockRes(n+" relative", sockConnect(unix.SOCK_STREAM, filepath.Base(path)))
				_ = os.Chdir(dir)
			}
			fmt.Printf("%s race: %s\n", n, sockRace(path, filepath.Join(tmp, "race"+strconv.Itoa(i)+".sock")))
		case "seqpacket":
			sockRes(n+" connect", sockConnect(unix.SOCK_SEQPACKET, path))
		case "dgram":
			sockRes(n+" connect", sockConnect(unix.SOCK_DGRAM, path))
			for _, how := range []string{"sendto", "sendmsg", "sendmmsg", "pair-sendmsg"} {
				sockRes(n+" "+how, dgramTo(path, how))
			}
		}
	}
	fmt.Println("attack: done")
	return 0
}

// sockOrphaned loads the gate's filter on this thread with no one
// serving it (its listener closed, as if the helper's gate were gone) and
// tries the gated calls: each must fail, none reach path.
func sockOrphaned(path string) int {
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		sockRes("no_new_privs", err)
		return 1
	}
	fd, err := confine.LoadGateFilter()
	if err != nil {
		sockRes("filter", err)
		return 1
	}
	unix.Close(fd)
	sockRes("orphaned connect", sockConnect(unix.SOCK_STREAM, path))
	for _, how := range []string{"sendto", "sendmsg", "sendmmsg"} {
		sockRes("orphaned "+how, dgramTo(path+".dgram", how))
	}
	// What the gate does not cover still works.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		_, err = unix.Write(fds[0], []byte("x"))
	}
	sockRes("orphaned socketpair", err)
	return 0
}

// sockRace connects again and again through one sockaddr buffer that
// another goroutine keeps flipping between the command's own socket and the
// host's, so that the address changes while the gate decides. It reports
// how many connects succeeded (only the own socket may be reached: the
// host listener counts its own).
func sockRace(host, own string) string {
	ln, err := net.Listen("unix", own)
	if err != nil {
		return "listen: " + err.Error()
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	a, b := rawSockaddrUnix(host), rawSockaddrUnix(own)
	buf := make([]byte, max(len(a), len(b)))
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			copy(buf, a)
			copy(buf, b)
		}
	}()
	var ok atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
				if err != nil {
					return
				}
				_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
				if e == 0 {
					ok.Add(1)
				}
				unix.Close(fd)
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	<-done
	return "connected " + strconv.FormatInt(ok.Load(), 10) + " of 600"
}

// sockOwn exercises the command's own sockets in its private temp dir.
func sockOwn() int {
	tmp := os.Getenv("TMPDIR")
	// A stream echo server, reached by absolute and relative path, through
	// a symlink, and with a large blocking send.
	srv := filepath.Join(tmp, "own.sock")
	ln, err := net.Listen("unix", srv)
	if err != nil {
		sockRes("listen", err)
		return 1
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						_, _ = c.Write(buf[:n])
					}
					if err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	echo := func(path string, size int) error {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
			return err
		}
		msg := bytes.Repeat([]byte("x"), size)
		errc := make(chan error, 1)
		go func() {
			// sendmsg without an address, as a chatty program would.
			n, err := unix.SendmsgN(fd, msg, nil, nil, 0)
			if err == nil && n != size {
				err = fmt.Errorf("sent %d of %d", n, size)
			}
			errc <- err
		}()
		got := 0
		buf := make([]byte, 64<<10)
		for got < size {
			n, err := unix.Read(fd, buf)
			if err != nil || n == 0 {
				return fmt.Errorf("read after %d: %v", got, err)
			}
			got += n
		}
		return <-errc
	}
	sockRes("stream absolute", echo(srv, 5))
	must := func(err error) {
		if err != nil {
			sockRes("setup", err)
		}
	}
	must(os.Chdir(tmp))
	sockRes("stream relative", echo("own.sock", 5))
	must(os.Symlink(srv, filepath.Join(tmp, "own.link")))
	sockRes("stream symlink", echo(filepath.Join(tmp, "own.link"), 5))
	sockRes("stream 4MiB", echo(srv, 4<<20))

	// SCM_RIGHTS over the command's own socket: a pipe's read end.
	sockRes("scm_rights", func() error {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			return err
		}
		var p [2]int
		if err := unix.Pipe(p[:]); err != nil {
			return err
		}
		if _, err := unix.Write(p[1], []byte("through")); err != nil {
			return err
		}
		if err := unix.Sendmsg(fds[0], []byte{1}, unix.UnixRights(p[0]), nil, 0); err != nil {
			return err
		}
		oob := make([]byte, 64)
		_, oobn, _, _, err := unix.Recvmsg(fds[1], make([]byte, 1), oob, 0)
		if err != nil {
			return err
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			return fmt.Errorf("control %v %v", msgs, err)
		}
		got, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(got) != 1 {
			return fmt.Errorf("rights %v %v", got, err)
		}
		b := make([]byte, 16)
		n, err := unix.Read(got[0], b)
		if err != nil || string(b[:n]) != "through" {
			return fmt.Errorf("read %q %v", b[:n], err)
		}
		return nil
	}())

	// Seqpacket and datagram servers of its own.
	sp := filepath.Join(tmp, "own.seq")
	spl, err := net.Listen("unixpacket", sp)
	if err == nil {
		go func() {
			c, err := spl.Accept()
			if err == nil {
				b := make([]byte, 16)
				n, _ := c.Read(b)
				_, _ = c.Write(b[:n])
			}
		}()
	}
	sockRes("seqpacket", func() error {
		if err != nil {
			return err
		}
		c, err := net.Dial("unixpacket", sp)
		if err != nil {
			return err
		}
		defer c.Close()
		_, _ = c.Write([]byte("seq"))
		b := make([]byte, 16)
		n, err := c.Read(b)
		if err != nil || string(b[:n]) != "seq" {
			return fmt.Errorf("got %q %v", b[:n], err)
		}
		return nil
	}())
	dg := filepath.Join(tmp, "own.dgram")
	dfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err == nil {
		err = unix.Bind(dfd, &unix.SockaddrUnix{Name: dg})
	}
	if err != nil {
		sockRes("dgram bind", err)
		return 1
	}
	for _, how := range []string{"sendto", "sendmsg", "sendmmsg", "pair-sendmsg"} {
		sockRes("dgram "+how, dgramTo(dg, how))
	}
	sockRes("dgram connect", sockConnect(unix.SOCK_DGRAM, dg))
	received := 0
	b := make([]byte, 64)
	for {
		n, _, err := unix.Recvfrom(dfd, b, unix.MSG_DONTWAIT)
		if err != nil {
			break
		}
		if string(b[:n]) == "datagram" {
			received++
		}
	}
	fmt.Printf("dgram received: %d\n", received)

	// An abstract socket is private to the namespace: its own works.
	abs := "@agentplane-gate-" + strconv.Itoa(os.Getpid())
	al, err := net.Listen("unix", abs)
	if err == nil {
		go func() {
			if c, err := al.Accept(); err == nil {
				c.Close()
			}
		}()
		var c net.Conn
		if c, err = net.Dial("unix", abs); err == nil {
			c.Close()
		}
	}
	sockRes("abstract", err)
	// Socket pairs and loopback TCP are untouched.
	sockRes("socketpair", func() error {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			return err
		}
		if _, err := unix.Write(fds[0], []byte("p")); err != nil {
			return err
		}
		_, err = unix.Read(fds[1], make([]byte, 1))
		return err
	}())
	sockRes("tcp loopback", func() error {
		tl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer tl.Close()
		go func() {
			if c, err := tl.Accept(); err == nil {
				_, _ = c.Write([]byte("t"))
				c.Close()
			}
		}()
		c, err := net.Dial("tcp", tl.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Read(make([]byte, 1))
		return err
	}())
	sockRes("udp loopback sendto", func() error {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return err
		}
		defer u.Close()
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.WriteToUDP([]byte("u"), u.LocalAddr().(*net.UDPAddr)); err != nil {
			return err
		}
		_ = u.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _, err = u.ReadFromUDP(make([]byte, 4))
		return err
	}())
	fmt.Println("own: done")
	return 0
}

// hostListeners are a stream, a seqpacket and a datagram socket bound in
// dir, counting what reaches them.
type hostListeners struct {
	hits  atomic.Int64
	close []func()
	lines []string
}

func (h *hostListeners) listen(loc, dir string) error {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	base := filepath.Join(dir, "g"+hex.EncodeToString(rnd[:]))
	for _, kind := range []string{"stream", "seqpacket", "dgram"} {
		path := base + "-" + kind + ".sock"
		switch kind {
		case "dgram":
			c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
			if err != nil {
				return err
			}
			go func() {
				b := make([]byte, 64)
				for {
					if _, _, err := c.ReadFrom(b); err != nil {
						return
					}
					h.hits.Add(1)
				}
			}()
			h.close = append(h.close, func() { c.Close(); os.Remove(path) })
		default:
			network := "unix"
			if kind == "seqpacket" {
				network = "unixpacket"
			}
			ln, err := net.Listen(network, path)
			if err != nil {
				return err
			}
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					h.hits.Add(1)
					c.Close()
				}
			}()
			h.close = append(h.close, func() { ln.Close(); os.Remove(path) })
		}
		h.lines = append(h.lines, loc+" "+kind+" "+path)
	}
	return nil
}

func (h *hostListeners) stop() {
	for _, f := range h.close {
		f()
	}
}

// runLateSockets runs the attack in p and, once it has started, binds
// host listeners in each of locs (name → directory); it returns the
// attack's output and how many connections or datagrams reached them.
// With want > 0 it waits (a bounded poll: a connection or datagram the
// attack queued counts only once a listener goroutine has taken it) for
// that many hits; with want 0 it can only give stray ones a moment.
func runLateSockets(t *testing.T, p Policy, ws string, locs map[string]string, want int64) (string, int64) {
	t.Helper()
	syncDir := filepath.Join(ws, "sync")
	must(t, os.RemoveAll(syncDir))
	must(t, os.MkdirAll(syncDir, 0o777))
	h := &hostListeners{}
	t.Cleanup(h.stop)
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if _, err := os.Stat(filepath.Join(syncDir, "ready")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				errc <- errors.New("the command never became ready")
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Only now, with the command running, do the sockets appear.
		var lerr error
		for loc, dir := range locs {
			if err := h.listen(loc, dir); err != nil && lerr == nil {
				lerr = err
			}
		}
		err := os.WriteFile(filepath.Join(syncDir, "go"), []byte(strings.Join(h.lines, "\n")+"\nend\n"), 0o644)
		if lerr != nil {
			err = lerr
		}
		errc <- err
	}()
	res, _ := sandboxed(t, p, ws, self(t), sockCommand, "attack", syncDir)
	wg.Wait()
	must(t, <-errc)
	o := out(res)
	if !strings.Contains(o, "attack: done\n") {
		t.Fatalf("attack did not finish: exit %d\n%s\nstderr %s", res.ExitCode, o, text(res.Stderr))
	}
	if want == 0 {
		// Let anything that leaked arrive before counting.
		time.Sleep(100 * time.Millisecond)
		return o, h.hits.Load()
	}
	for deadline := time.Now().Add(60 * time.Second); h.hits.Load() < want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	return o, h.hits.Load()
}

// lateSocketDirs are where host daemons bind sockets: the system's temp
// dir and /run, $HOME, a directory beside the workspace, agentplane's
// state directory.
func lateSocketDirs(t *testing.T, parent string, stateDir string) map[string]string {
	locs := map[string]string{"outside": filepath.Join(parent, "outside"), "state": stateDir}
	if st, err := os.Stat("/tmp"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/tmp", "agentplane-gate-")
		must(t, err)
		t.Cleanup(func() { os.RemoveAll(d) })
		locs["tmp"] = d
	}
	if os.Geteuid() == 0 {
		if st, err := os.Stat("/run"); err == nil && st.IsDir() {
			d, err := os.MkdirTemp("/run", "agentplane-gate-")
			must(t, err)
			t.Cleanup(func() { os.RemoveAll(d) })
			locs["run"] = d
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		if d, err := os.MkdirTemp(home, ".agentplane-gate-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			locs["home"] = d
		}
	}
	return locs
}

func TestEscapeNetNoneLateUnixSockets(t *testing.T) {
	requireSandbox(t)
	parent, ws, _ := dirs(t)
	stateDir := filepath.Join(ws, "state")
	must(t, os.MkdirAll(stateDir, 0o700))
	locs := lateSocketDirs(t, parent, stateDir)
	cases := []struct {
		name string
		p    Policy
	}{
		{"workspace-write,none", Policy{Mode: ModeWorkspaceWrite, Net: NetNone}},
		{"no-fs,none", Policy{Net: NetNone}},
		{"workspace-write,proxy", Policy{Mode: ModeWorkspaceWrite, Net: NetProxy, AllowHosts: []string{"127.0.0.1:1"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.p
			p.Workspace, p.Protect = ws, []string{stateDir}
			o, hits := runLateSockets(t, p, ws, locs, 0)
			n := 0
			for _, line := range strings.Split(o, "\n") {
				if !strings.Contains(line, "/") {
					continue
				}
				n++
				if strings.HasSuffix(line, ": ok") {
					t.Errorf("reached a host socket: %s", line)
				}
				if strings.Contains(line, " race: ") && !strings.Contains(line, "race: connected ") {
					t.Errorf("race attack did not run: %s", line)
				}
			}
			if want := len(locs) * 10; n < want {
				t.Errorf("%d attacks ran, want %d:\n%s", n, want, o)
			}
			if hits != 0 {
				t.Errorf("%d connections or datagrams reached the host listeners:\n%s", hits, o)
			}
			if !strings.Contains(o, "/stream connect: EACCES\n") {
				t.Errorf("want EACCES for a refused connect:\n%s", o)
			}
		})
	}
	// Control: with the host network every attack works, so each line
	// above proves the gate.
	t.Run("control,host", func(t *testing.T) {
		o, hits := runLateSockets(t, Policy{Mode: ModeWorkspaceWrite, Workspace: ws}, ws, locs, int64(len(locs)*9))
		for _, line := range strings.Split(o, "\n") {
			if strings.Contains(line, "/") && !strings.HasSuffix(line, ": ok") && !strings.Contains(line, " race: ") {
				t.Errorf("control attack failed: %s", line)
			}
		}
		if hits < int64(len(locs)*9) || !strings.Contains(o, "race: connected") {
			t.Errorf("control: only %d hits:\n%s", hits, o)
		}
	})
}

// A gate whose listener is gone fails closed: the kernel refuses every
// notified call (ENOSYS), nothing reaches the host.
func TestUnixGateFailsClosed(t *testing.T) {
	dir := t.TempDir()
	h := &hostListeners{}
	t.Cleanup(h.stop)
	must(t, h.listen("dir", dir))
	var stream string
	for _, l := range h.lines {
		if f := strings.Fields(l); f[1] == "stream" {
			stream = f[2]
		}
	}
	dgram := strings.TrimSuffix(stream, "-stream.sock") + "-dgram.sock"
	must(t, os.Symlink(dgram, stream+".dgram"))
	cmd := exec.Command(self(t), sockCommand, "orphaned", stream)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	wantLines(t, string(b), "orphaned connect: ENOSYS", "orphaned sendto: ENOSYS", "orphaned sendmsg: ENOSYS",
		"orphaned sendmmsg: ENOSYS", "orphaned socketpair: ok")
	time.Sleep(100 * time.Millisecond)
	if n := h.hits.Load(); n != 0 {
		t.Errorf("%d calls reached the listeners", n)
	}
}

// The command's own Unix sockets keep working under --net none.
func TestNetNoneOwnUnixSockets(t *testing.T) {
	requireSandbox(t)
	_, ws, _ := dirs(t)
	for _, p := range []Policy{{Mode: ModeWorkspaceWrite, Net: NetNone}, {Net: NetNone}} {
		p.Workspace = ws
		res, prep := sandboxed(t, p, ws, self(t), sockCommand, "own")
		o := out(res)
		wantLines(t, o, "stream absolute: ok", "stream relative: ok", "stream symlink: ok", "stream 4MiB: ok",
			"scm_rights: ok", "seqpacket: ok", "dgram sendto: ok", "dgram sendmsg: ok", "dgram sendmmsg: ok",
			"dgram pair-sendmsg: ok", "dgram connect: ok", "dgram received: 5", "abstract: ok", "socketpair: ok",
			"tcp loopback: ok", "udp loopback sendto: ok", "own: done")
		if _, ok := prep.Report["unix_socket_gate"]; !ok {
			t.Errorf("report: %v", prep.Report)
		}
	}
}

// Real programs: Python's multiprocessing with the forkserver start method
// (a Unix socket server in the temp dir, descriptors passed over it) and
// an AF_UNIX echo server and client in $TMPDIR.
func TestNetNonePythonUnixSockets(t *testing.T) {
	python := realPython(t)
	_, ws, _ := dirs(t)
	// A file, not stdin: forkserver's children import the main module.
	writeFiles(t, ws, map[string]string{"socks.py": `import multiprocessing as mp, os, socket, threading
def sq(x): return x * x
if __name__ == "__main__":
    ctx = mp.get_context("forkserver")
    with ctx.Pool(2) as pool:
        print("forkserver", sum(pool.map(sq, range(10))))
    path = os.path.join(os.environ["TMPDIR"], "echo.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path); srv.listen(1)
    def serve():
        c, _ = srv.accept(); c.sendall(c.recv(16)); c.close()
    threading.Thread(target=serve).start()
    cl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cl.connect(path); cl.sendall(b"echo"); print("unix", cl.recv(16).decode())
`})
	o := toolchainRun(t, ws, python+" socks.py")
	wantLines(t, o, "forkserver 285", "unix echo")
}

// TestEscapeGateCredentials: the gate makes a command's sendmsg itself,
// and the kernel takes a send's credentials (SCM_CREDENTIALS, which a
// peer with SO_PASSCRED reads) from the sender and checks those a message
// claims against the sender's privileges: the helper's. Without the
// gate's own check a command claimed pid 1 and root, and every plain
// sendmsg of a --user command reached its peer as root's. The kernel
// refuses the claim to the same command without the gate (--net host).
func TestEscapeGateCredentials(t *testing.T) {
	requireRoot(t)
	requireSandbox(t)
	dir, err := os.MkdirTemp("", "gate-credentials")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	prog := filepath.Join(dir, "attack")
	data, err := os.ReadFile(self(t))
	must(t, err)
	must(t, os.WriteFile(prog, data, 0o755))
	for _, c := range []struct {
		name string
		p    Policy
	}{
		{"root", Policy{Mode: ModeReadOnly, Net: NetNone}},
		{"nobody", Policy{Mode: ModeReadOnly, Net: NetNone, User: "nobody"}},
		{"nobody without the gate", Policy{Mode: ModeReadOnly, User: "nobody"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, _ := sandboxed(t, c.p, "/", prog, attackCommand, "passcred")
			o := out(res)
			var pid, uid, gid int
			for _, line := range strings.Split(o, "\n") {
				if s, ok := strings.CutPrefix(line, "self: "); ok {
					fmt.Sscanf(s, "pid=%d uid=%d gid=%d", &pid, &uid, &gid)
				}
			}
			wantLines(t, o, "forged: EPERM", fmt.Sprintf("plain: peer saw pid=%d uid=%d gid=%d", pid, uid, gid))
			if c.p.User != "" && uid == 0 {
				t.Errorf("the command ran as root: %q", o)
			}
		})
	}
}

// TestEscapeGateNetlink: a netlink message that names its destination
// does what its sender's capabilities allow, and the gate, which makes the
// addressed sends, is the sender: without its own rule a root command
// without CAP_NET_ADMIN set lo down (created veth pairs, added addresses
// and routes) with an addressed sendto, which the kernel refuses it
// without the gate. A dump, which needs no capability, still works.
func TestEscapeGateNetlink(t *testing.T) {
	requireRoot(t)
	requireSandbox(t)
	for _, net := range []string{NetNone, NetHost} {
		t.Run(net, func(t *testing.T) {
			res, _ := sandboxed(t, Policy{Mode: ModeReadOnly, Net: net}, "/", self(t), attackCommand, "netlink")
			wantLines(t, out(res), "netlink-admin: EPERM", "netlink-dump: ok")
		})
	}
}
