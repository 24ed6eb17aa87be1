package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"sync"

	"github.com/agentplane/agentplane/pkg/sandbox/confine"
)

// Readiness probes of a sandboxed job must see what the job sees: a
// --ready-cmd runs with the job's confinement, and --ready-tcp and
// --ready-http dial from inside the job's network namespace (under
// --net none the host cannot reach the job at all). The sandbox helper is
// already inside every namespace with the confinement applied to the
// thread that started the job, so it runs the probes itself, on request,
// over a control socket the runner passes as the first extra descriptor.

// Probe kinds of a control request.
const (
	ProbeCmd  = confine.ProbeCmd
	ProbeTCP  = confine.ProbeTCP
	ProbeHTTP = confine.ProbeHTTP
)

type (
	controlRequest = confine.ControlRequest
	controlReply   = confine.ControlReply
)

// Control is the runner's end of a helper's control socket.
type Control struct {
	f       *os.File
	mu      sync.Mutex
	enc     *json.Encoder
	next    int
	pending map[int]chan bool
	closed  chan struct{}
}

func newControl(f *os.File) *Control {
	c := &Control{f: f, enc: json.NewEncoder(f), pending: map[int]chan bool{}, closed: make(chan struct{})}
	go c.read()
	return c
}

func (c *Control) read() {
	defer close(c.closed)
	sc := bufio.NewScanner(c.f)
	for sc.Scan() {
		var r controlReply
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			continue
		}
		c.mu.Lock()
		ch := c.pending[r.ID]
		delete(c.pending, r.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- r.OK
		}
	}
}

// Probe asks the helper to run one readiness check and waits for its
// answer, for ctx to end, or for the helper to go away (false).
func (c *Control) Probe(ctx context.Context, kind, addr string, argv []string) bool {
	ch := make(chan bool, 1)
	c.mu.Lock()
	c.next++
	id := c.next
	c.pending[id] = ch
	err := c.enc.Encode(controlRequest{ID: id, Kind: kind, Addr: addr, Addrs: resolve(ctx, kind, addr), Argv: argv})
	c.mu.Unlock()
	if err != nil {
		return false
	}
	select {
	case ok := <-ch:
		return ok
	case <-ctx.Done():
	case <-c.closed:
	}
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
	return false
}

// Close closes the runner's end.
func (c *Control) Close() error { return c.f.Close() }

// resolve turns the host of a TCP or HTTP probe's address into IP:port
// addresses for the helper, which links no resolver. The names are the
// ones the job would see: the runner reads the same /etc/hosts, and a name
// only DNS knows has no route from inside --net none or --net proxy
// anyway. A host that does not resolve gives no address, and the probe
// fails.
func resolve(ctx context.Context, kind, addr string) []string {
	hostport := addr
	if kind == ProbeHTTP {
		u, err := url.Parse(addr)
		if err != nil || u.Host == "" {
			return nil
		}
		port := u.Port()
		if port == "" {
			port = "80"
			if u.Scheme == "https" {
				port = "443"
			}
		}
		hostport = net.JoinHostPort(u.Hostname(), port)
	} else if kind != ProbeTCP {
		return nil
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		if pn, err = lookupPort(port); err != nil {
			return nil
		}
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return []string{netip.AddrPortFrom(ip, uint16(pn)).String()}
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(pn)).String())
	}
	return out
}

func lookupPort(name string) (uint64, error) {
	p, err := net.LookupPort("tcp", name)
	return uint64(p), err
}
