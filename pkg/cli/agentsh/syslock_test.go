package agentsh

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/internal/testkit"
	"github.com/agentplane/agentplane/pkg/cli/clikit"
)

// TestSystemLockHoldsAnyEnvironment attacks a lock set in the system-wide
// config file the way a model that sets the environment of an agentsh
// would (a command's own agentsh in a sandboxed call, a host's MCP server
// configured from a file in the workspace): HOME, XDG_CONFIG_HOME and
// AGENTPLANE_CONFIG point at a user file without the lock, and --config
// names it. The system file cannot be moved, and its floor holds.
func TestSystemLockHoldsAnyEnvironment(t *testing.T) {
	dir := t.TempDir()
	sys := filepath.Join(dir, "etc", "config.toml")
	loose := filepath.Join(dir, "x", ".config", "agentplane", "config.toml")
	testkit.WriteFiles(t, map[string]string{
		sys:   "sandbox = \"workspace-write\"\nsandbox_lock = true\n",
		loose: "sandbox = \"none\"\nsandbox_lock = false\n",
	})
	environ := map[string]string{"HOME": filepath.Join(dir, "x"), "XDG_CONFIG_HOME": filepath.Join(dir, "x", ".config"),
		"XDG_STATE_HOME": filepath.Join(dir, "state"), "AGENTPLANE_CONFIG": loose, "AGENTPLANE_SANDBOX_LOCK": "0"}
	for _, args := range [][]string{
		{"--sandbox", "none", "--", "true"},
		{"--config", loose, "--sandbox", "none", "--", "true"},
		{"--allow-write", "/", "--", "true"},
	} {
		var out bytes.Buffer
		env := &clikit.Env{Program: Program(), In: strings.NewReader(""), Out: &out, Err: io.Discard, SystemConfig: sys,
			LookupEnv: func(k string) (string, bool) { v, ok := environ[k]; return v, ok }, Environ: func() []string { return nil }}
		env.Ctx = t.Context()
		code := clikit.Run(env, args)
		if got := gjson.Get(out.String(), "error.code").String(); code != ExitFailed || got != "sandbox_locked" {
			t.Errorf("agentsh %v: exit %d, %s; want 125 and sandbox_locked", args, code, strings.TrimSpace(out.String()))
		}
	}
}
