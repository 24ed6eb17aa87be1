package execguard

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"sync"
	"time"
)

// The guard's reports reach its runner on a pipe of their own, for a
// one-shot call, a job's run and a session alike: the guard is often PID 1
// of the sandbox's namespaces and shares its mount namespace, whose root
// the sandbox helper makes read-only, so no file the guard could write is
// sure to reach the runner; a pipe inherited from the runner is.
//
// The pipe is the guard's alone. The runner passes its write end as one
// of the guard's descriptors (see Guard.Wrap) and closes its own copy once
// the guard started; the guard marks it close-on-exec and starts the
// command with stdin, stdout, stderr and the runner's own extra files
// only. The command cannot reach it through /proc either: the guard is
// not dumpable, so /proc/GUARD/fd needs CAP_SYS_PTRACE, which a sandboxed
// command never has, and under a filesystem sandbox it is also in a
// Landlock domain the guard is not in. So every line on the pipe is the
// guard's: the command can neither forge one nor hold the pipe open.
//
// A line is the report of one call as it stands (call 0 outside a
// session), and a later line for the same call supersedes an earlier one.
// The guard writes a line as soon as something is decided that a report
// must not lose (an exec refused, a prompt-level exec run on approval),
// before it acts further, and a last one when the run ends: a guard that
// is killed with the call (a timeout's SIGKILL) still leaves what it
// decided until then. Outside a session each allowed image is also
// counted on a short line of its own, so that the count of a guard killed
// before its last line is still every image it let run; the last line is
// marked as the end, and a report without one says that it was
// interrupted (Report.Interrupted).

// reportLine is one line on the report pipe: a call's report, or (Report
// nil) the count of images decided in it so far.
type reportLine struct {
	Call   int     `json:"call"`
	Report *Report `json:"report,omitempty"`
	Execs  int     `json:"execs,omitempty"`
	End    bool    `json:"end,omitempty"`
}

// maxReportLine bounds a line the runner accepts; a longer one (argv
// lists of megabytes) is skipped, never buffered without bound, and the
// pipe keeps being drained so that the guard never blocks on it.
const maxReportLine = 64 << 20

// reportWait bounds the wait for the pipe's end after the guard process
// ended: only the guard holds it, so its end is the pipe's end.
const reportWait = 10 * time.Second

// reportWriter is the guard's end.
type reportWriter struct {
	mu sync.Mutex
	f  *os.File
}

// send writes call's report as it stands. A runner that is gone (EPIPE) is
// not the guard's concern: the run ends with it.
func (w *reportWriter) send(call int, r *Report) { w.write(reportLine{Call: call, Report: r}) }

// sendEnd writes the run's last report: the guard's final word.
func (w *reportWriter) sendEnd(r *Report) { w.write(reportLine{Report: r, End: true}) }

// sendCount writes the count of images decided so far (outside a session).
func (w *reportWriter) sendCount(execs int) { w.write(reportLine{Execs: execs}) }

func (w *reportWriter) write(l reportLine) {
	if w == nil || w.f == nil {
		return
	}
	b, err := json.Marshal(l)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.f.Write(append(b, '\n'))
}

// reportReader is the runner's end: it drains the pipe from the guard's
// start to its end, keeping the newest report of each call.
type reportReader struct {
	done chan struct{} // closed at the pipe's end

	mu      sync.Mutex
	last    map[int]*Report
	refused map[int]chan struct{} // closed once call N had an exec refused
	execs   int                   // the last count line's (call 0)
	ended   bool                  // the end line came
}

func newReportReader(r *os.File) *reportReader {
	rd := &reportReader{done: make(chan struct{}), last: map[int]*Report{}, refused: map[int]chan struct{}{}}
	go rd.read(r, maxReportLine)
	return rd
}

// read drains f to its end, taking each line of at most max bytes.
func (rd *reportReader) read(f *os.File, max int) {
	defer close(rd.done)
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := readLine(br, max)
		if len(line) > 0 {
			rd.takeLine(line)
		}
		if err != nil {
			return
		}
	}
}

// takeLine takes one line that parses as a report; others are ignored.
func (rd *reportReader) takeLine(line []byte) {
	var l reportLine
	if json.Unmarshal(line, &l) != nil {
		return
	}
	switch {
	case l.Report != nil:
		rd.take(l)
	case l.Execs > 0:
		rd.mu.Lock()
		rd.execs = max(rd.execs, l.Execs)
		rd.mu.Unlock()
	}
}

// readLine returns the next line without its newline, or nil for a line
// longer than max (which is consumed all the same).
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	long := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !long {
			if len(line)+len(chunk) > max {
				long, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		switch {
		case err == nil:
			if long {
				return nil, nil
			}
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && !long:
			return nil, err // an unfinished line is not a report
		default:
			return nil, err
		}
	}
}

func (rd *reportReader) take(l reportLine) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	rd.last[l.Call] = l.Report
	if l.End {
		rd.ended = true
	}
	if l.Report.Killed != nil {
		c := rd.refusedLocked(l.Call)
		select {
		case <-c:
		default:
			close(c)
		}
	}
	// A session asks only for its current call and the one before.
	for k := range rd.last {
		if k < l.Call-1 {
			delete(rd.last, k)
		}
	}
	for k := range rd.refused {
		if k < l.Call-1 {
			delete(rd.refused, k)
		}
	}
}

func (rd *reportReader) refusedLocked(call int) chan struct{} {
	c := rd.refused[call]
	if c == nil {
		c = make(chan struct{})
		rd.refused[call] = c
	}
	return c
}

// refusal returns a channel closed once call had an exec refused. A
// session asks for each call in turn: older calls are forgotten.
func (rd *reportReader) refusal(call int) <-chan struct{} {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	for k := range rd.refused {
		if k < call-1 {
			delete(rd.refused, k)
		}
	}
	return rd.refusedLocked(call)
}

// final waits, for at most d, for the pipe's end, and returns call's last
// report, normalized (enforcement on, Approved never null). Outside a
// session (call 0) a pipe that ended without the guard's end line is an
// interrupted report, whose count is the last one the guard sent.
func (rd *reportReader) final(call int, d time.Duration) *Report {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-rd.done:
	case <-t.C:
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	var r Report
	if got := rd.last[call]; got != nil {
		r = *got
	}
	if call == 0 {
		r.Execs = max(r.Execs, rd.execs)
		r.Interrupted = !rd.ended
	}
	return normalized(&r)
}

func normalized(r *Report) *Report {
	r.Enforced = EnforceRuntime
	if r.Approved == nil {
		r.Approved = []Exec{}
	}
	return r
}
