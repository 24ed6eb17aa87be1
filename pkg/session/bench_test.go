package session

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// connPair is a connected pair of Unix socket connections, as the
// listener would hand the server one.
func connPair(tb testing.TB) (client, server net.Conn) {
	tb.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "sock")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			tb.Fatal(err)
		}
		return c
	}
	return conn(fds[0]), conn(fds[1])
}

// BenchmarkSessionCall is the server's side of one session call of
// `true`, from the connection's first message to its result: the
// caller's admission, the call's files, the shell, the bookkeeping of
// what the call left running, the rendering. answer-ns/op is what the
// caller waits for; ns/op adds the work done after the answer (the next
// call's files), which a call arriving meanwhile waits for; cpu-ns/op is
// the server's own CPU time (the shell's is not counted), the figure a
// loaded machine disturbs least. The CLI's own
// start-up is scripts/bench's (`session` case).
func BenchmarkSessionCall(b *testing.B) {
	s := newTestServer(b)
	auth, err := newAuthority()
	if err != nil {
		b.Fatal(err)
	}
	s.auth = auth
	s.calls.stock(1)
	req := CallRequest{Command: "true", MaxOutput: 30000, KillAfter: time.Second}
	var answers []time.Duration
	cpu0 := cpuTime(b)
	for b.Loop() {
		c, sc := connPair(b)
		done := make(chan struct{})
		go func() { s.serveConn(sc); close(done) }()
		t := time.Now()
		if err := json.NewEncoder(c).Encode(message{Op: "run", Token: auth.token, Call: &req}); err != nil {
			b.Fatal(err)
		}
		var m message
		if err := json.NewDecoder(bufio.NewReader(c)).Decode(&m); err != nil || m.Type != "result" {
			b.Fatalf("answer %+v, %v", m, err)
		}
		answers = append(answers, time.Since(t))
		c.Close()
		<-done
	}
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	reportMedian(b, answers, "answer-ns/op")
}

// reportMedian reports the median of d as metric.
func reportMedian(b *testing.B, d []time.Duration, metric string) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), metric)
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTrackerScan is the scan at a call's end that finds what the
// call left running, with a shell and a background process below the
// root: "quiet" when nothing new is there (the kernel's children lists
// prove it), "by-ids" the scan of every process started on the machine
// since the last one, which a call that left something new gets.
func BenchmarkTrackerScan(b *testing.B) {
	for _, quiet := range []bool{true, false} {
		name := "quiet"
		if !quiet {
			name = "by-ids"
		}
		b.Run(name, func(b *testing.B) {
			c := exec.Command("sh", "-c", "sleep 60 & wait")
			if err := c.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
			tr := newTracker(os.Getpid())
			tr.scan()
			for b.Loop() {
				if !quiet {
					tr.started()
				}
				tr.scan()
			}
			b.ReportMetric(float64(tr.quiets)/float64(b.N), "quiet/op")
		})
	}
}
