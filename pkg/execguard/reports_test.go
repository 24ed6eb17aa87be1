package execguard

import (
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReportReader feeds the runner's end what a guard (or anything else)
// could write: the newest whole report of a call wins, an over-long line
// is skipped without stopping the drain, and a line the writer never
// finished is no report.
func TestReportReader(t *testing.T) {
	line := func(call, execs int, killed bool) string {
		k := ""
		if killed {
			k = `,"killed":{"argv":["touch","MARK"],"rule":"[\"touch\"]","decision":"forbidden"}`
		}
		return `{"call":` + strconv.Itoa(call) + `,"report":{"enforced":"runtime","execs":` + strconv.Itoa(execs) + `,"approved":[]` + k + "}}\n"
	}
	cases := []struct {
		name      string
		input     string
		max       int
		execs     int
		killed    bool
		refusedOK bool
	}{
		{"one report", line(0, 3, false), maxReportLine, 3, false, false},
		{"the newest wins", line(0, 1, false) + line(0, 2, true), maxReportLine, 2, true, true},
		{"a refusal stays signalled", line(0, 1, true) + line(0, 2, false), maxReportLine, 2, false, true},
		{"garbage between", line(0, 1, false) + "not json\n" + line(0, 5, false), maxReportLine, 5, false, false},
		{"over-long line skipped", line(0, 1, false) + strings.Repeat("x", 300) + "\n" + line(0, 7, false), 200, 7, false, false},
		{"unfinished last line", line(0, 4, false) + `{"call":0,"report":{"execs":9`, maxReportLine, 4, false, false},
		{"another call's report", line(1, 9, true) + line(0, 2, false), maxReportLine, 2, false, false},
		{"nothing", "", maxReportLine, 0, false, false},
		// Count lines: a guard killed after them counted what it let run.
		{"counts after the last report", line(0, 1, false) + `{"call":0,"execs":4}` + "\n", maxReportLine, 4, false, false},
		{"a count never lowers a report", `{"call":0,"execs":2}` + "\n" + line(0, 6, false), maxReportLine, 6, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			rd := &reportReader{done: make(chan struct{}), last: map[int]*Report{}, refused: map[int]chan struct{}{}}
			go rd.read(r, tc.max)
			refusal := rd.refusal(0)
			_, _ = io.WriteString(w, tc.input)
			w.Close()
			rep := rd.final(0, 10*time.Second)
			if rep.Execs != tc.execs || (rep.Killed != nil) != tc.killed || rep.Approved == nil || rep.Enforced != EnforceRuntime || !rep.Interrupted {
				t.Fatalf("report %+v, want execs %d killed %v", rep, tc.execs, tc.killed)
			}
			select {
			case <-refusal:
				if !tc.refusedOK {
					t.Fatal("a refusal was signalled")
				}
			default:
				if tc.refusedOK {
					t.Fatal("the refusal was not signalled")
				}
			}
		})
	}
}

// TestReportEnd: the guard's last line marks the end, and a report without
// it says it was interrupted; the writer's lines are what the reader takes.
func TestReportEnd(t *testing.T) {
	for _, ended := range []bool{true, false} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		rd := newReportReader(r)
		out := &reportWriter{f: w}
		out.sendCount(1)
		out.sendCount(2)
		if ended {
			out.sendEnd(&Report{Execs: 3, Approved: []Exec{}})
		}
		w.Close()
		rep := rd.final(0, 10*time.Second)
		want := 2
		if ended {
			want = 3
		}
		if rep.Interrupted == ended || rep.Execs != want {
			t.Errorf("ended %v: report %+v, want execs %d, interrupted %v", ended, rep, want, !ended)
		}
	}
}
