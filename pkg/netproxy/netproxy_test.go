package netproxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/proxy"
)

// harness is a proxy on 127.0.0.1 with an allowed and a denied upstream.
type harness struct {
	p       *Proxy
	addr    string
	allowed *httptest.Server
	tls     *httptest.Server
	denied  *httptest.Server
	mu      sync.Mutex
	denials []Denial
}

func hello(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello from %s", name) })
}

func newHarness(t *testing.T, extra ...string) *harness {
	return newHarnessMax(t, 0, extra...)
}

func newHarnessMax(t *testing.T, maxConns int, extra ...string) *harness {
	t.Helper()
	h := &harness{allowed: httptest.NewServer(hello("allowed")), tls: httptest.NewTLSServer(hello("tls")),
		denied: httptest.NewServer(hello("denied"))}
	t.Cleanup(h.allowed.Close)
	t.Cleanup(h.tls.Close)
	t.Cleanup(h.denied.Close)
	patterns := append([]string{h.allowed.Listener.Addr().String(), h.tls.Listener.Addr().String()}, extra...)
	rules, err := ParseRules(patterns)
	if err != nil {
		t.Fatal(err)
	}
	res := fakeResolver{
		"allowed.test": {"127.0.0.1"},
		"rebind.test":  {"127.0.0.1"},
	}
	h.p = New(Config{Rules: rules, Resolver: res, MaxConns: maxConns, OnDeny: func(d Denial) {
		h.mu.Lock()
		h.denials = append(h.denials, d)
		h.mu.Unlock()
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	go func() { _ = h.p.Serve(ln) }()
	t.Cleanup(func() { _ = h.p.Close() })
	return h
}

func (h *harness) httpClient(tlsCfg *tls.Config) *http.Client {
	u, _ := url.Parse("http://" + h.addr)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: tlsCfg}}
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHTTPAllowedAndDenied(t *testing.T) {
	h := newHarness(t)
	c := h.httpClient(nil)
	if code, body := get(t, c, h.allowed.URL+"/x"); code != 200 || body != "hello from allowed" {
		t.Fatalf("allowed: %d %q", code, body)
	}
	for i := 0; i < 2; i++ {
		code, body := get(t, c, h.denied.URL+"/x")
		deniedAddr := h.denied.Listener.Addr().String()
		if code != 403 || !strings.Contains(body, deniedAddr) || !strings.Contains(body, "no --allow-host rule names this address") ||
			!strings.Contains(body, h.allowed.Listener.Addr().String()) || strings.Contains(body, "hello") {
			t.Fatalf("denied: %d %q", code, body)
		}
	}
	rep := h.p.Report()
	port := h.denied.Listener.Addr().(*net.TCPAddr).Port
	if len(rep.Denied) != 1 || rep.Denied[0] != (DeniedHost{Host: "127.0.0.1", Port: port, Count: 2}) {
		t.Fatalf("report denied = %+v", rep.Denied)
	}
	if len(rep.Allowed) != 2 {
		t.Fatalf("report allowed = %v", rep.Allowed)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.denials) != 2 || h.denials[0].Protocol != ProtoHTTP {
		t.Fatalf("denials = %+v", h.denials)
	}
}

func TestConnectTunnelsTLSWithoutDecrypting(t *testing.T) {
	h := newHarness(t)
	tr := h.tls.Client().Transport.(*http.Transport)
	c := h.httpClient(tr.TLSClientConfig)
	resp, err := c.Get(h.tls.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "hello from tls" {
		t.Fatalf("body %q", b)
	}
	// The client saw the server's own certificate: the tunnel is opaque.
	if !resp.TLS.PeerCertificates[0].Equal(h.tls.Certificate()) {
		t.Fatal("the client did not see the upstream's certificate")
	}
}

// rawConnect sends a CONNECT and returns the response.
func rawConnect(t *testing.T, proxyAddr, target string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestConnectDenied(t *testing.T) {
	h := newHarness(t)
	target := h.denied.Listener.Addr().String()
	resp, body := rawConnect(t, h.addr, target)
	if resp.StatusCode != 403 || !strings.Contains(body, target) || !strings.Contains(body, "not allowed") {
		t.Fatalf("CONNECT %s: %d %q", target, resp.StatusCode, body)
	}
	// A name no rule matches, on the allowed port.
	_, port, _ := net.SplitHostPort(h.allowed.Listener.Addr().String())
	resp, body = rawConnect(t, h.addr, "evil.test:"+port)
	if resp.StatusCode != 403 || !strings.Contains(body, "evil.test:"+port) || !strings.Contains(body, "no --allow-host rule matches it") {
		t.Fatalf("CONNECT evil.test: %d %q", resp.StatusCode, body)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.denials) != 2 || h.denials[0].Protocol != ProtoConnect {
		t.Fatalf("denials = %+v", h.denials)
	}
}

func TestRebindingRefused(t *testing.T) {
	// rebind.test is allowed by name on any port but resolves to
	// 127.0.0.1, which a rule names only on the allowed server's port.
	h := newHarness(t, "rebind.test", "allowed.test")
	c := h.httpClient(nil)
	_, port, _ := net.SplitHostPort(h.denied.Listener.Addr().String())
	code, body := get(t, c, "http://rebind.test:"+port+"/")
	if code != 403 || !strings.Contains(body, "resolves to 127.0.0.1") || !strings.Contains(body, "rule rebind.test") {
		t.Fatalf("rebind over HTTP: %d %q", code, body)
	}
	// On the port where 127.0.0.1 is named explicitly, the name works.
	_, aport, _ := net.SplitHostPort(h.allowed.Listener.Addr().String())
	if code, body := get(t, c, "http://allowed.test:"+aport+"/"); code != 200 || body != "hello from allowed" {
		t.Fatalf("allowed.test: %d %q", code, body)
	}
	// The same through SOCKS5 with a domain-name address.
	d, err := proxy.SOCKS5("tcp", h.addr, nil, proxy.Direct)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Dial("tcp", "rebind.test:"+port); err == nil || !strings.Contains(err.Error(), "connection not allowed by ruleset") {
		t.Fatalf("rebind over SOCKS5: %v", err)
	}
}

func TestSOCKS5(t *testing.T) {
	h := newHarness(t)
	d, err := proxy.SOCKS5("tcp", h.addr, nil, proxy.Direct)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Dial: d.Dial}}
	if code, body := get(t, c, h.allowed.URL); code != 200 || body != "hello from allowed" {
		t.Fatalf("allowed: %d %q", code, body)
	}
	_, err = d.Dial("tcp", h.denied.Listener.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "connection not allowed by ruleset") {
		t.Fatalf("denied: %v", err)
	}
	rep := h.p.Report()
	if len(rep.Denied) != 1 || rep.Denied[0].Count != 1 {
		t.Fatalf("report = %+v", rep)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.denials) != 1 || h.denials[0].Protocol != ProtoSOCKS5 {
		t.Fatalf("denials = %+v", h.denials)
	}
}

func TestSOCKS5RefusesOtherCommandsAndAuth(t *testing.T) {
	h := newHarness(t)
	exchange := func(send []byte, n int) []byte {
		conn, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := conn.Write(send); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(conn, b); err != nil {
			t.Fatalf("read reply to %x: %v", send, err)
		}
		return b
	}
	// Only username/password offered: no acceptable method.
	if b := exchange([]byte{5, 1, 2}, 2); !bytes.Equal(b, []byte{5, 0xff}) {
		t.Fatalf("auth-only greeting: %x", b)
	}
	// UDP ASSOCIATE (3) and BIND (2) are not supported.
	for _, cmd := range []byte{2, 3} {
		b := exchange([]byte{5, 1, 0, 5, cmd, 0, 1, 127, 0, 0, 1, 0, 53}, 12)
		if b[3] != socksCommandUnsupported {
			t.Fatalf("command %d: reply %x", cmd, b)
		}
	}
	if b := exchange([]byte{5, 1, 0, 5, 1, 0, 9}, 12); b[3] != socksAddressUnsupported {
		t.Fatalf("address type 9: reply %x", b)
	}
}

func TestCloseEndsTunnels(t *testing.T) {
	// An upstream that never answers keeps the tunnel open.
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	h := newHarness(t, up.Addr().String())
	tunnels := []net.Conn{}
	conn, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\n", up.Addr())
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tunnels = append(tunnels, conn)
	d, _ := proxy.SOCKS5("tcp", h.addr, nil, proxy.Direct)
	sc, err := d.Dial("tcp", up.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tunnels = append(tunnels, sc)
	_ = h.p.Close()
	for i, c := range tunnels {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		var r io.Reader = c
		if i == 0 {
			r = br
		}
		if _, err := r.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
			t.Fatalf("tunnel %d still open after Close: %v", i, err)
		}
	}
	// And nothing is accepted any more.
	if c, err := net.DialTimeout("tcp", h.addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatal("the proxy still accepts after Close")
	}
}

func TestLargeTransfer(t *testing.T) {
	const size = 8 << 20
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.CopyN(w, zeros{}, size)
	}))
	defer big.Close()
	h := newHarness(t, big.Listener.Addr().String())
	for _, via := range []string{"http", "socks5"} {
		var c *http.Client
		if via == "http" {
			c = h.httpClient(nil)
		} else {
			d, _ := proxy.SOCKS5("tcp", h.addr, nil, proxy.Direct)
			c = &http.Client{Transport: &http.Transport{Dial: d.Dial}}
		}
		resp, err := c.Get(big.URL)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != size {
			t.Fatalf("%s: %d bytes, %v", via, n, err)
		}
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// A command opening connections without end holds at most MaxConns; the
// proxy keeps serving once they close.
func TestMaxConns(t *testing.T) {
	const MaxConns = 16
	h := newHarnessMax(t, MaxConns)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := 0; i < MaxConns; i++ {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// Wait until the proxy tracks them all.
	deadline := time.Now().Add(30 * time.Second)
	for {
		h.p.mu.Lock()
		n := len(h.p.conns)
		h.p.mu.Unlock()
		if n == MaxConns {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tracking %d connections", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	extra, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = extra.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("connection over the bound was not closed: %v", err)
	}
	extra.Close()
	for _, c := range held {
		c.Close()
	}
	held = nil
	c := h.httpClient(nil)
	deadline = time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Get(h.allowed.URL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy did not recover: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An https:// URL asked of the proxy in plain is fetched with certificate
// verification (a proxy framework's default transport may skip it), and the client's
// Accept-Encoding reaches the upstream.
func TestPlainHTTPSVerifiesAndKeepsEncoding(t *testing.T) {
	var gotEncoding string
	enc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotEncoding = r.Header.Get("Accept-Encoding")
	}))
	defer enc.Close()
	h := newHarness(t, enc.Listener.Addr().String())
	req, _ := http.NewRequest("GET", enc.URL, nil)
	req.Header.Set("Accept-Encoding", "br")
	resp, err := h.httpClient(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if gotEncoding != "br" {
		t.Errorf("upstream saw Accept-Encoding %q", gotEncoding)
	}
	conn, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s/ HTTP/1.1\r\nHost: %s\r\n\r\n", h.tls.URL, h.tls.Listener.Addr())
	r, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode == 200 || strings.Contains(string(b), "hello from tls") || !strings.Contains(string(b), "certificate") {
		t.Fatalf("plain https to a self-signed server: %d %q", r.StatusCode, b)
	}
}

// Bytes a client sends in the same write as its CONNECT (a TLS ClientHello
// often is) reach the upstream first, and the client's half-close reaches
// it too: the upstream echoes until end of file, and the client reads the
// whole echo after closing its side.
func TestConnectEarlyBytesAndHalfClose(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		c, err := echo.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
	h := newHarness(t, echo.Addr().String())
	conn, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	target := echo.Addr().String()
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nearly ", target, target)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	if _, err := io.WriteString(conn, "late"); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "early late" {
		t.Fatalf("echo = %q, %v", got, err)
	}
}

// A request that is not a proxy request (an origin-form path) is refused
// with 400, not forwarded anywhere.
func TestNonProxyRequestRefused(t *testing.T) {
	h := newHarness(t)
	resp, err := http.Get("http://" + h.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d", resp.StatusCode)
	}
}
