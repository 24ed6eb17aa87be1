package session

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// The bound drops the oldest bytes; every read that asked for some of them
// says how many are gone.
func TestBgLogDroppedBytes(t *testing.T) {
	dir := t.TempDir()
	l := &bgLog{path: filepath.Join(dir, "bg.log"), limit: 100}
	line := func(n int) string { return fmt.Sprintf("line %03d\n", n) } // 9 bytes
	for n := 0; n < 5; n++ {
		l.write([]byte(line(n)))
	}
	// 45 bytes, nothing dropped yet.
	r, err := readLog(dir, LogsRequest{SinceLast: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.DroppedBytes != 0 || r.Offset != 0 || r.NextOffset != 45 || !strings.HasPrefix(r.Data, line(0)) {
		t.Fatalf("first read: %+v", r)
	}
	// Past the limit the oldest half goes, including bytes written after
	// the last read.
	for n := 5; n < 12; n++ {
		l.write([]byte(line(n)))
	}
	base := readBase(l.basePath())
	if base <= 45 {
		t.Fatalf("rotation dropped only %d bytes, want more than were read", base)
	}
	cases := []struct {
		name string
		req  LogsRequest
		want int64
	}{
		{"since-last", LogsRequest{SinceLast: true}, base - 45},
		{"since-last again", LogsRequest{SinceLast: true}, 0},
		{"whole", LogsRequest{}, base},
		{"tail within", LogsRequest{Tail: 2}, 0},
		{"tail past the window", LogsRequest{Tail: 50}, base},
	}
	for _, c := range cases {
		r, err := readLog(dir, c.req)
		if err != nil {
			t.Fatal(err)
		}
		if r.DroppedBytes != c.want {
			t.Errorf("%s: dropped_bytes %d, want %d (%+v)", c.name, r.DroppedBytes, c.want, r)
		}
		if c.name == "since-last" && (r.Offset != base || r.NextOffset != 12*9 || !strings.HasSuffix(r.Data, line(11))) {
			t.Errorf("since-last: %+v", r)
		}
	}
}
