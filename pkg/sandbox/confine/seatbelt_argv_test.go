package confine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

// seatbeltExec stands for sandbox-exec's path: the argv is built the same
// way on every system.
const seatbeltExec = "/usr/bin/sandbox-exec"

// TestSeatbeltArgv: the macOS helper resolves the command before the
// profile applies and puts it after sandbox-exec's arguments; a command
// that cannot be found is reported as on Linux.
func TestSeatbeltArgv(t *testing.T) {
	status, err := os.Create(filepath.Join(t.TempDir(), "status"))
	if err != nil {
		t.Fatal(err)
	}
	defer status.Close()
	t.Setenv("PATH", "/usr/bin:/bin")
	h := &helper{sp: Spec{Seatbelt: []string{seatbeltExec, "-p", "(version 1)", "--"}}, status: status}
	got, _ := h.seatbeltArgv([]string{"sh", "-c", "echo hi"})
	sh, _, _ := lookPath("sh")
	if want := []string{seatbeltExec, "-p", "(version 1)", "--", sh, "-c", "echo hi"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("argv %q, want %q", got, want)
	}
	got, exit := h.seatbeltArgv([]string{"no-such-command-agentplane"})
	if got != nil || exit != ExitNotFound {
		t.Fatalf("not found: %q exit %d", got, exit)
	}
	var e Failure
	if data, err := os.ReadFile(status.Name()); err != nil || json.Unmarshal(data, &e) != nil || e.Code != result.CodeCommandNotFound {
		t.Fatalf("status %q: %v", data, err)
	}
	h.sp.Seatbelt = nil
	if got, _ := h.seatbeltArgv([]string{"x", "y"}); !reflect.DeepEqual(got, []string{"x", "y"}) {
		t.Fatalf("without a profile: %q", got)
	}
}
