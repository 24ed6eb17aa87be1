package netproxy

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"testing"
)

// FuzzSOCKSRequest feeds arbitrary bytes to the SOCKS5 parsers: they must
// never panic, never read past what a request declares, and every request
// they accept must name a CONNECT to a host the Checker can judge.
func FuzzSOCKSRequest(f *testing.F) {
	f.Add([]byte{5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0, 80})
	f.Add([]byte{5, 1, 0, 5, 1, 0, 3, 9, 'l', 'o', 'c', 'a', 'l', 'h', 'o', 's', 't', 1, 187})
	f.Add([]byte{5, 1, 0, 5, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 22})
	f.Add([]byte{5, 2, 0, 2, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{5, 0})
	f.Add([]byte{4, 1, 0, 80, 127, 0, 0, 1, 0})
	f.Add([]byte{5, 1, 0, 5, 1, 0, 3, 0, 0, 80})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		ok, err := readGreeting(r)
		if err != nil || !ok {
			return
		}
		before := r.Len()
		req, err := readRequest(r)
		if err != nil {
			var se *errSOCKS
			if errors.As(err, &se) && se.code == socksSucceeded {
				t.Fatal("an error with the success reply code")
			}
			if !errors.As(err, &se) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		used := before - r.Len()
		if used < 7 || used > 4+1+255+2 {
			t.Fatalf("consumed %d bytes for one request", used)
		}
		if req.port < 0 || req.port > 65535 {
			t.Fatalf("port %d", req.port)
		}
		// Whatever was parsed, an empty allowlist refuses it.
		c := &Checker{Resolver: fakeResolver{}}
		if addrs, _, err := c.Check(t.Context(), req.host, req.port); err == nil {
			t.Fatalf("empty allowlist allowed %q:%d -> %v", req.host, req.port, addrs)
		}
		if a, err := netip.ParseAddr(req.host); err == nil && a.Is4In6() {
			t.Fatalf("a mapped address %s was not unmapped", a)
		}
		_ = socksReply(socksSucceeded, nil)
	})
}
