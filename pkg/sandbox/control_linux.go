package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
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

// controlFD is where the helper finds its control socket.
const controlFD = 3

// NewControl makes a control socket pair for one run: pass child as the
// first of cmd.ExtraFiles (and close it after the start), set
// prep.Control before calling prep.Argv, and probe through the returned
// Control.
func NewControl() (ctl *Control, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	return newControl(os.NewFile(uintptr(fds[0]), "sandbox-control")), os.NewFile(uintptr(fds[1]), "sandbox-control-child"), nil
}

// serve is the helper's loop when it has a control socket: it reaps like
// reap, and runs probes on request. A probe command is started from this
// locked thread, so it has exactly the target's confinement and lands in
// the same PID namespace; dials happen on other threads of the helper,
// which are all in the job's network namespace.
func (h *helper) serve(target int, ctl *os.File) int {
	chld := make(chan os.Signal, 8)
	signal.Notify(chld, syscall.SIGCHLD)
	reqs := make(chan controlRequest)
	go func() {
		sc := bufio.NewScanner(ctl)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var r controlRequest
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				reqs <- r
			}
		}
	}()
	var wmu sync.Mutex
	enc := json.NewEncoder(ctl)
	reply := func(id int, ok bool) {
		wmu.Lock()
		_ = enc.Encode(controlReply{ID: id, OK: ok})
		wmu.Unlock()
	}
	probes := map[int]int{} // pid -> request id
	null, _ := os.OpenFile("/dev/null", os.O_RDWR, 0)
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
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
				go func(r controlRequest) { reply(r.ID, dialProbe(r.Kind, r.Addr)) }(r)
			default:
				reply(r.ID, false)
			}
		}
	}
}

func dialProbe(kind, addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if kind == ProbeTCP {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	return httpProbe(ctx, addr)
}

// httpProbe GETs an http:// URL and passes below status 500. It speaks
// just enough HTTP/1.0 for that, so that the helper does not link net/http
// (and TLS): the helper starts on every sandboxed call, and its start-up
// time is the sandbox's overhead. An https:// URL passes when its port
// accepts a connection.
func httpProbe(ctx context.Context, raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return false
	}
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return false
	}
	defer c.Close()
	if u.Scheme == "https" {
		return true
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
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
