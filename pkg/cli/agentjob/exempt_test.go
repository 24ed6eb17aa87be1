package agentjob

import (
	"testing"

	"github.com/agentplane/agentplane/pkg/cli/agentsh"
	"github.com/agentplane/agentplane/pkg/jobs"
)

// TestSupervisorCommandAgrees: agentsh spares processes running agentjob's
// supervisor subcommand by name; the two spellings must not drift apart.
func TestSupervisorCommandAgrees(t *testing.T) {
	if agentsh.JobSupervisorCommand != jobs.SupervisorCommand {
		t.Fatalf("agentsh spares %q but the supervisor runs as %q", agentsh.JobSupervisorCommand, jobs.SupervisorCommand)
	}
}
