package session

import (
	"fmt"
	"os"
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

// Bytes the log could not take (a full disk: /dev/full stands in for the
// log's file) are dropped bytes for every read that asked for them, once
// the log can be written again; offsets stay those of the bytes kept.
func TestBgLogLostBytesAreDropped(t *testing.T) {
	dir := t.TempDir()
	l := &bgLog{path: filepath.Join(dir, "bg.log"), limit: 1000}
	line := func(n int) string { return fmt.Sprintf("line %03d\n", n) } // 9 bytes
	l.write([]byte(line(0)))
	if _, err := readLog(dir, LogsRequest{SinceLast: true}); err != nil {
		t.Fatal(err)
	}
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full")
	}
	l.f.Close()
	l.f = full
	l.write([]byte(line(1)))
	l.write([]byte(line(2)))
	// The disk has room again.
	l.f.Close()
	l.f = nil
	l.write([]byte(line(3)))
	cases := []struct {
		name string
		req  LogsRequest
		want int64
		data string
	}{
		{"since-last", LogsRequest{SinceLast: true}, 18, line(3)},
		{"since-last again", LogsRequest{SinceLast: true}, 0, ""},
		{"whole", LogsRequest{}, 18, line(0) + line(3)},
		{"tail within", LogsRequest{Tail: 1}, 0, line(3)},
		{"tail across the loss", LogsRequest{Tail: 2}, 18, line(0) + line(3)},
	}
	for _, c := range cases {
		r, err := readLog(dir, c.req)
		if err != nil {
			t.Fatal(err)
		}
		if r.DroppedBytes != c.want || r.Data != c.data || r.NextOffset != 18 {
			t.Errorf("%s: dropped_bytes %d, want %d; data %q, want %q (%+v)", c.name, r.DroppedBytes, c.want, r.Data, c.data, r)
		}
	}
}
