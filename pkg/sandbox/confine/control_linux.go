package confine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// serve is the helper's loop when it has a control socket: it reaps like
// reap, and runs probes on request. A probe command is started from this
// locked thread, so it has exactly the target's confinement and lands in
// the same PID namespace; dials happen on other threads of the helper,
// which are all in the job's network namespace.
func (h *helper) serve(target int, ctl *os.File) int {
	chld := make(chan os.Signal, 8)
	signal.Notify(chld, syscall.SIGCHLD)
	reqs := make(chan ControlRequest)
	go func() {
		sc := bufio.NewScanner(ctl)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var r ControlRequest
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				reqs <- r
			}
		}
	}()
	var wmu sync.Mutex
	enc := json.NewEncoder(ctl)
	reply := func(id int, ok bool) {
		wmu.Lock()
		_ = enc.Encode(ControlReply{ID: id, OK: ok})
		wmu.Unlock()
	}
	probes := map[int]int{} // pid -> request id
	null, _ := os.OpenFile("/dev/null", os.O_RDWR, 0)
	for {
		for {
			var ws syscall.WaitStatus
			var ru syscall.Rusage
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			if ws.Stopped() || ws.Continued() {
				continue
			}
			if pid == target {
				return h.exitOf(ws)
			}
			if id, ok := probes[pid]; ok {
				delete(probes, pid)
				reply(id, ws.Exited() && ws.ExitStatus() == 0)
			} else {
				h.deaths.Note(ws, CPUMillis(&ru)) // an orphan, reparented to PID 1
			}
		}
		select {
		case <-chld:
		case r := <-reqs:
			switch r.Kind {
			case ProbeCmd:
				if len(r.Argv) == 0 || null == nil {
					reply(r.ID, false)
					continue
				}
				path, _, err := lookPath(r.Argv[0])
				if err != nil {
					reply(r.ID, false)
					continue
				}
				fd := null.Fd()
				pid, err := syscall.ForkExec(path, r.Argv, &syscall.ProcAttr{
					Env: os.Environ(), Files: []uintptr{fd, fd, fd},
					Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
				})
				if err != nil {
					reply(r.ID, false)
					continue
				}
				probes[pid] = r.ID
			case ProbeTCP, ProbeHTTP:
				go func(r ControlRequest) { reply(r.ID, dialProbe(r)) }(r)
			default:
				reply(r.ID, false)
			}
		}
	}
}

func dialProbe(r ControlRequest) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if r.Kind == ProbeTCP {
		fd, err := dial(ctx, r.Addrs)
		if err != nil {
			return false
		}
		unix.Close(fd)
		return true
	}
	return httpProbe(ctx, r.Addr, r.Addrs)
}

// httpProbe GETs an http:// URL (through one of addrs, its host resolved)
// and passes below status 500. It speaks just enough HTTP/1.0 for that,
// on a raw socket, so that the helper links neither net/http nor net (and
// with it a resolver that makes it a dynamically linked program): the
// helper starts on every sandboxed call, and its start-up time is the
// sandbox's overhead. An https:// URL passes when its port accepts a
// connection.
func httpProbe(ctx context.Context, raw string, addrs []string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return false
	}
	fd, err := dial(ctx, addrs)
	if err != nil {
		return false
	}
	c := os.NewFile(uintptr(fd), "probe")
	defer c.Close()
	if u.Scheme == "https" {
		return true
	}
	// The socket is non-blocking, so the runtime's poller serves it and
	// the deadline bounds every read and write.
	if dl, ok := ctx.Deadline(); !ok || c.SetDeadline(dl) != nil {
		return false
	}
	path := u.RequestURI()
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\nUser-Agent: agentplane-ready\r\nConnection: close\r\n\r\n", path, u.Host); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return false
	}
	// "HTTP/1.1 200 OK"
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
		return false
	}
	code, err := strconv.Atoi(f[1])
	return err == nil && code < 500
}

// dial connects a TCP socket to the first of addrs (IP:port) that accepts
// before ctx's deadline, and returns it non-blocking.
func dial(ctx context.Context, addrs []string) (int, error) {
	last := error(unix.EDESTADDRREQ)
	for _, a := range addrs {
		ap, err := netip.ParseAddrPort(a)
		if err != nil {
			last = err
			continue
		}
		fd, err := dialOne(ctx, ap)
		if err == nil {
			return fd, nil
		}
		last = err
	}
	return -1, last
}

func dialOne(ctx context.Context, ap netip.AddrPort) (int, error) {
	family, ip := unix.AF_INET6, ap.Addr()
	var sa unix.Sockaddr = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ip.As16()}
	if ip.Unmap().Is4() {
		family = unix.AF_INET
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ip.Unmap().As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	err = unix.Connect(fd, sa)
	if errors.Is(err, unix.EINPROGRESS) {
		if err = waitWritable(ctx, fd); err == nil {
			var soErr int
			if soErr, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && soErr != 0 {
				err = unix.Errno(soErr)
			}
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// waitWritable polls fd until it is writable (a connect finished) or ctx's
// deadline passes.
func waitWritable(ctx context.Context, fd int) error {
	dl, _ := ctx.Deadline()
	for {
		ms := time.Until(dl).Milliseconds()
		if ms <= 0 {
			return unix.ETIMEDOUT
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(fds, int(ms))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return err
		case n == 0:
			return unix.ETIMEDOUT
		}
		return nil
	}
}
