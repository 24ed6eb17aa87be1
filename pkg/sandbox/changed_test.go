package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

// TestFailureChanged: a helper's failure that names a path it refused as
// changed (Failure.changed) is a *ChangedError in the chain of the run's
// Failure, with its code kept; any other failure is not.
func TestFailureChanged(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		status, changed string
	}{
		{`{"code":"sandbox_failed","message":"cannot protect /w/.git/config: it is another file now","changed":"/w/.git/config"}`, "/w/.git/config"},
		{`{"code":"sandbox_failed","message":"cannot mount a private /proc: EPERM"}`, ""},
	} {
		status := filepath.Join(dir, "status")
		if err := os.WriteFile(status, []byte(tc.status), 0o600); err != nil {
			t.Fatal(err)
		}
		err := readFailure(status)
		var re *result.Error
		if !errors.As(err, &re) || re.Code != result.CodeSandboxFailed {
			t.Fatalf("%s: %v, want a sandbox_failed error", tc.status, err)
		}
		var ce *ChangedError
		if got := errors.As(err, &ce); got != (tc.changed != "") || (got && ce.Path != tc.changed) {
			t.Fatalf("%s: ChangedError %v (%+v), want one for %q", tc.status, got, ce, tc.changed)
		}
	}
}
