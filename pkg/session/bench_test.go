package session

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkCallTrue is the shell's side of a session round trip: one call
// of true through the whole protocol (call file, FIFOs, the line, the
// prompt, the bookkeeping after it), without the client and the socket.
// shell-cpu-ns/op is the shell's own CPU time per call (from
// /proc/PID/schedstat; 0 where there is none), what the protocol's text
// costs bash to parse and run.
func BenchmarkCallTrue(b *testing.B) {
	s := newTestServer(b)
	call := func() {
		if obj, _ := runCall(b, s, CallRequest{Command: "true", Timeout: 20 * time.Second}, nil); field(obj, "exit_code") != 0 {
			b.Fatalf("call: %v", obj)
		}
	}
	// Both slots' functions defined, as in a session past its first calls.
	call()
	call()
	cpu0 := shellCPU(s.sh.self.PID)
	for b.Loop() {
		call()
	}
	b.ReportMetric(float64(shellCPU(s.sh.self.PID)-cpu0)/float64(b.N), "shell-cpu-ns/op")
}

// shellCPU is the CPU time pid's main thread has used, in nanoseconds.
func shellCPU(pid int) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "schedstat"))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
	return n
}

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
// caller waits for (the median: a shared machine's noise is one-sided);
// ns/op adds the work done after the answer (the next call's files),
// which a call arriving meanwhile waits for; cpu-ns/op is the server's
// own CPU time (the shell's is not counted), the figure a loaded machine
// disturbs least. The CLI's own start-up is scripts/bench's (`session`
// case).
func BenchmarkSessionCall(b *testing.B) {
	benchCalls(b, "true")
}

// BenchmarkSessionCallBackground is a call that starts a background
// process writing 109 kB after the call returned, then a call of `wait`
// for it: "chatty" sends them to the session's log, "quiet" to /dev/null.
// The difference in cpu-ns/op is what the log costs the server.
func BenchmarkSessionCallBackground(b *testing.B) {
	b.Run("quiet", func(b *testing.B) { benchCalls(b, "{ sleep 0.01; seq 1 20000 >/dev/null; } &", "wait") })
	b.Run("chatty", func(b *testing.B) { benchCalls(b, "{ sleep 0.01; seq 1 20000; } &", "wait") })
}

// benchCalls runs the commands as one call each per iteration through the
// whole server side of a call; answer-ns/op is the first call's.
func benchCalls(b *testing.B, cmds ...string) {
	s := newTestServer(b)
	auth, err := newAuthority()
	if err != nil {
		b.Fatal(err)
	}
	s.auth = auth
	s.calls.stock(1)
	// The session's own bound, so that the log rotates as often as in a
	// session; in a directory of its own, which a background process's
	// last bytes may still reach while the test cleans up.
	logDir, err := os.MkdirTemp("", "agentplane-bglog-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(logDir) })
	s.bg = newBackground(filepath.Join(logDir, "bg.log"), bgLogLimit)
	call := func(cmd string) time.Duration {
		req := CallRequest{Command: cmd, MaxOutput: 30000, KillAfter: time.Second}
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
		d := time.Since(t)
		c.Close()
		<-done
		return d
	}
	var answers []time.Duration
	cpu0 := cpuTime(b)
	for b.Loop() {
		answers = append(answers, call(cmds[0]))
		for _, cmd := range cmds[1:] {
			call(cmd)
		}
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
