package confine

import (
	"testing"

	"github.com/agentplane/agentplane/pkg/sandbox/spawn"
)

// TestSpawnSpecFD: a helper started ahead (package spawn, which imports
// neither this package nor its dependencies, and which this one does not
// link) is started as the helper and finds its spec where spawn puts it.
func TestSpawnSpecFD(t *testing.T) {
	if spawn.SpecFD != SpecFD(false) || spawn.Command != Command {
		t.Fatalf("spawn passes the spec at %d as %q, the helper reads it at %d as %q", spawn.SpecFD, spawn.Command, SpecFD(false), Command)
	}
}
