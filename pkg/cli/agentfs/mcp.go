package agentfs

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/mcpcmd"
)

// newCmdMCP serves agentfs's operations as MCP tools (pkg/mcpserver).
func newCmdMCP(root *cobra.Command, env *clikit.Env, common *CommonOptions) *cobra.Command {
	return mcpcmd.NewCmd(root, env, &common.StateDir, false)
}
