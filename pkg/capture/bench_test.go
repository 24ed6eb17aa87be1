package capture

import (
	"bytes"
	"io"
	"os/exec"
	"testing"
)

// BenchmarkHeadTailWrite measures steady-state capture: 64 KiB writes (a full
// pipe buffer) into the default 30000-byte limit, head already full, so every
// write is the tail-only memcpy path.
func BenchmarkHeadTailWrite(b *testing.B) {
	p := make([]byte, 64<<10)
	h := NewHeadTail(30000, KeepBoth)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		h.Write(p)
	}
}

// BenchmarkHeadTailSmallWrites is the line-buffered case: many short writes
// that each go through the ring's wrap-around copy.
func BenchmarkHeadTailSmallWrites(b *testing.B) {
	p := bytes.Repeat([]byte("x"), 100)
	h := NewHeadTail(30000, KeepBoth)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		h.Write(p)
	}
}

// BenchmarkPipe compares reading 256 MiB from a real process into a HeadTail
// with reading it into io.Discard, in the same run, so the ratio of the two
// is what matters, not the machine.
func BenchmarkPipe(b *testing.B) {
	for _, tc := range []struct {
		name string
		dst  func() io.Writer
	}{
		{"discard", func() io.Writer { return io.Discard }},
		{"headtail", func() io.Writer { return NewHeadTail(30000, KeepBoth) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			const size = 256 << 20
			b.SetBytes(size)
			buf := make([]byte, 64<<10)
			for b.Loop() {
				cmd := exec.Command("head", "-c", "256M", "/dev/zero")
				out, err := cmd.StdoutPipe()
				if err != nil {
					b.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					b.Skip("head not available:", err)
				}
				dst := tc.dst()
				var n int64
				for {
					k, err := out.Read(buf)
					dst.Write(buf[:k])
					n += int64(k)
					if err != nil {
						break
					}
				}
				cmd.Wait()
				if n != size {
					b.Fatalf("read %d bytes", n)
				}
			}
		})
	}
}

// BenchmarkRender is the cost of turning a full default capture of coloured
// progress output into text.
func BenchmarkRender(b *testing.B) {
	line := []byte("\r\x1b[32m 42%|████      | 42/100 [00:01<00:02]\x1b[0m")
	h := NewHeadTail(30000, KeepBoth)
	for range 2000 {
		h.Write(line)
	}
	c := h.Snapshot()
	b.SetBytes(int64(len(c.Head) + len(c.Tail)))
	for b.Loop() {
		Render(c, RenderOptions{})
	}
}
