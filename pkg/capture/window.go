package capture

// Window cleans one window of a longer byte stream, such as a read of a log
// file at some offset, by the rules of Clean (or with raw, only repairing
// UTF-8), and returns how many bytes of b it consumed. Unless final says
// nothing follows b, a UTF-8 character or escape sequence cut off by the end
// of the window is not consumed, so that reading window after window from
// the returned positions never splits one; a window that is nothing but such
// a start consumes none of it, and the caller must offer a longer window (or
// a final one). Bytes at the start of b that continue a character begun
// before the window (at most three) are skipped and counted as consumed
// only in skipped: they belong to the previous window.
//
// Each window is cleaned on its own: a carriage-return redraw that spans two
// windows is not collapsed across them.
func Window(b []byte, final, raw bool) (text []byte, skipped, consumed int, lossy bool) {
	skipped = partialRuneAtStart(b)
	b = b[skipped:]
	end := len(b)
	if raw {
		if !final {
			end -= partialRuneAtEnd(b)
		}
		out, lossy := validText(b[:end])
		return out, skipped, end, lossy
	}
	c := cleaner{out: make([]byte, 0, len(b)), stream: !final}
	c.run(b)
	if !final && c.cut >= 0 {
		end = c.cut
	}
	c.flush()
	return c.out, skipped, end, c.lossy
}
