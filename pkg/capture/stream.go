package capture

// Stream bounds what a Stream holds back between chunks: a line or an escape
// sequence longer than this is let go rather than buffered without limit.
const (
	maxPendingLine = 64 << 10
	maxPendingSeq  = 4 << 10
)

// Stream cleans output chunk by chunk for --stream, with the same rules as
// Render, but joined across chunk boundaries: an escape sequence or UTF-8
// character split between two reads is parsed whole, and a line is only
// emitted once it is finished ("\n"), so "\r" redraws collapse to their final
// state as they do in the rendered result. Call Flush at the end of the
// stream for the last unfinished line. A Stream is not safe for concurrent use;
// use one per output stream.
type Stream struct {
	raw     bool
	c       cleaner
	pending []byte // the start of a sequence or character cut by the chunk end
}

// NewStream returns a Stream; opt.Raw keeps escapes and carriage returns and
// only repairs UTF-8 (without splitting a character between chunks).
func NewStream(opt RenderOptions) *Stream {
	return &Stream{raw: opt.Raw, c: cleaner{stream: true}}
}

// Next cleans chunk and returns the text that is final so far, which may be
// empty. The result is valid UTF-8 and is not retained by the Stream.
func (s *Stream) Next(chunk []byte) []byte {
	data := chunk
	if len(s.pending) > 0 {
		data = append(s.pending, chunk...)
		s.pending = nil
	}
	if s.raw {
		n := partialRuneAtEnd(data)
		out, lossy := validText(data[:len(data)-n])
		s.c.lossy = s.c.lossy || lossy
		s.pending = append([]byte(nil), data[len(data)-n:]...)
		return append([]byte(nil), out...)
	}
	s.c.run(data)
	if s.c.cut >= 0 && len(data)-s.c.cut <= maxPendingSeq {
		s.pending = append([]byte(nil), data[s.c.cut:]...)
	}
	if len(s.c.line) > maxPendingLine {
		// A terminal would have wrapped long ago; show it rather than grow.
		s.c.flush()
	}
	out := s.c.out
	s.c.out = nil
	return out
}

// Flush returns the rest: the unfinished last line, with any incomplete
// sequence at the very end dropped (or an incomplete character replaced).
func (s *Stream) Flush() []byte {
	data := s.pending
	s.pending = nil
	if s.raw {
		out, lossy := validText(data)
		s.c.lossy = s.c.lossy || lossy
		return append([]byte(nil), out...)
	}
	s.c.stream = false
	s.c.run(data)
	s.c.stream = true
	s.c.flush()
	out := s.c.out
	s.c.out = nil
	return out
}

// Lossy reports whether invalid UTF-8 has been replaced so far.
func (s *Stream) Lossy() bool { return s.c.lossy }
