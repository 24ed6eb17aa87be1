package session

import (
	"testing"
	"time"
)

// BenchmarkCallTrue is the shell's side of a session round trip: one call
// of true through the whole protocol (call file, FIFOs, the line, the
// prompt, the bookkeeping after it), without the client and the socket.
func BenchmarkCallTrue(b *testing.B) {
	s := newTestServer(b)
	for b.Loop() {
		if obj, _ := runCall(b, s, CallRequest{Command: "true", Timeout: 20 * time.Second}, nil); field(obj, "exit_code") != 0 {
			b.Fatalf("call: %v", obj)
		}
	}
}
