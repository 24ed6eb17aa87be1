package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestLargeCommand: a job whose command string is 1 MiB, eight times the
// kernel's limit for one argument, writes its file, and writes it again
// when restarted: the command reaches the shell through a file.
func TestLargeCommand(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "big.txt")
	line := strings.Repeat("0123456789abcdef", 7) + "\n"
	body := strings.Repeat(line, (1<<20)/len(line)+1)
	cmd := "cat > " + file + " <<'AGENTJOB_EOF'\n" + body + "AGENTJOB_EOF\n"
	req, _ := json.Marshal(map[string]any{"command": cmd})
	start := agentjobCmd(dir, "start", "--request", "-")
	start.Stdin = bytes.NewReader(req)
	var out bytes.Buffer
	start.Stdout = &out
	if err := start.Run(); err != nil {
		t.Fatalf("start: %v\n%.2000s", err, out.String())
	}
	h := gjson.Get(out.String(), "handle").String()
	check := func(step string) {
		t.Helper()
		res, code := runAgentjob(t, dir, "wait", "--timeout", "60s", h)
		if code != 0 || gjson.Get(res, "status").String() != "exited" || gjson.Get(res, "exit_code").Int() != 0 {
			t.Fatalf("%s: wait: exit %d: %.2000s", step, code, res)
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if string(got) != body {
			t.Fatalf("%s: the file has %d bytes, want %d", step, len(got), len(body))
		}
	}
	check("start")
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if res, code := runAgentjob(t, dir, "restart", h); code != 0 {
		t.Fatalf("restart: %.2000s", res)
	}
	check("restart")
}
