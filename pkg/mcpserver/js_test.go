package mcpserver_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestJSClient drives agentsh mcp --all with the MCP JavaScript SDK's
// client (@modelcontextprotocol/sdk from npm, installed here into a
// temporary directory): the same checks as the Go client's tests, from
// the other reference implementation.
func TestJSClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the JavaScript SDK client test needs node and npm")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed: the JavaScript SDK client test needs node and npm")
	}
	dir := t.TempDir()
	for _, f := range []string{"package.json", "client.test.mjs"} {
		b, err := os.ReadFile(filepath.Join("testdata", "js", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	install := exec.Command(npm, "install", "--no-audit", "--no-fund", "--loglevel=error")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm install @modelcontextprotocol/sdk: %v\n%s", err, out)
	}
	py := realPython(t)
	work, stateDir := t.TempDir(), t.TempDir()
	run := exec.Command(node, "client.test.mjs", binDir, work, stateDir)
	run.Dir = dir
	run.Env = append(testEnv(t), "PYTHON="+py)
	out, err := run.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || strings.Contains(string(out), "not ok") {
		t.Fatalf("the JavaScript client's checks failed: %v", err)
	}
}
