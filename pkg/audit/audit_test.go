package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The concurrency test re-executes this test binary; these variables tell
// the child which log to append to and who it is.
const (
	childEnv    = "AUDIT_TEST_CHILD"
	childPath   = "AUDIT_TEST_PATH"
	childMax    = "AUDIT_TEST_MAX_BYTES"
	childKeep   = "AUDIT_TEST_KEEP"
	childCount  = 50
	childProcs  = 20
	childMaxLog = 8 << 10
)

func TestMain(m *testing.M) {
	if id := os.Getenv(childEnv); id != "" {
		os.Exit(runChild(id))
	}
	os.Exit(m.Run())
}

// runChild appends childCount records tagged with its id, as one of the
// concurrent agentsh processes would.
func runChild(id string) int {
	maxBytes, _ := strconv.ParseInt(os.Getenv(childMax), 10, 64)
	keep, _ := strconv.Atoi(os.Getenv(childKeep))
	l := &Log{Path: os.Getenv(childPath), MaxBytes: maxBytes, Keep: keep}
	for i := range childCount {
		code := i % 3
		err := l.Append(Record{
			Program:     "agentsh",
			Operation:   "run",
			Command:     []string{"echo", id, strconv.Itoa(i)},
			Description: "concurrent append " + strings.Repeat("x", i), // varied lengths
			Cwd:         "/tmp",
			Status:      "completed",
			ExitCode:    &code,
			Handle:      id + "/" + strconv.Itoa(i),
			PID:         os.Getpid(),
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

func newLog(t testing.TB) *Log {
	t.Helper()
	return &Log{Path: filepath.Join(t.TempDir(), "state", FileName)}
}

func intp(i int) *int { return &i }

func mustAppend(t testing.TB, l *Log, r Record) {
	t.Helper()
	if err := l.Append(r); err != nil {
		t.Fatal(err)
	}
}

func handles(rs []Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Handle
	}
	return out
}

func TestRecordJSON(t *testing.T) {
	tests := []struct {
		name    string
		rec     Record
		want    map[string]any // fields that must be present with these values
		absent  []string       // fields that must be left out
		literal string         // a substring the raw line must contain
	}{
		{
			name: "shell string, no policy",
			rec:  Record{Program: "agentsh", Operation: "run", Command: "make test && ls > out", Status: "completed", ExitCode: intp(0), DurationMS: 12},
			want: map[string]any{"program": "agentsh", "operation": "run", "command": "make test && ls > out", "decision": "", "status": "completed", "exit_code": 0.0, "duration_ms": 12.0, "description": "", "cwd": ""},
			absent: []string{"approved", "sandbox", "handle", "session", "error_code", "pid",
				"stdout", "stderr", "output"},
			literal: `"make test && ls > out"`, // not HTML-escaped
		},
		{
			name:   "argv, approved prompt, sandbox",
			rec:    Record{Program: "agentjob", Operation: "start", Command: []string{"rm", "-rf", "build"}, Decision: "prompt", Approved: true, Sandbox: map[string]any{"mode": "workspace-write"}, Status: "started", Handle: "job_abc", PID: 42},
			want:   map[string]any{"command": []any{"rm", "-rf", "build"}, "decision": "prompt", "approved": true, "sandbox": map[string]any{"mode": "workspace-write"}, "handle": "job_abc", "pid": 42.0, "exit_code": nil},
			absent: []string{"session", "error_code"},
		},
		{
			name:   "refused by policy",
			rec:    Record{Program: "agentsh-session", Operation: "session_call", Command: "curl x | sh", Decision: "forbidden", Status: "denied", Session: "ses_x", ErrorCode: "policy_denied"},
			want:   map[string]any{"session": "ses_x", "error_code": "policy_denied", "decision": "forbidden", "exit_code": nil},
			absent: []string{"approved", "handle", "pid"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLog(t)
			mustAppend(t, l, tt.rec)
			raw, err := os.ReadFile(l.Path)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Count(raw, []byte("\n")) != 1 || raw[len(raw)-1] != '\n' {
				t.Fatalf("want exactly one line, got %q", raw)
			}
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				got, ok := m[k]
				if !ok {
					t.Errorf("field %q missing in %s", k, raw)
					continue
				}
				if fmt.Sprint(got) != fmt.Sprint(v) {
					t.Errorf("%s = %v, want %v", k, got, v)
				}
			}
			for _, k := range tt.absent {
				if _, ok := m[k]; ok {
					t.Errorf("field %q should be absent in %s", k, raw)
				}
			}
			if tt.literal != "" && !bytes.Contains(raw, []byte(tt.literal)) {
				t.Errorf("line %s lacks %s", raw, tt.literal)
			}
			if _, err := time.Parse(time.RFC3339, m["time"].(string)); err != nil || !strings.HasSuffix(m["time"].(string), "Z") || len(m["time"].(string)) != len("2006-01-02T15:04:05.000Z") {
				t.Errorf("time %v is not RFC 3339 UTC with milliseconds", m["time"])
			}
			if m["user"] == "" {
				t.Error("user not filled")
			}
		})
	}
}

func TestAppendKeepsGivenTimeAndUser(t *testing.T) {
	l := newLog(t)
	mustAppend(t, l, Record{Time: "2026-01-02T03:04:05.678Z", User: "alice"})
	rs, err := l.Read(time.Time{}, 0)
	if err != nil || len(rs) != 1 {
		t.Fatal(rs, err)
	}
	if rs[0].Time != "2026-01-02T03:04:05.678Z" || rs[0].User != "alice" {
		t.Errorf("got %+v", rs[0])
	}
}

func TestReadSinceLimit(t *testing.T) {
	l := newLog(t)
	base := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	for i := range 10 {
		mustAppend(t, l, Record{Time: base.Add(time.Duration(i) * time.Minute).Format("2006-01-02T15:04:05.000Z07:00"), Handle: strconv.Itoa(i)})
	}
	tests := []struct {
		name  string
		since time.Time
		limit int
		want  string
	}{
		{"all", time.Time{}, 0, "0 1 2 3 4 5 6 7 8 9"},
		{"since is inclusive", base.Add(7 * time.Minute), 0, "7 8 9"},
		{"since between records", base.Add(7*time.Minute + time.Second), 0, "8 9"},
		{"since in the future", base.Add(time.Hour), 0, ""},
		{"limit keeps the newest", time.Time{}, 3, "7 8 9"},
		{"limit larger than log", time.Time{}, 50, "0 1 2 3 4 5 6 7 8 9"},
		{"since and limit", base.Add(2 * time.Minute), 2, "8 9"},
		{"since in another zone", base.Add(5 * time.Minute).In(time.FixedZone("X", 3600)), 0, "5 6 7 8 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := l.Read(tt.since, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(handles(rs), " "); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReadMissing(t *testing.T) {
	l := &Log{Path: filepath.Join(t.TempDir(), "nowhere", FileName)}
	rs, err := l.Read(time.Time{}, 0)
	if err != nil || len(rs) != 0 {
		t.Fatalf("got %v, %v", rs, err)
	}
}

// lineSize is the size of one test record line: rotation tests size
// MaxBytes in whole lines so the expected file layout is exact.
func lineSize(t *testing.T, r Record) int64 {
	t.Helper()
	l := newLog(t)
	mustAppend(t, l, r)
	fi, err := os.Stat(l.Path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func TestRotation(t *testing.T) {
	rec := func(i int) Record {
		return Record{Time: "2026-11-29T18:00:00.000Z", User: "u", Program: "agentsh", Handle: fmt.Sprintf("h%03d", i)}
	}
	size := lineSize(t, rec(0))
	tests := []struct {
		name      string
		perFile   int64 // MaxBytes in lines
		keep      int
		n         int
		wantFiles []int // lines in .keep … .1, then current; 0 for a missing file
	}{
		{"no rotation below the cap", 5, 3, 5, []int{0, 0, 0, 5}},
		{"one rotation", 5, 3, 6, []int{0, 0, 5, 1}},
		{"fills every kept file", 5, 3, 20, []int{5, 5, 5, 5}},
		{"drops the oldest beyond keep", 5, 3, 23, []int{5, 5, 5, 3}},
		{"keep one", 2, 1, 7, []int{2, 1}},
		{"one record per file", 1, 4, 6, []int{1, 1, 1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLog(t)
			l.MaxBytes, l.Keep = tt.perFile*size, tt.keep
			for i := range tt.n {
				mustAppend(t, l, rec(i))
			}
			paths := []string{}
			for i := tt.keep; i >= 1; i-- {
				paths = append(paths, l.rotated(i))
			}
			paths = append(paths, l.Path)
			total := 0
			for i, p := range paths {
				raw, err := os.ReadFile(p)
				if errors.Is(err, os.ErrNotExist) {
					raw = nil
				} else if err != nil {
					t.Fatal(err)
				}
				if got := bytes.Count(raw, []byte("\n")); got != tt.wantFiles[i] {
					t.Errorf("%s: %d lines, want %d", filepath.Base(p), got, tt.wantFiles[i])
				}
				if int64(len(raw)) > l.MaxBytes {
					t.Errorf("%s: %d bytes exceeds MaxBytes %d", filepath.Base(p), len(raw), l.MaxBytes)
				}
				total += tt.wantFiles[i]
			}
			if _, err := os.Stat(l.rotated(tt.keep + 1)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s exists beyond Keep", l.rotated(tt.keep+1))
			}
			rs, err := l.Read(time.Time{}, 0)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for i := tt.n - total; i < tt.n; i++ {
				want = append(want, rec(i).Handle)
			}
			if got := handles(rs); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("Read = %v, want %v", got, want)
			}
		})
	}
}

func TestOversizedRecordStandsAlone(t *testing.T) {
	l := newLog(t)
	l.MaxBytes, l.Keep = 100, 3
	mustAppend(t, l, Record{Handle: "small"})
	mustAppend(t, l, Record{Handle: "big", Description: strings.Repeat("d", 500)})
	mustAppend(t, l, Record{Handle: "after"})
	rs, err := l.Read(time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(handles(rs), " "); got != "small big after" {
		t.Errorf("got %q", got)
	}
	raw, _ := os.ReadFile(l.rotated(1))
	if bytes.Count(raw, []byte("\n")) != 1 || !bytes.Contains(raw, []byte(`"big"`)) {
		t.Errorf("the oversized record should be alone in %s: %q", l.rotated(1), raw)
	}
}

func TestTornLine(t *testing.T) {
	good := func(h string) string {
		b, _ := json.Marshal(Record{Time: "2026-11-29T18:00:00.000Z", Handle: h})
		return string(b) + "\n"
	}
	tests := []struct {
		name     string
		existing string // file content before the append
		want     string // handles Read returns after one append of "new"
	}{
		{"empty file", "", "new"},
		{"clean file", good("a"), "a new"},
		{"torn tail after a record", good("a") + `{"time":"2026-11-29T18:00:00.000Z","hand`, "a new"},
		{"torn tail alone", `{"program":"agen`, "new"},
		// A record that lost only its newline is whole: ending it recovers it.
		{"record missing only its newline", good("a") + strings.TrimSuffix(good("b"), "\n"), "a b new"},
		{"garbage and blank lines in the middle", good("a") + "not json\n\n[1,2]\n" + good("b"), "a b new"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLog(t)
			if err := os.MkdirAll(filepath.Dir(l.Path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(l.Path, []byte(tt.existing), 0o600); err != nil {
				t.Fatal(err)
			}
			mustAppend(t, l, Record{Handle: "new"})
			rs, err := l.Read(time.Time{}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(handles(rs), " "); got != tt.want {
				t.Errorf("Read = %q, want %q", got, tt.want)
			}
			// The torn bytes are kept (nothing is erased from an audit
			// trail) but end on their own line: the new record is a whole
			// line that parses by itself.
			raw, _ := os.ReadFile(l.Path)
			if !bytes.HasPrefix(raw, []byte(tt.existing)) {
				t.Errorf("existing bytes were altered: %q", raw)
			}
			lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
			if r, ok := parse([]byte(lines[len(lines)-1])); !ok || r.Handle != "new" {
				t.Errorf("last line %q is not the new record", lines[len(lines)-1])
			}
		})
	}
}

func TestFsyncOption(t *testing.T) {
	l := newLog(t)
	l.Fsync = true
	mustAppend(t, l, Record{Handle: "a"})
	if rs, err := l.Read(time.Time{}, 0); err != nil || len(rs) != 1 {
		t.Fatal(rs, err)
	}
}

// TestConcurrentProcesses is the guarantee issue 9 asks for: many processes
// appending at once, with rotation happening under them, leave only whole,
// parseable lines and lose or duplicate none.
func TestConcurrentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l := newLog(t)
	// Records are ~250 bytes, so 1000 of them rotate about 30 times; Keep
	// leaves room for all, so the count must be exact.
	l.MaxBytes, l.Keep = childMaxLog, 200
	if err := os.MkdirAll(filepath.Dir(l.Path), 0o700); err != nil {
		t.Fatal(err)
	}
	cmds := make([]*exec.Cmd, childProcs)
	outs := make([]*bytes.Buffer, childProcs)
	for i := range cmds {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(),
			childEnv+"="+fmt.Sprintf("c%02d", i),
			childPath+"="+l.Path,
			childMax+"="+strconv.FormatInt(l.MaxBytes, 10),
			childKeep+"="+strconv.Itoa(l.Keep))
		outs[i] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i])
		}
	}

	// Every line of every file is a whole record.
	files, err := filepath.Glob(l.Path + "*")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("only %d files: rotation did not happen as the test intends", len(files))
	}
	lines := 0
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		if fi.Size() > l.MaxBytes {
			t.Errorf("%s: %d bytes exceeds MaxBytes", p, fi.Size())
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			lines++
			if _, ok := parse(sc.Bytes()); !ok {
				t.Errorf("%s: unparsable line %q", p, sc.Text())
			}
		}
		f.Close()
	}
	if lines != childProcs*childCount {
		t.Errorf("%d lines in %d files, want %d", lines, len(files), childProcs*childCount)
	}

	// Read sees them all exactly once, and each process's records in the
	// order it appended them, which also proves the rotated files are
	// read oldest first.
	rs, err := l.Read(time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != childProcs*childCount {
		t.Fatalf("Read returned %d records, want %d", len(rs), childProcs*childCount)
	}
	next := map[string]int{}
	for _, r := range rs {
		id, n, _ := strings.Cut(r.Handle, "/")
		if strconv.Itoa(next[id]) != n {
			t.Fatalf("record %s out of order or duplicated: want %s/%d", r.Handle, id, next[id])
		}
		next[id]++
	}
	if len(next) != childProcs {
		t.Errorf("records from %d processes, want %d", len(next), childProcs)
	}
}

func BenchmarkAppend(b *testing.B) {
	for _, fsync := range []bool{false, true} {
		b.Run("fsync="+strconv.FormatBool(fsync), func(b *testing.B) {
			l := newLog(b)
			l.Fsync = fsync
			r := Record{Program: "agentsh", Operation: "run", Command: "go test ./...", Description: "run the tests", Cwd: "/home/me/project", Decision: "allow", Status: "completed", ExitCode: intp(0), DurationMS: 1234, PID: 4242}
			b.ReportAllocs()
			for b.Loop() {
				if err := l.Append(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
