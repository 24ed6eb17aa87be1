package reexec

import (
	"io"
	"strings"
	"testing"
)

func TestTableNamesDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range Table() {
		if !strings.HasPrefix(e.Name, "__") || seen[e.Name] {
			t.Errorf("entry %q: a hidden name starts with __ and is declared once", e.Name)
		}
		seen[e.Name] = true
	}
}

func TestDispatchAndCheck(t *testing.T) {
	var got []string
	mains := map[string]Main{Watchdog: func(args []string, _ io.Reader, _ io.Writer) int { got = args; return 7 }}
	if code, ok := Dispatch([]string{Watchdog, "a", "b"}, mains, nil, nil); !ok || code != 7 || len(got) != 2 {
		t.Fatalf("Dispatch = %d, %v; args %q", code, ok, got)
	}
	if _, ok := Dispatch([]string{"--help"}, mains, nil, nil); ok {
		t.Fatal("a flag was dispatched")
	}
	if _, ok := Dispatch([]string{JobSupervisor}, mains, nil, nil); ok {
		t.Fatal("an entry point this program does not serve was dispatched")
	}
	if err := CheckServed("agentsh", mains); err == nil || !strings.Contains(err.Error(), SessionServer) {
		t.Fatalf("CheckServed missed what agentsh lacks: %v", err)
	}
}
