package agentsh

import (
	"testing"

	"github.com/agentplane/agentplane/pkg/reexec"
)

// TestHiddenEntryPoints: agentsh serves exactly the hidden entry points
// the table gives it.
func TestHiddenEntryPoints(t *testing.T) {
	if err := reexec.CheckServed("agentsh", hidden()); err != nil {
		t.Fatal(err)
	}
}
