package policy

import (
	"testing"
	"time"
)

// fuzzDeadline is far above what any input of the fuzzer's size needs; an
// input that takes longer is a hang, not a slow machine.
const fuzzDeadline = 10 * time.Second

// FuzzExtract checks that extraction never panics, never hangs, and keeps
// its promises on any input. Seeds: the extraction table here and the files
// in testdata/fuzz/FuzzExtract.
func FuzzExtract(f *testing.F) {
	for _, tc := range extractCases() {
		f.Add(tc.script)
	}
	p := New()
	f.Fuzz(func(t *testing.T, script string) {
		done := make(chan struct{})
		var cmds []Command
		var unres []Unresolved
		var err error
		go func() {
			defer close(done)
			cmds, unres, err = Extract(script)
			p.Check(script)
		}()
		select {
		case <-done:
		case <-time.After(fuzzDeadline):
			t.Fatalf("Extract(%q) did not return within %v", script, fuzzDeadline)
		}
		if err != nil {
			if cmds != nil || unres != nil {
				t.Fatalf("Extract(%q) returned results with error %v", script, err)
			}
			return
		}
		if len(cmds)+len(unres) > maxItems+1 {
			t.Fatalf("Extract(%q) returned %d items, over the bound", script, len(cmds)+len(unres))
		}
		for _, c := range cmds {
			if len(c.Argv) == 0 {
				t.Fatalf("Extract(%q) returned an empty argv", script)
			}
		}
		for _, u := range unres {
			if u.Reason == "" {
				t.Fatalf("Extract(%q) returned an unresolved item without a reason", script)
			}
		}
	})
}
