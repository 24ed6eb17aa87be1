package jobs

import (
	"net"
	"net/http"
	"testing"
	"time"
)

func TestWaitReadyTCP(t *testing.T) {
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
			c.Close()
		}
	}()
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"sleep", "300"}, Ready: Probe{TCP: ln.Addr().String()}})
	r := waitFor(t, st, ForReady, s.Handle)
	if r.Status != StatusReady || !r.Ready {
		t.Fatalf("status %+v", r)
	}
}

func TestReadyTimeoutFails(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"sleep", "300"}, Ready: Probe{Cmd: "false", Timeout: 300 * time.Millisecond}, KillGrace: time.Second})
	r := waitFor(t, st, ForReady, s.Handle)
	if r.Status != StatusFailed || r.Reason != "ready_timeout" || r.Ready {
		t.Fatalf("status %+v", r)
	}
}

func TestWaitReadyHTTP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go srv.Serve(ln)
	defer srv.Close()
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"sleep", "300"}, Ready: Probe{HTTP: "http://" + ln.Addr().String() + "/"}})
	if r := waitFor(t, st, ForReady, s.Handle); r.Status != StatusReady {
		t.Fatalf("status %+v", r)
	}
}

// TestWaitReadyOfJobThatExits: waiting for readiness ends when the job
// ends without becoming ready.
func TestWaitReadyOfJobThatExits(t *testing.T) {
	st := newStore(t)
	s := start(t, st, Spec{Argv: []string{"false"}, Ready: Probe{Log: "never"}})
	if r := waitFor(t, st, ForReady, s.Handle); r.Status != StatusFailed || r.Ready {
		t.Fatalf("status %+v", r)
	}
}
