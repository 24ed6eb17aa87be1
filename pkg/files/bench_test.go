package files

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// bigFile writes a file of about size bytes of numbered lines and returns
// its path.
func bigFile(b *testing.B, dir string, size int) string {
	b.Helper()
	var buf bytes.Buffer
	buf.Grow(size + 64)
	for i := 0; buf.Len() < size; i++ {
		fmt.Fprintf(&buf, "%08d the quick brown fox jumps over the lazy dog, line of a big file\n", i)
	}
	p := filepath.Join(dir, "big.txt")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkEdit100MB measures one edit in the middle of a 100 MB file. The
// "baseline" sub-benchmark does the least any editor must do (read, replace
// in memory, write a temp file, fsync, rename), so the ratio of the others
// to it is the engine's overhead: hashing, checks, diff, history.
func BenchmarkEdit100MB(b *testing.B) {
	const size = 100 << 20
	dir := b.TempDir()
	var p string
	toggle := func(i int) (string, string) {
		a, c := "00700000 the quick", "00700000 THE QUICK"
		if i%2 == 1 {
			return c, a
		}
		return a, c
	}

	b.Run("baseline", func(b *testing.B) {
		p = bigFile(b, dir, size)
		b.SetBytes(size)
		for i := 0; b.Loop(); i++ {
			old, new := toggle(i)
			data, err := os.ReadFile(p)
			if err != nil {
				b.Fatal(err)
			}
			data = bytes.Replace(data, []byte(old), []byte(new), 1)
			tmp := p + ".tmp"
			f, err := os.Create(tmp)
			if err != nil {
				b.Fatal(err)
			}
			f.Write(data)
			f.Sync()
			f.Close()
			if err := os.Rename(tmp, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, hist := range []bool{false, true} {
		b.Run(fmt.Sprint("engine/history=", hist), func(b *testing.B) {
			bigFile(b, dir, size)
			fsys := &FS{Root: dir, Dir: dir}
			if hist {
				fsys.HistoryDir = b.TempDir()
			}
			b.SetBytes(size)
			for i := 0; b.Loop(); i++ {
				old, new := toggle(i)
				m, err := fsys.Edit("big.txt", []EditSpec{{Old: old, New: new}}, EditOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if m.DiffStats != (DiffStats{1, 1}) {
					b.Fatalf("%+v", m.DiffStats)
				}
			}
		})
	}
}
