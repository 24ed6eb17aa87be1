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
			if rep.Execs != tc.execs || (rep.Killed != nil) != tc.killed || rep.Approved == nil || rep.Enforced != EnforceRuntime {
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
