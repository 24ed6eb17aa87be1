package files

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// TestStreamedReadMatchesWhole: a file read in one streaming pass (cut
// into tiny chunks, so runes and lines straddle them) gives exactly what
// the in-memory read gives, for every selection.
func TestStreamedReadMatchesWhole(t *testing.T) {
	fsys, root := newTestFS(t)
	files := map[string]string{
		"lf":      "one\ntwo\nthree\n",
		"crlf":    "one\r\ntwo\r\nthree\r\n",
		"nofinal": "a\nb\nlast",
		"bom":     utf8BOM + "héllo\nwörld\n",
		"runes":   strings.Repeat("日本語 ✓ émoji 😀\n", 40),
		"empty":   "",
		"nl":      "\n\n\n",
		"bad":     "ok\n\xff\xfe nope\n",
		"cut":     "abc\xe6\x97",
		"nul":     "text\x00more\n",
	}
	for name, content := range files {
		put(t, filepath.Join(root, name), content)
	}
	opts := []ReadOptions{{}, {Offset: 2}, {Offset: 2, Limit: 1}, {Limit: 2, Numbered: true},
		{MaxBytes: 5}, {MaxBytes: 2}, {Offset: 3, MaxBytes: 7, Numbered: true}, {Offset: 99}}
	defer func(m int64, c int) { readStreamMin, streamChunk = m, c }(readStreamMin, streamChunk)
	for name := range files {
		for _, opt := range opts {
			for _, chunk := range []int{1, 3, 7, 4096} {
				readStreamMin = 1 << 40
				want, werr := fsys.Read(name, opt)
				readStreamMin, streamChunk = 0, chunk
				got, gerr := fsys.Read(name, opt)
				readStreamMin, streamChunk = 1<<40, 256<<10
				if code(werr) != code(gerr) || !reflect.DeepEqual(want, got) {
					t.Errorf("%s %+v chunk %d:\nwhole    %+v %v\nstreamed %+v %v", name, opt, chunk, want, werr, got, gerr)
				}
			}
		}
	}
}

// TestReadHugeFileBounded: a text file far larger than what a read may
// return is read in one pass, holding no more than a chunk and the lines
// returned: the sha256 and line count are of the whole file, and the
// memory allocated stays a small fraction of its size.
func TestReadHugeFileBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 48 MiB")
	}
	fsys, root := newTestFS(t)
	name := filepath.Join(root, "huge.log")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	h := sha256.New()
	line := strings.Repeat("x", 1023) + "\n"
	const n = 48 << 10 // 48 MiB, three times what a read returns at most
	for range n {
		w.WriteString(line)
		h.Write([]byte(line))
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, err := fsys.Read("huge.log", ReadOptions{Offset: 1000, Limit: 3})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if r.TotalLines != n || r.Size != n*1024 || r.SHA256 != hex.EncodeToString(h.Sum(nil)) {
		t.Fatalf("facts: lines %d size %d sha %s", r.TotalLines, r.Size, r.SHA256)
	}
	if r.Content != strings.Repeat(line, 3) || r.LineStart != 1000 || r.LineEnd != 1002 {
		t.Fatalf("content %d bytes, lines %d-%d", len(r.Content), r.LineStart, r.LineEnd)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Fatalf("a read of 3 lines of a 48 MiB file allocated %d MiB", alloc>>20)
	}
	// Without a limit, the content is cut at DefaultReadMax, at a line end.
	r, err = fsys.Read("huge.log", ReadOptions{})
	if err != nil || !r.Truncated || len(r.Content) != DefaultReadMax || r.LineEnd != DefaultReadMax/1024 {
		t.Fatalf("whole read: %d bytes, truncated %v, line_end %d, %v", len(r.Content), r.Truncated, r.LineEnd, err)
	}
	st, err := fsys.Stat("huge.log")
	if err != nil || st.TotalLines != n || st.SHA256 != r.SHA256 {
		t.Fatalf("stat: %+v %v", st, err)
	}
}

// TestReadMaxBytesHuge: a --max-bytes as large as an int holds returns
// the whole file, streamed or not. The streamed read added a rune's
// length to the bound, which wrapped negative: every line came back
// empty, with truncated false.
func TestReadMaxBytesHuge(t *testing.T) {
	fsys, root := newTestFS(t)
	put(t, filepath.Join(root, "f.txt"), "one\ntwo\nthree\n")
	defer func(m int64) { readStreamMin = m }(readStreamMin)
	for _, min := range []int64{1 << 40, 0} {
		readStreamMin = min
		r, err := fsys.Read("f.txt", ReadOptions{MaxBytes: math.MaxInt})
		if err != nil || r.Content != "one\ntwo\nthree\n" || r.Truncated {
			t.Errorf("streamed=%v: %+v %v", min == 0, r, err)
		}
	}
}
