package agentsh

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/mcpcmd"
)

// newCmdMCP serves agentsh's operations, and with --all agentjob's and
// agentfs's, as MCP tools (pkg/mcpserver).
func newCmdMCP(root *cobra.Command, env *clikit.Env, stateDir *string) *cobra.Command {
	return mcpcmd.NewCmd(root, env, stateDir, true)
}
