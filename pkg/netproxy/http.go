package netproxy

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// httpProxy is the HTTP side of the proxy: plain requests in absolute form
// go through a ReverseProxy whose transport dials only the addresses the
// allowlist checked, and CONNECT becomes a byte tunnel to a checked
// address. It is the standard library's own pieces, not a proxy
// framework: one that sets itself up in a package init (a CA key parsed on
// every start of every program that links it) would cost every agentsh
// call, sandboxed or not.
type httpProxy struct {
	p  *Proxy
	tr *http.Transport
	rp *httputil.ReverseProxy
}

func (p *Proxy) newHTTP() *httpProxy {
	h := &httpProxy{p: p}
	h.tr = &http.Transport{
		// Never the environment's proxy: this proxy is the way out. The
		// TLS config is the default one, for an https:// URL asked of
		// the proxy in plain: the certificate is verified.
		Proxy:                 nil,
		ForceAttemptHTTP2:     false,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   30 * time.Second,
		ExpectContinueTimeout: time.Second,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			addrs, ok := ctx.Value(pinKey{}).([]netip.AddrPort)
			if !ok || len(addrs) == 0 {
				return nil, errors.New("internal error: a connection the allowlist did not check")
			}
			return p.dialAny(ctx, addrs)
		},
	}
	h.rp = &httputil.ReverseProxy{
		// The request is already in absolute form with its own Host; the
		// hop-by-hop headers are gone before Rewrite. Nothing is added:
		// no X-Forwarded-For, and the client's Accept-Encoding passes on,
		// so compressed responses stay compressed end to end.
		Rewrite:   func(*httputil.ProxyRequest) {},
		Transport: h.tr,
		// Stream: an event stream or a slow download reaches the client
		// as it comes.
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "agentplane network proxy: "+err.Error(), http.StatusBadGateway)
		},
	}
	return h
}

func (h *httpProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		h.connect(w, r)
		return
	}
	if !r.URL.IsAbs() {
		http.Error(w, "agentplane network proxy: only proxy requests (an absolute URL, or CONNECT) are served", http.StatusBadRequest)
		return
	}
	host, port := r.URL.Hostname(), portOf(r.URL.Port(), r.URL.Scheme)
	addrs, _, err := h.p.checker.Check(r.Context(), host, port)
	if err != nil {
		h.p.refuseHTTP(w, host, port, ProtoHTTP, err)
		return
	}
	h.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), pinKey{}, addrs)))
}

// connect checks the CONNECT target, dials a checked address and then
// copies bytes both ways until both sides are done: TLS inside passes
// unchanged.
func (h *httpProxy) connect(w http.ResponseWriter, r *http.Request) {
	target := r.Host
	hs, ps, err := net.SplitHostPort(target)
	if err != nil {
		hs, ps = target, "443"
	}
	port, _ := strconv.Atoi(ps)
	upstream, err := h.p.connect(r.Context(), hs, port, ProtoConnect)
	if err != nil {
		var ref *Refusal
		if errors.As(err, &ref) {
			h.p.writeRefusal(w, hs, port, http.StatusForbidden, err)
		} else {
			h.p.writeRefusal(w, hs, port, http.StatusBadGateway, err)
		}
		return
	}
	client, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = upstream.Close()
		http.Error(w, "agentplane network proxy: cannot tunnel: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = client.Close()
		_ = upstream.Close()
		return
	}
	// The client may have sent its first bytes (a TLS ClientHello) with
	// the CONNECT request; they sit in the server's buffer.
	var src io.Reader = client
	if rw != nil && rw.Reader.Buffered() > 0 {
		src = io.MultiReader(io.LimitReader(rw.Reader, int64(rw.Reader.Buffered())), client)
	}
	tunnel(client, src, upstream)
}

// tunnel copies client→upstream (reading from src, which starts with what
// was buffered) and upstream→client, half-closing each direction when its
// source ends, and closes both connections once both directions are done.
func tunnel(client net.Conn, src io.Reader, upstream net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(upstream, src)
		closeWrite(upstream)
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(client, upstream)
		closeWrite(client)
	}()
	wg.Wait()
	_ = client.Close()
	_ = upstream.Close()
}

func closeWrite(c net.Conn) {
	if hc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite()
		return
	}
	_ = c.Close()
}

// refuseHTTP counts a refusal and answers it: 403 for the allowlist, 502
// when the name does not resolve.
func (p *Proxy) refuseHTTP(w http.ResponseWriter, host string, port int, proto string, err error) {
	var ref *Refusal
	status := http.StatusBadGateway
	if errors.As(err, &ref) {
		p.deny(ref.Host, ref.Port, proto, ref.Reason)
		status = http.StatusForbidden
	}
	p.writeRefusal(w, host, port, status, err)
}

// writeRefusal writes the refusal's response and ends the connection.
func (p *Proxy) writeRefusal(w http.ResponseWriter, host string, port, status int, err error) {
	hd := w.Header()
	hd.Set("Content-Type", "text/plain; charset=utf-8")
	hd.Set("X-Agentplane-Denied", hostPort(strings.ToLower(host), port))
	hd.Set("Connection", "close")
	body := refusalText(err)
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}
