package confine

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"
)

// The helper's raw dials: the first address that accepts wins, a refused
// or unparsable one is skipped, and an HTTP status of 500 or more fails.
func TestDialProbes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/broken" {
			w.WriteHeader(503)
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	up := ln.Addr().String()

	tests := []struct {
		name string
		r    ControlRequest
		want bool
	}{
		{"tcp up", ControlRequest{Kind: ProbeTCP, Addrs: []string{up}}, true},
		{"tcp refused then up", ControlRequest{Kind: ProbeTCP, Addrs: []string{"nonsense", refused, up}}, true},
		{"tcp refused", ControlRequest{Kind: ProbeTCP, Addrs: []string{refused}}, false},
		{"tcp no address", ControlRequest{Kind: ProbeTCP}, false},
		{"http 200", ControlRequest{Kind: ProbeHTTP, Addr: "http://localhost/", Addrs: []string{up}}, true},
		{"http 503", ControlRequest{Kind: ProbeHTTP, Addr: "http://localhost/broken", Addrs: []string{up}}, false},
		{"http refused", ControlRequest{Kind: ProbeHTTP, Addr: "http://localhost/", Addrs: []string{refused}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := dialProbe(tc.r); got != tc.want {
				t.Fatalf("dialProbe = %v, want %v", got, tc.want)
			}
		})
	}
}

// A peer that accepts and never answers fails within the probe's second.
func TestHTTPProbeTimesOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if httpProbe(ctx, "http://localhost/", []string{ln.Addr().String()}) {
		t.Fatal("a silent peer passed")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
}
