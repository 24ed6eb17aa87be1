package sandbox

import (
	"testing"

	"github.com/agentplane/agentplane/pkg/sandbox/spawn"
)

// TestAdoptRefusesUnstarted: a helper that could not start ahead (the
// guard has no cgroup to start it in: environ mode) is not adopted, so the
// run starts its own; adopting it failed every such call (red team 7, F1).
func TestAdoptRefusesUnstarted(t *testing.T) {
	requireRoot(t)
	requireLandlock(t)
	_, ws, _ := dirs(t)
	prep, err := Prepare(Policy{Mode: ModeWorkspaceWrite, Workspace: ws}, self(t))
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	t.Cleanup(prep.Cleanup)
	h := spawn.New(false, self(t), "agentsh")
	if h == nil {
		t.Fatal("no helper to start ahead as root")
	}
	h.Start(-1)
	if prep.Adopt(h) {
		t.Fatal("a helper that did not start was adopted")
	}
}
