package agentjob

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestNoAgentshImport keeps the two programs' trees apart: what agentjob
// shares with agentsh (the sandbox flags, the command policy, the
// hidden entry points, the engines) lives in packages of its own, so
// agentjob never links agentsh's command tree. A move that puts a shared
// mechanism back into pkg/cli/agentsh fails here.
func TestNoAgentshImport(t *testing.T) {
	const self = "github.com/agentplane/agentplane/pkg/cli/agentjob"
	const forbidden = "github.com/agentplane/agentplane/pkg/cli/agentsh"
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goTool, "list", "-deps", "-test", "-f", "{{.ImportPath}}", self).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", self, err)
	}
	deps := strings.Fields(string(out))
	found := false
	for _, d := range deps {
		if d == forbidden {
			t.Errorf("%s depends on %s", self, forbidden)
		}
		found = found || d == "github.com/agentplane/agentplane/pkg/cli/clikit"
	}
	if !found {
		// The list is not what it seems: the test would pass on nothing.
		t.Fatalf("go list -deps %s does not list clikit: %q", self, deps)
	}
}
