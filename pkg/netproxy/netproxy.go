// Package netproxy is the network allowlist's proxy: one listener that
// speaks HTTP (plain requests and CONNECT, with net/http's
// ReverseProxy and a byte tunnel) and SOCKS5 (CONNECT only), lets through
// connections to the hosts an allowlist names, and refuses every other one
// with a message the client shows (HTTP 403 with a body naming the host and
// the rule; SOCKS5 reply 2, "connection not allowed by ruleset").
//
// The proxy resolves names itself and connects only to the addresses it
// checked (Checker), so a name cannot be pointed at a loopback or private
// address between the check and the connect, and an allowed public name
// whose record says 127.0.0.1 is refused unless a rule names 127.0.0.1.
// HTTPS passes through CONNECT unchanged: nothing is decrypted.
//
// A Proxy holds no process of its own: it is goroutines of the program
// that serves it, so it dies with that program, and Close ends every
// connection it carries. The sandbox serves it on a listener created inside
// the command's network namespace (pkg/sandbox), which is then the
// command's only way out.
package netproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Protocols a Denial names.
const (
	ProtoHTTP    = "http"    // a plain HTTP request through the proxy
	ProtoConnect = "connect" // an HTTP CONNECT tunnel (HTTPS, git, …)
	ProtoSOCKS5  = "socks5"
)

// DefaultMaxConns bounds the connections one proxy carries at once unless
// Config.MaxConns says otherwise, so that a command opening connections in
// a loop exhausts its own share, not the descriptors of the program
// serving the proxy.
const DefaultMaxConns = 1024

// dialTimeout bounds one connection attempt to an allowed host.
const dialTimeout = 30 * time.Second

// Denial is one refused connection attempt.
type Denial struct {
	Host     string
	Port     int
	Protocol string
	Reason   string
}

// DeniedHost counts the refused attempts to one host and port.
type DeniedHost struct {
	Host  string `json:"host"`
	Port  int    `json:"port"`
	Count int    `json:"count"`
}

// Report is what a result says about the network: the rules in force and
// every refused host with its count, in the order first refused.
type Report struct {
	Allowed []string     `json:"allowed"`
	Denied  []DeniedHost `json:"denied"`
}

// Config is what New needs. Rules is the allowlist; the rest may be zero.
type Config struct {
	Rules Rules
	// Resolver looks names up; nil means net.DefaultResolver.
	Resolver Resolver
	// Dial connects to a checked address; nil means a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// OnDeny is called once per refused attempt, on the connection's
	// goroutine, after the attempt is counted.
	OnDeny func(Denial)
	// MaxConns bounds the connections carried at once; 0 means
	// DefaultMaxConns. One over the bound is closed at once.
	MaxConns int
}

// Proxy is one allowlist proxy; Serve may be called for several listeners
// (a job's restarts each bring one) and the counts add up.
type Proxy struct {
	cfg     Config
	checker *Checker
	http    *httpProxy
	httpSrv *http.Server
	httpLn  *chanListener

	mu     sync.Mutex
	closed bool
	lns    map[net.Listener]bool
	conns  map[net.Conn]bool
	denied []DeniedHost
	index  map[string]int
	onDeny func(Denial)
	wg     sync.WaitGroup
}

// SetOnDeny replaces Config.OnDeny.
func (p *Proxy) SetOnDeny(fn func(Denial)) {
	p.mu.Lock()
	p.onDeny = fn
	p.mu.Unlock()
}

// New returns a proxy that does nothing until Serve.
func New(cfg Config) *Proxy {
	p := &Proxy{cfg: cfg, checker: &Checker{Rules: cfg.Rules, Resolver: cfg.Resolver},
		lns: map[net.Listener]bool{}, conns: map[net.Conn]bool{}, index: map[string]int{}, onDeny: cfg.OnDeny}
	if p.cfg.MaxConns <= 0 {
		p.cfg.MaxConns = DefaultMaxConns
	}
	if p.cfg.Dial == nil {
		d := &net.Dialer{Timeout: dialTimeout}
		p.cfg.Dial = d.DialContext
	}
	p.http = p.newHTTP()
	p.httpLn = newChanListener()
	p.httpSrv = &http.Server{Handler: p.http, ReadHeaderTimeout: time.Minute, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = p.httpSrv.Serve(p.httpLn) }()
	return p
}

// Report returns the allowlist and the refusals so far.
func (p *Proxy) Report() Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Report{Allowed: p.cfg.Rules.Patterns(), Denied: append([]DeniedHost{}, p.denied...)}
}

// Serve accepts connections on ln until ln fails or the proxy is closed.
// It takes ownership of ln.
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = ln.Close()
		return net.ErrClosed
	}
	p.lns[ln] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.lns, ln)
		p.mu.Unlock()
		_ = ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if !p.track(c) {
			_ = c.Close()
			if p.isClosed() {
				return net.ErrClosed
			}
			continue // over the bound: this one is refused
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.dispatch(c)
		}()
	}
}

// Close stops every listener and ends every connection, tunnels included.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for ln := range p.lns {
		_ = ln.Close()
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.httpSrv.Close()
	p.http.tr.CloseIdleConnections()
	return nil
}

// track registers c so that Close can end it; false once closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.conns) >= p.cfg.MaxConns {
		return false
	}
	p.conns[c] = true
	return true
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// dispatch tells SOCKS5 (first byte 5) from HTTP (a method name) and
// hands the connection to the one it speaks.
func (p *Proxy) dispatch(c net.Conn) {
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	first, err := br.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		p.untrack(c)
		_ = c.Close()
		return
	}
	pc := &peekedConn{Conn: c, r: br, p: p}
	if first[0] == socksVersion {
		defer pc.Close()
		p.serveSOCKS(pc)
		return
	}
	if !p.httpLn.put(pc) {
		_ = pc.Close()
	}
}

// deny counts and reports a refusal.
func (p *Proxy) deny(host string, port int, proto, reason string) {
	key := hostPort(host, port)
	p.mu.Lock()
	if i, ok := p.index[key]; ok {
		p.denied[i].Count++
	} else {
		p.index[key] = len(p.denied)
		p.denied = append(p.denied, DeniedHost{Host: host, Port: port, Count: 1})
	}
	onDeny := p.onDeny
	p.mu.Unlock()
	if onDeny != nil {
		onDeny(Denial{Host: host, Port: port, Protocol: proto, Reason: reason})
	}
}

// connect checks host:port and dials the first checked address that
// answers. A refusal is counted and returned as *Refusal.
func (p *Proxy) connect(ctx context.Context, host string, port int, proto string) (net.Conn, error) {
	addrs, _, err := p.checker.Check(ctx, host, port)
	if err != nil {
		var r *Refusal
		if errors.As(err, &r) {
			p.deny(r.Host, r.Port, proto, r.Reason)
		}
		return nil, err
	}
	return p.dialAny(ctx, addrs)
}

func (p *Proxy) dialAny(ctx context.Context, addrs []netip.AddrPort) (net.Conn, error) {
	var first error
	for _, a := range addrs {
		c, err := p.cfg.Dial(ctx, "tcp", a.String())
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// refusalText is the body of a refusal, for a human reading curl's or
// git's output.
func refusalText(err error) string {
	return "agentplane network allowlist: " + err.Error() + "\n"
}

type pinKey struct{}

func portOf(port, scheme string) int {
	if port == "" {
		if scheme == "https" || scheme == "wss" {
			return 443
		}
		return 80
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return 0
	}
	return n
}

// peekedConn is an accepted connection whose first bytes sit in r. It
// keeps the TCP half-close and splice paths of the connection beneath, so
// tunnels close cleanly and bulk downloads are copied in the kernel.
type peekedConn struct {
	net.Conn
	r    *bufio.Reader
	p    *Proxy
	once sync.Once
}

func (c *peekedConn) Read(b []byte) (int, error) {
	if c.r != nil && c.r.Buffered() > 0 {
		return c.r.Read(b)
	}
	return c.Conn.Read(b)
}

// ReadFrom lets io.Copy(client, upstream) use the TCP connection's splice.
func (c *peekedConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

func (c *peekedConn) CloseWrite() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return nil
}

func (c *peekedConn) CloseRead() error {
	if hc, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return hc.CloseRead()
	}
	return nil
}

func (c *peekedConn) Close() error {
	c.once.Do(func() { c.p.untrack(c.Conn) })
	return c.Conn.Close()
}

// chanListener feeds the HTTP server the connections dispatch chose for it.
type chanListener struct {
	ch     chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) put(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.closed.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
