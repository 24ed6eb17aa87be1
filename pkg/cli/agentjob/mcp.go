package agentjob

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/mcpcmd"
)

// newCmdMCP serves agentjob's operations as MCP tools (pkg/mcpserver),
// with job lifecycle events as notifications.
func newCmdMCP(root *cobra.Command, env *clikit.Env, stateDir *string) *cobra.Command {
	return mcpcmd.NewCmd(root, env, stateDir, false)
}
