package netproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// A SOCKS5 server (RFC 1928), CONNECT only, no authentication: the proxy
// listens only inside the command's own network namespace, where the
// command is the only client. It is written here because no maintained Go
// SOCKS5 server library resolves through the module proxy; it is small,
// parses with fixed-size reads only, and is fuzzed (FuzzSOCKSRequest).

const socksVersion = 5

// Reply codes of RFC 1928 §6.
const (
	socksSucceeded          = 0
	socksGeneralFailure     = 1
	socksNotAllowed         = 2 // "connection not allowed by ruleset"
	socksNetworkUnreachable = 3
	socksHostUnreachable    = 4
	socksConnectionRefused  = 5
	socksCommandUnsupported = 7
	socksAddressUnsupported = 8
)

const (
	socksCmdConnect = 1
	atypIPv4        = 1
	atypDomain      = 3
	atypIPv6        = 4
	methodNoAuth    = 0
	methodNone      = 0xff
)

// socksHandshakeTimeout bounds the negotiation, not the tunnel.
const socksHandshakeTimeout = 30 * time.Second

// socksRequest is a parsed CONNECT request.
type socksRequest struct {
	host string // a name or an IP address in text form
	port int
}

// errSOCKS carries the reply code a malformed or unsupported request gets.
type errSOCKS struct {
	code byte
	msg  string
}

func (e *errSOCKS) Error() string { return e.msg }

// readGreeting reads the method negotiation and reports whether the
// client offers "no authentication".
func readGreeting(r io.Reader) (bool, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return false, err
	}
	if hdr[0] != socksVersion {
		return false, fmt.Errorf("socks: version %d, want 5", hdr[0])
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(r, methods); err != nil {
		return false, err
	}
	for _, m := range methods {
		if m == methodNoAuth {
			return true, nil
		}
	}
	return false, nil
}

// readRequest reads one request. Its error is an *errSOCKS when the client
// should get a reply before the connection closes.
func readRequest(r io.Reader) (socksRequest, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return socksRequest{}, err
	}
	if hdr[0] != socksVersion {
		return socksRequest{}, &errSOCKS{socksGeneralFailure, fmt.Sprintf("socks: version %d, want 5", hdr[0])}
	}
	var req socksRequest
	switch hdr[3] {
	case atypIPv4:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return req, err
		}
		req.host = netip.AddrFrom4(b).String()
	case atypIPv6:
		var b [16]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return req, err
		}
		req.host = netip.AddrFrom16(b).Unmap().String()
	case atypDomain:
		var n [1]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return req, err
		}
		b := make([]byte, n[0])
		if _, err := io.ReadFull(r, b); err != nil {
			return req, err
		}
		req.host = string(b)
	default:
		return req, &errSOCKS{socksAddressUnsupported, fmt.Sprintf("socks: address type %d", hdr[3])}
	}
	var pb [2]byte
	if _, err := io.ReadFull(r, pb[:]); err != nil {
		return req, err
	}
	req.port = int(pb[0])<<8 | int(pb[1])
	if hdr[1] != socksCmdConnect {
		return req, &errSOCKS{socksCommandUnsupported, fmt.Sprintf("socks: command %d is not supported (only CONNECT)", hdr[1])}
	}
	return req, nil
}

// socksReply encodes a reply with the bound address (zero when unknown).
func socksReply(code byte, bound net.Addr) []byte {
	ap := netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	if ta, ok := bound.(*net.TCPAddr); ok && ta != nil {
		ap = ta.AddrPort()
	}
	a := ap.Addr().Unmap()
	out := []byte{socksVersion, code, 0}
	if a.Is4() {
		b := a.As4()
		out = append(out, atypIPv4)
		out = append(out, b[:]...)
	} else {
		b := a.As16()
		out = append(out, atypIPv6)
		out = append(out, b[:]...)
	}
	return append(out, byte(ap.Port()>>8), byte(ap.Port()))
}

// dialReply maps a dial error to its reply code.
func dialReply(err error) byte {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return socksConnectionRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return socksNetworkUnreachable
	case errors.Is(err, syscall.EHOSTUNREACH):
		return socksHostUnreachable
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return socksHostUnreachable
	}
	return socksGeneralFailure
}

func (p *Proxy) serveSOCKS(c *peekedConn) {
	_ = c.SetDeadline(time.Now().Add(socksHandshakeTimeout))
	ok, err := readGreeting(c)
	if err != nil {
		return
	}
	if !ok {
		_, _ = c.Write([]byte{socksVersion, methodNone})
		return
	}
	if _, err := c.Write([]byte{socksVersion, methodNoAuth}); err != nil {
		return
	}
	req, err := readRequest(c)
	if err != nil {
		var se *errSOCKS
		if errors.As(err, &se) {
			_, _ = c.Write(socksReply(se.code, nil))
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	up, err := p.connect(ctx, req.host, req.port, ProtoSOCKS5)
	cancel()
	if err != nil {
		var ref *Refusal
		code := dialReply(err)
		if errors.As(err, &ref) {
			code = socksNotAllowed
		}
		_, _ = c.Write(socksReply(code, nil))
		return
	}
	defer up.Close()
	if _, err := c.Write(socksReply(socksSucceeded, up.LocalAddr())); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	tunnel(c, c, up)
}
