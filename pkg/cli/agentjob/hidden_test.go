package agentjob

import (
	"testing"

	"github.com/agentplane/agentplane/pkg/reexec"
)

// TestHiddenEntryPoints: agentjob serves exactly the hidden entry points
// the table gives it.
func TestHiddenEntryPoints(t *testing.T) {
	if err := reexec.CheckServed("agentjob", hidden()); err != nil {
		t.Fatal(err)
	}
}
