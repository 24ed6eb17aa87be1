package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/pkg/run"
)

// heredoc returns a command of about size bytes that writes a file with a
// heredoc, as a model writing a large file does, and the file's content.
func heredoc(file string, size int) (string, string) {
	line := strings.Repeat("0123456789abcdef", 7) + "\n" // 113 bytes
	body := strings.Repeat(line, size/len(line)+1)
	return "cat > " + file + " <<'AGENTSH_EOF'\n" + body + "AGENTSH_EOF\necho written", body
}

// TestLargeCommand: a 1 MiB command string, eight times the kernel's limit
// for one argument, writes its file one-shot, sandboxed, and in a session,
// reaching the shell through a file rather than argv.
func TestLargeCommand(t *testing.T) {
	dir := t.TempDir()
	env := append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	agentsh := func(stdin []byte, args ...string) string {
		t.Helper()
		c := exec.Command(os.Args[0], args...)
		c.Env, c.Dir, c.Stdin = env, dir, bytes.NewReader(stdin)
		out, err := c.Output()
		if err != nil {
			t.Fatalf("agentsh %v: %v\n%.2000s", args, err, out)
		}
		return string(out)
	}
	session := gjson.Get(agentsh(nil, "session", "start"), "session").String()
	defer agentsh(nil, "session", "stop", session)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"one-shot", nil},
		{"sandboxed", []string{"--sandbox", "workspace-write"}},
		{"session", []string{"--session", session}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, tc.name+".txt")
			cmd, body := heredoc(file, 1<<20)
			if len(cmd) <= 8*run.MaxArgLen {
				t.Fatalf("the command is only %d bytes", len(cmd))
			}
			req, _ := json.Marshal(map[string]any{"command": cmd})
			out := agentsh(req, append([]string{"--request", "-"}, tc.args...)...)
			if gjson.Get(out, "exit_code").Int() != 0 || gjson.Get(out, "stdout").String() != "written\n" {
				t.Fatalf("result: %.2000s", out)
			}
			got, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != body {
				t.Fatalf("the file has %d bytes, want %d", len(got), len(body))
			}
			if c := gjson.Get(out, "command").String(); c != cmd {
				t.Fatalf("the result reports a command of %d bytes, want the %d given", len(c), len(cmd))
			}
		})
	}
}
