package confine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The Unix socket gate closes what the mount namespace cannot under --net
// none and --net proxy: a host daemon that binds a pathname Unix socket
// after the run started (the sockets bound at the start are covered by
// /dev/null). A network namespace does not isolate pathname sockets,
// Landlock before ABI 9 does not mediate them, and a read-only mount does
// not stop a connect() (socket inodes are exempt from EROFS). So every
// syscall that names a peer address (connect; sendto with an address;
// sendmsg and sendmmsg, whose address is in memory) is turned by a seccomp
// filter into a user notification, and the helper (PID 1 of the
// namespaces, outside the command's Landlock domain and filters) carries
// it out itself on a duplicate of the command's socket (pidfd_getfd): it
// copies the address and data once, decides on its copy and makes the call
// with that copy, so nothing the command changes afterwards in its memory
// or its descriptor table counts (never SECCOMP_USER_NOTIF_FLAG_CONTINUE).
//
// The rule: a pathname Unix socket may be reached only when it is bound by
// a socket of the sandbox's own network namespace, that is by a process of
// this run (sock_diag lists the bound inode of every Unix socket of a
// namespace); the helper opens the path first (O_PATH, following symlinks
// as connect would), checks that inode, and connects through
// /proc/self/fd/N, to exactly the inode it checked. Abstract addresses are
// private to the namespace already; other families are held to the
// namespace's loopback. A socket created outside the namespace (one the
// caller passed as a standard descriptor) may not name a peer at all.
// Everything else gets EACCES. If the helper dies the whole namespace dies
// with it (it is PID 1); if only its listener were gone, the kernel would
// fail the notified syscalls with ENOSYS: the gate fails closed.

// gateMaxData bounds what one emulated send copies: a datagram cannot be
// larger than a socket's send buffer, and a stream send may be partial.
const gateMaxData = 8 << 20

// gateMaxControl bounds the ancillary data of one sendmsg (the kernel's
// net.core.optmem_max is far below).
const gateMaxControl = 1 << 20

// sizeofSockaddrStorage is the largest address a call may pass.
const sizeofSockaddrStorage = 128

// uioMaxIov is the kernel's limit on iovecs and sendmmsg vectors.
const uioMaxIov = 1024

// seccomp_notif and seccomp_notif_resp (include/uapi/linux/seccomp.h).
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// GateSyscalls are the syscalls the gate's filter notifies; sendto only
// with a non-NULL address (its fifth argument, a register).
var GateSyscalls = []string{"connect", "sendto(address)", "sendmsg", "sendmmsg"}

// buildGateFilter assembles the notifying filter.
func buildGateFilter() []unix.SockFilter {
	notify := uint32(unix.SECCOMP_RET_USER_NOTIF)
	p := &bpfProg{}
	p.stmt(ldAbs, offArch)
	p.jump(jeqK, auditArch, 1, 0)
	p.stmt(retK, killPr)
	p.stmt(ldAbs, offNr)
	p.jump(jeqK, unix.SYS_CONNECT, 0, 1)
	p.stmt(retK, notify)
	p.jump(jeqK, unix.SYS_SENDMSG, 0, 1)
	p.stmt(retK, notify)
	p.jump(jeqK, unix.SYS_SENDMMSG, 0, 1)
	p.stmt(retK, notify)
	p.jump(jeqK, unix.SYS_SENDTO, 0, 5)
	p.stmt(ldAbs, offArg(4))
	p.jump(jeqK, 0, 0, 2)
	p.stmt(ldAbs, offArg(4)+4)
	p.jump(jeqK, 0, 1, 0)
	p.stmt(retK, notify)
	p.stmt(retK, allow)
	return p.ins
}

// LoadGateFilter installs the notifying filter on the calling thread and
// returns its listener (close-on-exec). WAIT_KILLABLE_RECV keeps a
// signal from interrupting a call the helper has already taken up (which
// would restart it and send the data twice); kernels before 5.19 lack it.
// The helper calls it in startUnixGate; the escape tests of package
// sandbox call it to attack a gate whose listener is gone.
func LoadGateFilter() (int, error) {
	ins := buildGateFilter()
	prog := unix.SockFprog{Len: uint16(len(ins)), Filter: &ins[0]}
	flags := uintptr(unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV)
	fd, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
	if e == unix.EINVAL {
		fd, _, e = unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&prog)))
	}
	runtime.KeepAlive(ins)
	if e == unix.EBUSY {
		return -1, errors.New("the Unix socket gate cannot be installed: a seccomp listener already supervises this process (a sandbox inside a sandbox under --net none)")
	}
	if e != 0 {
		return -1, fmt.Errorf("the Unix socket gate's seccomp listener: %v", e)
	}
	return int(fd), nil
}

// unixGate serves the notifications of one listener.
type unixGate struct {
	listener int
	netDev   uint64 // the namespace's identity (/proc/self/ns/net)
	netIno   uint64

	pidfds map[int]int // thread id → pidfd, see pidfd

	diagMu sync.Mutex
	diag   int // NETLINK_SOCK_DIAG socket in the sandbox's namespace, -1 until needed
}

// startUnixGate loads the filter on the calling (the target's) thread and
// serves it from other threads until the helper exits.
func startUnixGate() error {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return fmt.Errorf("the Unix socket gate cannot identify the network namespace: %v", err)
	}
	fd, err := LoadGateFilter()
	if err != nil {
		return err
	}
	// The caller and the helper hand over to each other on one CPU
	// (Linux 6.6): a gated call then costs tens of microseconds less.
	_, _, _ = unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_SET_FLAGS, unix.SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)
	g := &unixGate{listener: fd, netDev: st.Dev, netIno: st.Ino, diag: -1, pidfds: map[int]int{}}
	go g.serve()
	return nil
}

func (g *unixGate) serve() {
	for {
		var n seccompNotif
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(g.listener), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n)))
		switch e {
		case 0:
			// Inline: a goroutine per call costs a thread wake-up each
			// time; a call that must wait goes on in its own (async).
			g.answer(n)
		case unix.EINTR, unix.ENOENT:
			// Interrupted, or the caller died before it was received.
		default:
			// The listener is broken: the kernel now fails every gated
			// call with ENOSYS, which is closed, not open.
			return
		}
	}
}

func (g *unixGate) answer(n seccompNotif) {
	val, errno := g.handle(n)
	if errno == errAsync {
		return
	}
	g.reply(n.ID, val, errno)
}

// errAsync: the call went on in a goroutine of its own, which answers.
const errAsync = unix.Errno(^uintptr(0))

func (g *unixGate) reply(id uint64, val int64, errno unix.Errno) {
	resp := seccompNotifResp{ID: id}
	if errno != 0 {
		resp.Error = -int32(errno)
	} else {
		resp.Val = val
	}
	// ENOENT: the caller was killed meanwhile; nothing to answer.
	_, _, _ = unix.Syscall(unix.SYS_IOCTL, uintptr(g.listener), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
}

// valid reports whether the caller is still blocked in notification id
// (so its pid still names it).
func (g *unixGate) valid(id uint64) bool {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(g.listener), unix.SECCOMP_IOCTL_NOTIF_ID_VALID, uintptr(unsafe.Pointer(&id)))
	return e == 0
}

// call is one notified syscall being carried out.
type call struct {
	g     *unixGate
	n     seccompNotif
	tid   int
	async bool // a goroutine owns the call (and its descriptors) now
	pidfd int
	sock  int // the helper's duplicate of the caller's socket
	close []int
}

func (c *call) done() {
	for _, fd := range c.close {
		_ = unix.Close(fd)
	}
}

func (g *unixGate) handle(n seccompNotif) (int64, unix.Errno) {
	c := &call{g: g, n: n, tid: int(n.Pid)}
	defer func() {
		if !c.async {
			c.done()
		}
	}()
	pidfd, fresh, err := g.pidfd(c.tid)
	if err != nil {
		return 0, unix.ESRCH
	}
	// A pidfd opened while the notification is pending names the caller,
	// not a process that reused its pid.
	if fresh && !g.valid(n.ID) {
		return 0, unix.ESRCH
	}
	c.pidfd = pidfd
	sock, err := unix.PidfdGetfd(pidfd, int(int32(n.Args[0])), 0)
	if errors.Is(err, unix.ESRCH) && !fresh {
		// The cached thread is gone and its id reused.
		g.forget(c.tid)
		return g.handle(n)
	}
	if err != nil {
		return 0, errnoOf(err)
	}
	c.close = append(c.close, sock)
	c.sock = sock
	switch int(n.Nr) {
	case unix.SYS_CONNECT:
		return c.connect()
	case unix.SYS_SENDTO:
		return c.sendto()
	case unix.SYS_SENDMSG:
		return c.sendmsg(n.Args[1], int(n.Args[2]))
	case unix.SYS_SENDMMSG:
		if c.blocking(0) {
			return c.goAsync(c.sendmmsg)
		}
		return c.sendmmsg()
	}
	return 0, unix.ENOSYS
}

// pidfd returns a pidfd of thread tid, from the cache when it has one
// (fresh is false then). The cache is the serving goroutine's only; a call
// that goes async takes a duplicate.
func (g *unixGate) pidfd(tid int) (fd int, fresh bool, err error) {
	if fd, ok := g.pidfds[tid]; ok {
		return fd, false, nil
	}
	fd, err = unix.PidfdOpen(tid, unix.PIDFD_THREAD)
	if errors.Is(err, unix.EINVAL) {
		fd, err = unix.PidfdOpen(tgidOf(tid), 0)
	}
	if err != nil {
		return -1, false, err
	}
	if len(g.pidfds) >= 256 {
		for t := range g.pidfds {
			g.forget(t)
		}
	}
	g.pidfds[tid] = fd
	return fd, true, nil
}

func (g *unixGate) forget(tid int) {
	if fd, ok := g.pidfds[tid]; ok {
		_ = unix.Close(fd)
		delete(g.pidfds, tid)
	}
}

// read copies n bytes at addr of the caller's memory.
func (c *call) read(addr uint64, n int) ([]byte, unix.Errno) {
	if n == 0 {
		return nil, 0
	}
	buf := make([]byte, n)
	got, err := unix.ProcessVMReadv(c.tid, []unix.Iovec{{Base: &buf[0], Len: uint64(n)}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: n}}, 0)
	if err != nil || got != n {
		return nil, unix.EFAULT
	}
	return buf, 0
}

func (c *call) write(addr uint64, b []byte) unix.Errno {
	got, err := unix.ProcessVMWritev(c.tid, []unix.Iovec{{Base: &b[0], Len: uint64(len(b))}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: len(b)}}, 0)
	if err != nil || got != len(b) {
		return unix.EFAULT
	}
	return 0
}

// address copies and judges the peer address at addr (alen bytes) and
// returns what the helper's own call must use instead.
func (c *call) address(addr uint64, alen int) ([]byte, unix.Errno) {
	if alen < 0 || alen > sizeofSockaddrStorage {
		return nil, unix.EINVAL
	}
	raw, e := c.read(addr, alen)
	if e != 0 {
		return nil, e
	}
	if _, err := unix.GetsockoptInt(c.sock, unix.SOL_SOCKET, unix.SO_TYPE); err != nil {
		return nil, errnoOf(err) // ENOTSOCK, as the call would have failed
	}
	if !c.g.ownSocket(c.sock) {
		// Created outside the namespace (passed in by the caller): its
		// addresses would be the host's.
		return nil, unix.EACCES
	}
	if len(raw) < 2 || binary.NativeEndian.Uint16(raw) != unix.AF_UNIX {
		return raw, 0 // other families: the namespace holds them
	}
	path := raw[2:]
	if len(path) == 0 || path[0] == 0 {
		return raw, 0 // unnamed or abstract: private to the namespace
	}
	if i := strings.IndexByte(string(path), 0); i >= 0 {
		path = path[:i]
	}
	fd, e := c.resolve(string(path))
	if e != 0 {
		return nil, e
	}
	c.close = append(c.close, fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, errnoOf(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, unix.ECONNREFUSED // what connect says of a non-socket
	}
	if !c.g.boundHere(st) {
		return nil, unix.EACCES
	}
	out := make([]byte, 2, 2+32)
	binary.NativeEndian.PutUint16(out, unix.AF_UNIX)
	out = append(out, "/proc/self/fd/"+strconv.Itoa(fd)...)
	return append(out, 0), 0
}

// resolve opens path as the caller would find it: from its working
// directory when relative, following symlinks.
func (c *call) resolve(path string) (int, unix.Errno) {
	dir := unix.AT_FDCWD
	if !strings.HasPrefix(path, "/") {
		cwd, err := unix.Open("/proc/"+strconv.Itoa(c.tid)+"/cwd", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, unix.ENOENT
		}
		defer unix.Close(cwd)
		dir = cwd
	}
	fd, err := unix.Openat(dir, path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, errnoOf(err)
	}
	return fd, 0
}

// ownSocket reports whether sock was created in the sandbox's network
// namespace.
func (g *unixGate) ownSocket(sock int) bool {
	ns, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(sock), unix.SIOCGSKNS, 0)
	if e != 0 {
		return false
	}
	defer unix.Close(int(ns))
	var st unix.Stat_t
	if unix.Fstat(int(ns), &st) != nil {
		return false
	}
	return st.Dev == g.netDev && st.Ino == g.netIno
}

// boundHere reports whether the socket inode st is bound by a Unix socket
// of the sandbox's network namespace (sock_diag with UDIAG_SHOW_VFS). The
// diag reply carries 32 bits of the inode number; a larger number must
// also match through the bound name.
func (g *unixGate) boundHere(st unix.Stat_t) bool {
	g.diagMu.Lock()
	defer g.diagMu.Unlock()
	if g.diag < 0 {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
		if err != nil {
			return false
		}
		g.diag = fd
	}
	kdev := uint32(unix.Major(st.Dev))<<20 | uint32(unix.Minor(st.Dev))
	found := false
	err := unixDiagDump(g.diag, func(vfsIno, vfsDev uint32, name string) {
		if found || vfsDev != kdev || vfsIno != uint32(st.Ino) {
			return
		}
		if st.Ino <= 0xffffffff {
			found = true
			return
		}
		var nst unix.Stat_t
		if strings.HasPrefix(name, "/") && unix.Stat(name, &nst) == nil && nst.Dev == st.Dev && nst.Ino == st.Ino {
			found = true
		}
	})
	if err != nil {
		_ = unix.Close(g.diag)
		g.diag = -1
		return false
	}
	return found
}

// unix_diag constants (include/uapi/linux/unix_diag.h).
const (
	udiagShowName = 0x1
	udiagShowVFS  = 0x2
	unixDiagName  = 0
	unixDiagVFS   = 1
)

// unixDiagDump lists the bound Unix sockets of fd's network namespace.
func unixDiagDump(fd int, fn func(vfsIno, vfsDev uint32, name string)) error {
	const hdr = unix.SizeofNlMsghdr
	req := make([]byte, hdr+24)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], 1)
	r := req[hdr:]
	r[0] = unix.AF_UNIX
	binary.NativeEndian.PutUint32(r[4:], 0xffffffff) // every state
	binary.NativeEndian.PutUint32(r[12:], udiagShowName|udiagShowVFS)
	binary.NativeEndian.PutUint32(r[16:], 0xffffffff)
	binary.NativeEndian.PutUint32(r[20:], 0xffffffff)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 32<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				return errors.New("sock_diag refused the dump")
			case unix.SOCK_DIAG_BY_FAMILY:
			default:
				continue
			}
			if len(m.Data) < 16 {
				continue
			}
			var ino, dev uint32
			var name string
			hasVFS := false
			attrs := m.Data[16:]
			for len(attrs) >= 4 {
				l := int(binary.NativeEndian.Uint16(attrs))
				t := binary.NativeEndian.Uint16(attrs[2:])
				if l < 4 || l > len(attrs) {
					break
				}
				v := attrs[4:l]
				switch {
				case t == unixDiagVFS && len(v) >= 8:
					ino, dev, hasVFS = binary.NativeEndian.Uint32(v), binary.NativeEndian.Uint32(v[4:]), true
				case t == unixDiagName:
					name = strings.TrimRight(string(v), "\x00")
				}
				al := (l + 3) &^ 3
				if al > len(attrs) {
					break
				}
				attrs = attrs[al:]
			}
			if hasVFS {
				fn(ino, dev, name)
			}
		}
	}
}

func (c *call) connect() (int64, unix.Errno) {
	addr, e := c.address(c.n.Args[1], int(int32(c.n.Args[2])))
	if e != 0 {
		return 0, e
	}
	var p unsafe.Pointer
	if len(addr) > 0 {
		p = unsafe.Pointer(&addr[0])
	}
	connect := func() (int64, unix.Errno) {
		_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(c.sock), uintptr(p), uintptr(len(addr)))
		runtime.KeepAlive(addr)
		return 0, e
	}
	if c.blocking(0) {
		// It may wait for the peer's accept, which may need the gate.
		return c.goAsync(connect)
	}
	return connect()
}

// blocking reports whether the caller's socket waits (no O_NONBLOCK, no
// MSG_DONTWAIT in flags).
func (c *call) blocking(flags int) bool {
	fl, err := unix.FcntlInt(uintptr(c.sock), unix.F_GETFL, 0)
	return err == nil && fl&unix.O_NONBLOCK == 0 && flags&unix.MSG_DONTWAIT == 0
}

// goAsync finishes the call in a goroutine of its own, which answers it.
func (c *call) goAsync(f func() (int64, unix.Errno)) (int64, unix.Errno) {
	pidfd, err := unix.FcntlInt(uintptr(c.pidfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return 0, errnoOf(err)
	}
	c.pidfd = pidfd
	c.close = append(c.close, pidfd)
	c.async = true
	go func() {
		val, e := f()
		c.g.reply(c.n.ID, val, e)
		c.done()
	}()
	return 0, errAsync
}

func (c *call) sendto() (int64, unix.Errno) {
	a := c.n.Args
	var addr []byte
	if alen := int(int32(a[5])); alen != 0 {
		var e unix.Errno
		if addr, e = c.address(a[4], alen); e != 0 {
			return 0, e
		}
		if addr, e = c.netlinkTo(addr); e != 0 {
			return 0, e
		}
	}
	data, e := c.data([]remoteIov{{a[1], a[2]}})
	if e != 0 {
		return 0, e
	}
	oob, e := c.credentials(nil)
	if e != 0 {
		return 0, e
	}
	return c.send(data, oob, addr, int(int32(a[3])))
}

// netlinkTo is the address a send on a netlink socket may go with. The
// kernel lets a message that names its destination (NETLINK_SKB_DST) do
// what the sender's capabilities allow, the helper's here (CAP_NET_ADMIN
// and the rest: links, addresses, routes, netfilter of the namespace),
// where an unnamed one needs them in the socket's opener too, the
// command. So a message to the kernel (port 0, no groups) goes without
// the name, as the unnamed message it is on a socket not connected
// elsewhere; one to another socket or to groups, and one naming the
// kernel on a socket connected elsewhere, fail with EACCES.
func (c *call) netlinkTo(addr []byte) ([]byte, unix.Errno) {
	if len(addr) < 2 || binary.NativeEndian.Uint16(addr) != unix.AF_NETLINK {
		return addr, 0
	}
	if dom, err := unix.GetsockoptInt(c.sock, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || dom != unix.AF_NETLINK {
		return addr, 0 // the kernel refuses the mismatch itself
	}
	if len(addr) < unix.SizeofSockaddrNetlink {
		return nil, unix.EINVAL
	}
	if binary.NativeEndian.Uint32(addr[4:]) != 0 || binary.NativeEndian.Uint32(addr[8:]) != 0 {
		return nil, unix.EACCES
	}
	if peer, err := unix.Getpeername(c.sock); err == nil {
		if nl, ok := peer.(*unix.SockaddrNetlink); !ok || nl.Pid != 0 || nl.Groups != 0 {
			return nil, unix.EACCES
		}
	}
	return nil, 0
}

// remoteIov is an iovec of the caller's memory.
type remoteIov struct{ base, len uint64 }

// data gathers the caller's iovecs, up to gateMaxData bytes.
func (c *call) data(iov []remoteIov) ([]byte, unix.Errno) {
	var out []byte
	for _, v := range iov {
		n := int(min(v.len, uint64(gateMaxData-len(out))))
		b, e := c.read(v.base, n)
		if e != 0 {
			return nil, e
		}
		out = append(out, b...)
		if len(out) >= gateMaxData {
			break
		}
	}
	return out, 0
}

// msghdr on 64-bit Linux: name, namelen (+pad), iov, iovlen, control,
// controllen, flags (+pad).
const sizeofMsghdr = 56

func (c *call) sendmsg(msgAddr uint64, flags int) (int64, unix.Errno) {
	raw, e := c.read(msgAddr, sizeofMsghdr)
	if e != 0 {
		return 0, e
	}
	u64 := func(off int) uint64 { return binary.NativeEndian.Uint64(raw[off:]) }
	name, namelen := u64(0), int(int32(binary.NativeEndian.Uint32(raw[8:])))
	iovAddr, iovlen := u64(16), u64(24)
	ctlAddr, ctllen := u64(32), u64(40)
	var addr []byte
	if namelen < 0 {
		return 0, unix.EINVAL
	}
	if name != 0 && namelen != 0 {
		// The kernel truncates a longer name rather than refusing it.
		if addr, e = c.address(name, min(namelen, sizeofSockaddrStorage)); e != 0 {
			return 0, e
		}
		if addr, e = c.netlinkTo(addr); e != 0 {
			return 0, e
		}
	}
	if iovlen > uioMaxIov {
		return 0, unix.EMSGSIZE
	}
	var iov []remoteIov
	if iovlen > 0 {
		rawIov, e := c.read(iovAddr, int(iovlen)*16)
		if e != 0 {
			return 0, e
		}
		iov = make([]remoteIov, iovlen)
		for i := range iov {
			iov[i] = remoteIov{binary.NativeEndian.Uint64(rawIov[16*i:]), binary.NativeEndian.Uint64(rawIov[16*i+8:])}
		}
	}
	data, e := c.data(iov)
	if e != 0 {
		return 0, e
	}
	var oob []byte
	if ctlAddr != 0 && ctllen > 0 {
		if ctllen > gateMaxControl {
			return 0, unix.ENOBUFS
		}
		if oob, e = c.read(ctlAddr, int(ctllen)); e != 0 {
			return 0, e
		}
		if e = c.rights(oob); e != 0 {
			return 0, e
		}
	}
	if oob, e = c.credentials(oob); e != 0 {
		return 0, e
	}
	return c.send(data, oob, addr, flags)
}

// rights replaces, in place, the caller's descriptors in SCM_RIGHTS
// messages by the helper's duplicates of them.
func (c *call) rights(oob []byte) unix.Errno {
	const hdr = unix.SizeofCmsghdr
	for off := 0; off+hdr <= len(oob); {
		l := int(binary.NativeEndian.Uint64(oob[off:]))
		level := int32(binary.NativeEndian.Uint32(oob[off+8:]))
		typ := int32(binary.NativeEndian.Uint32(oob[off+12:]))
		if l < hdr || off+l > len(oob) {
			return unix.EINVAL
		}
		if level == unix.SOL_SOCKET && typ == unix.SCM_RIGHTS {
			for p := off + hdr; p+4 <= off+l; p += 4 {
				fd, err := unix.PidfdGetfd(c.pidfd, int(int32(binary.NativeEndian.Uint32(oob[p:]))), 0)
				if err != nil {
					return unix.EBADF
				}
				c.close = append(c.close, fd)
				binary.NativeEndian.PutUint32(oob[p:], uint32(fd))
			}
		}
		off += (l + 7) &^ 7
	}
	return 0
}

// credentials holds the call's credentials to the caller's own. The
// kernel takes the credentials of a send (SCM_CREDENTIALS, which a peer
// with SO_PASSCRED reads) from the sender, the helper here, and checks
// those a message names against the helper's privileges: without this a
// command would claim pid 1 and uid 0 (any pid, any ids), and every send
// of a --user command through the gate would come from root. So a
// credentials message must name the caller's process and one of its own
// uids and gids (EPERM otherwise, which the kernel says to a process
// without CAP_SYS_ADMIN, the command's case, claiming another pid), and
// a send on a Unix socket that names none gets the caller's, as the
// kernel gives a process's own send.
func (c *call) credentials(oob []byte) ([]byte, unix.Errno) {
	const hdr = unix.SizeofCmsghdr
	named := false
	for off := 0; off+hdr <= len(oob); {
		l := int(binary.NativeEndian.Uint64(oob[off:]))
		level := int32(binary.NativeEndian.Uint32(oob[off+8:]))
		typ := int32(binary.NativeEndian.Uint32(oob[off+12:]))
		if l < hdr || off+l > len(oob) {
			return nil, unix.EINVAL // (rights checked it already)
		}
		if level == unix.SOL_SOCKET && typ == unix.SCM_CREDENTIALS {
			if l < hdr+unix.SizeofUcred {
				return nil, unix.EINVAL
			}
			id, e := c.ids()
			if e != 0 {
				return nil, e
			}
			pid := int32(binary.NativeEndian.Uint32(oob[off+hdr:]))
			uid := binary.NativeEndian.Uint32(oob[off+hdr+4:])
			gid := binary.NativeEndian.Uint32(oob[off+hdr+8:])
			if pid != id.pid || !slices.Contains(id.uids[:], uid) || !slices.Contains(id.gids[:], gid) {
				return nil, unix.EPERM
			}
			named = true
		}
		off += (l + 7) &^ 7
	}
	if named {
		return oob, 0
	}
	if dom, err := unix.GetsockoptInt(c.sock, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || dom != unix.AF_UNIX {
		return oob, 0
	}
	id, e := c.ids()
	if e != 0 {
		return nil, e
	}
	out := make([]byte, (len(oob)+7)&^7, (len(oob)+7)&^7+unix.CmsgSpace(unix.SizeofUcred))
	copy(out, oob)
	return append(out, unix.UnixCredentials(&unix.Ucred{Pid: id.pid, Uid: id.uids[0], Gid: id.gids[0]})...), 0
}

// callerIDs are the credentials of a caller as its own send would carry
// them: its process (thread group) and its real, effective and saved
// uids and gids, real first, in the helper's namespaces, which are the
// command's.
type callerIDs struct {
	pid  int32
	uids [3]uint32
	gids [3]uint32
}

// pidfdGetInfo is PIDFD_GET_INFO (Linux 6.13) for the first version of
// struct pidfd_info (64 bytes): _IOWR(0xFF, 11, …).
const (
	pidfdGetInfo    = 3<<30 | 64<<16 | 0xFF<<8 | 11
	pidfdInfoPID    = 1 << 0
	pidfdInfoCreds  = 1 << 1
	sizeofPidfdInfo = 64
)

// ids reads the caller's credentials (the caller is blocked in the
// notified call: they are its ids at the call) from its pidfd, an ioctl,
// else from /proc (older kernels), which costs tens of microseconds.
func (c *call) ids() (callerIDs, unix.Errno) {
	var id callerIDs
	var info [sizeofPidfdInfo]byte
	binary.NativeEndian.PutUint64(info[0:], pidfdInfoPID|pidfdInfoCreds)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(c.pidfd), pidfdGetInfo, uintptr(unsafe.Pointer(&info[0]))); e == 0 {
		if binary.NativeEndian.Uint64(info[0:])&(pidfdInfoPID|pidfdInfoCreds) == pidfdInfoPID|pidfdInfoCreds {
			u32 := func(off int) uint32 { return binary.NativeEndian.Uint32(info[off:]) }
			// pid 16, tgid 20, ppid 24, ruid 28, rgid 32, euid 36, egid 40,
			// suid 44, sgid 48.
			id.pid = int32(u32(20))
			id.uids = [3]uint32{u32(28), u32(36), u32(44)}
			id.gids = [3]uint32{u32(32), u32(40), u32(48)}
			return id, 0
		}
	} else if e == unix.ESRCH {
		return id, unix.ESRCH
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(c.tid) + "/status")
	if err != nil || !c.g.valid(c.n.ID) {
		return id, unix.ESRCH
	}
	found := 0
	for _, line := range strings.Split(string(data), "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		switch key {
		case "Tgid":
			if len(f) == 1 {
				if n, err := strconv.ParseInt(f[0], 10, 32); err == nil {
					id.pid, found = int32(n), found|1
				}
			}
		case "Uid", "Gid":
			if len(f) < 3 {
				continue
			}
			dst, bit := &id.uids, 2
			if key == "Gid" {
				dst, bit = &id.gids, 4
			}
			okAll := true
			for i := range 3 {
				n, err := strconv.ParseUint(f[i], 10, 32)
				okAll = okAll && err == nil
				dst[i] = uint32(n)
			}
			if okAll {
				found |= bit
			}
		}
	}
	if found != 7 {
		return id, unix.ESRCH
	}
	return id, 0
}

// send makes the caller's send on the duplicate, with its semantics: a
// blocking socket waits (while the caller is still there), a stream on a
// blocking socket is sent whole, SIGPIPE goes to the caller's thread.
func (c *call) send(data, oob, addr []byte, flags int) (int64, unix.Errno) {
	// The first try never waits; what must wait goes on in a goroutine
	// (sendmmsg on a blocking socket is in one already).
	n, e := c.sendOnce(data, oob, addr, flags|unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
	if e == 0 && n >= len(data) {
		return int64(n), 0
	}
	if e != 0 && e != unix.EAGAIN {
		return c.sendFailed(e, flags)
	}
	blocking := c.blocking(flags)
	typ, _ := unix.GetsockoptInt(c.sock, unix.SOL_SOCKET, unix.SO_TYPE)
	stream := typ == unix.SOCK_STREAM
	switch {
	case e == 0 && (!blocking || !stream):
		return int64(n), 0
	case e == unix.EAGAIN && !blocking:
		return 0, e
	}
	sent := 0
	if e == 0 {
		sent, oob = n, onlyCredentials(oob)
	}
	rest := func() (int64, unix.Errno) { return c.sendRest(data, oob, addr, flags, stream, sent) }
	if c.async {
		return rest()
	}
	return c.goAsync(rest)
}

// onlyCredentials is the SCM_CREDENTIALS message of oob, or nil.
func onlyCredentials(oob []byte) []byte {
	const hdr = unix.SizeofCmsghdr
	for off := 0; off+hdr <= len(oob); {
		l := int(binary.NativeEndian.Uint64(oob[off:]))
		if l < hdr || off+l > len(oob) {
			return nil
		}
		if int32(binary.NativeEndian.Uint32(oob[off+8:])) == unix.SOL_SOCKET && int32(binary.NativeEndian.Uint32(oob[off+12:])) == unix.SCM_CREDENTIALS {
			return oob[off : off+l]
		}
		off += (l + 7) &^ 7
	}
	return nil
}

func (c *call) sendFailed(e unix.Errno, flags int) (int64, unix.Errno) {
	if e == unix.EPIPE && flags&unix.MSG_NOSIGNAL == 0 {
		_ = unix.Tgkill(tgidOf(c.tid), c.tid, unix.SIGPIPE)
	}
	return 0, e
}

// sendRest waits for room on a blocking socket and sends the rest.
func (c *call) sendRest(data, oob, addr []byte, flags int, stream bool, sent int) (int64, unix.Errno) {
	for {
		n, e := c.sendOnce(data[sent:], oob, addr, flags|unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		if e == 0 {
			sent += n
			// Ancillary data goes with the first bytes only, but for the
			// credentials, which every send carries (the helper's
			// otherwise).
			oob = onlyCredentials(oob)
			if !stream || sent >= len(data) {
				return int64(sent), 0
			}
			continue
		}
		if e == unix.EAGAIN {
			if !c.g.valid(c.n.ID) {
				return int64(sent), unix.EINTR
			}
			fds := []unix.PollFd{{Fd: int32(c.sock), Events: unix.POLLOUT}}
			_, _ = unix.Poll(fds, 200)
			continue
		}
		if sent > 0 {
			return int64(sent), 0
		}
		return c.sendFailed(e, flags)
	}
}

func (c *call) sendOnce(data, oob, addr []byte, flags int) (int, unix.Errno) {
	var m unix.Msghdr
	var iov unix.Iovec
	if len(data) > 0 {
		iov.Base, iov.Len = &data[0], uint64(len(data))
		m.Iov, m.Iovlen = &iov, 1
	}
	if len(oob) > 0 {
		m.Control, m.Controllen = &oob[0], uint64(len(oob))
	}
	if len(addr) > 0 {
		m.Name, m.Namelen = &addr[0], uint32(len(addr))
	}
	n, _, e := unix.Syscall(unix.SYS_SENDMSG, uintptr(c.sock), uintptr(unsafe.Pointer(&m)), uintptr(flags))
	runtime.KeepAlive(data)
	runtime.KeepAlive(oob)
	runtime.KeepAlive(addr)
	return int(n), e
}

// sizeofMmsghdr: a msghdr and its msg_len (+pad).
const sizeofMmsghdr = sizeofMsghdr + 8

func (c *call) sendmmsg() (int64, unix.Errno) {
	vec, vlen, flags := c.n.Args[1], min(int(uint32(c.n.Args[2])), uioMaxIov), int(int32(c.n.Args[3]))
	for i := 0; i < vlen; i++ {
		at := vec + uint64(i*sizeofMmsghdr)
		n, e := c.sendmsg(at, flags)
		if e == 0 {
			var l [4]byte
			binary.NativeEndian.PutUint32(l[:], uint32(n))
			e = c.write(at+sizeofMsghdr, l[:])
		}
		if e != 0 {
			if i > 0 {
				return int64(i), 0
			}
			return 0, e
		}
	}
	return int64(vlen), 0
}

// tgidOf is the thread group of thread tid.
func tgidOf(tid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return tid
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return n
			}
		}
	}
	return tid
}

func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EIO
}
