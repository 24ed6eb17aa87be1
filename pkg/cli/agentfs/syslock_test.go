package agentfs

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/internal/testkit"
	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/state"
)

// TestSystemLockHoldsFiles attacks agentfs under a lock set in the
// system-wide config file only, as a model that chooses agentfs's
// environment, flags and request: the user's file (found through HOME and
// XDG_CONFIG_HOME, or named by AGENTPLANE_CONFIG and --config) sets
// sandbox_lock = false, no sandbox and every directory writable, the
// variables unset the lock, and a request names another config file or
// the lock itself. No change lands outside the system floor's workspace.
func TestSystemLockHoldsFiles(t *testing.T) {
	dir := t.TempDir()
	ws, outside := filepath.Join(dir, "ws"), filepath.Join(dir, "outside")
	sys := filepath.Join(dir, "etc", "config.toml")
	loose := filepath.Join(dir, "home", ".config", "agentplane", "config.toml")
	testkit.WriteFiles(t, map[string]string{
		sys:   "sandbox = \"workspace-write\"\nworkspace = \"" + ws + "\"\nsandbox_lock = true\n",
		loose: "sandbox = \"none\"\nsandbox_lock = false\nworkspace = \"/\"\nallow_write = [\"/\"]\n",
	})
	for _, d := range []string{ws, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	target := filepath.Join(outside, "f")
	request := func(name string, extra map[string]any) string {
		req := map[string]any{"path": target, "content": "x"}
		for k, v := range extra {
			req[k] = v
		}
		data, _ := json.Marshal(req)
		p := filepath.Join(dir, name+".json")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	environ := map[string]string{"HOME": filepath.Join(dir, "home"), "XDG_CONFIG_HOME": filepath.Join(dir, "home", ".config"),
		"XDG_STATE_HOME": filepath.Join(dir, "state"), "AGENTPLANE_CONFIG": loose, "AGENTPLANE_SANDBOX_LOCK": "0",
		"AGENTFS_SANDBOX_LOCK": "false", "AGENTPLANE_SANDBOX": "none"}
	run := runWith(t, sys, environ)
	// The floor's own workspace takes the change: the lock is what
	// refuses the others, not a broken setup.
	if code, out := run("write", filepath.Join(ws, "in"), "--content", "in"); code != 0 {
		t.Fatalf("write inside the system floor's workspace: exit %d: %s", code, out)
	}
	for _, c := range []struct {
		args []string
		code string // "" when any refusal will do (an unknown request key)
	}{
		{[]string{"write", target, "--content", "x"}, "sandbox_locked"},
		{[]string{"--config", loose, "write", target, "--content", "x"}, "sandbox_locked"},
		{[]string{"write", "--request", request("plain", nil)}, "sandbox_locked"},
		{[]string{"write", "--request", request("config", map[string]any{"config": loose})}, ""},
		{[]string{"write", "--request", request("lock", map[string]any{"sandbox_lock": false})}, ""},
		{[]string{"patch", "--patch", "*** Begin Patch\n*** Add File: " + target + "\n+x\n*** End Patch\n"}, ""},
	} {
		code, out := run(c.args...)
		got := gjson.Get(out, "error.code").String()
		if code == 0 || c.code != "" && got != c.code {
			t.Errorf("agentfs %q: exit %d, %s; want a refusal %s", c.args, code, strings.TrimSpace(out), c.code)
		}
		if _, err := os.Stat(target); err == nil {
			t.Fatalf("agentfs %q wrote outside the system floor's workspace", c.args)
		}
	}
}

// TestLockHidesStateSecrets: under a locked filesystem sandbox a command
// cannot read agentplane's secret key or a session's token (the sandbox
// hides them), and agentfs, which holds itself to the hidden paths the
// sandbox would give a command, must not read them either: the key forges
// job and session handles, the token drives a session from outside it.
func TestLockHidesStateSecrets(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	sys := filepath.Join(dir, "etc", "config.toml")
	stateDir := filepath.Join(dir, "state", "agentplane")
	token := filepath.Join(stateDir, "sessions", "s1", "token")
	testkit.WriteFiles(t, map[string]string{
		sys:                         "sandbox = \"workspace-write\"\nworkspace = \"" + ws + "\"\nsandbox_lock = true\n",
		filepath.Join(ws, "in.txt"): "in\n",
	})
	environ := map[string]string{"HOME": filepath.Join(dir, "home"), "XDG_CONFIG_HOME": filepath.Join(dir, "home", ".config"),
		"XDG_STATE_HOME": filepath.Join(dir, "state")}
	run := runWith(t, sys, environ)
	// A change opens the state directory, which makes its key.
	if code, out := run("write", filepath.Join(ws, "in.txt"), "--content", "in2\n"); code != 0 {
		t.Fatalf("write inside the workspace: exit %d: %s", code, out)
	}
	if err := os.MkdirAll(filepath.Dir(token), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(token, []byte("session-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(stateDir, state.KeyFile))
	if err != nil || len(key) == 0 {
		t.Fatalf("no key in the state directory: %v", err)
	}
	for _, p := range []string{filepath.Join(stateDir, state.KeyFile), token} {
		for _, verb := range []string{"read", "stat"} {
			code, out := run(verb, p)
			if verb == "read" && strings.Contains(out, "session-secret") || code == 0 && verb == "read" {
				t.Errorf("agentfs read %s under the lock: exit %d, %.200s", p, code, out)
			}
			if code == 0 && verb == "stat" {
				t.Errorf("agentfs stat %s under the lock: exit %d, %.200s", p, code, out)
			}
			if code != 0 && gjson.Get(out, "error.code").String() != "path_denied" {
				t.Errorf("agentfs %s %s: %s, want path_denied", verb, p, out)
			}
		}
	}
}

// runWith runs agentfs with the system configuration sys and only the
// environment variables environ, and returns its exit code and stdout.
func runWith(t *testing.T, sys string, environ map[string]string) func(args ...string) (int, string) {
	return func(args ...string) (int, string) {
		var out bytes.Buffer
		env := &clikit.Env{Program: Program(), In: strings.NewReader(""), Out: &out, Err: io.Discard, SystemConfig: sys,
			LookupEnv: func(k string) (string, bool) { v, ok := environ[k]; return v, ok }, Environ: func() []string { return nil }}
		env.Ctx = t.Context()
		return clikit.Run(env, args), out.String()
	}
}

// TestRulesHideState attacks agentplane's state through agentfs under a
// rule (--deny, --root), the way a caller that chooses the environment
// would: the undo history of the user's default state directory (read
// and forged while AGENTPLANE_STATE_DIR or XDG_STATE_HOME names another),
// the call's own history reached through a linked directory before it
// exists, and the secret key. Each is path_denied; without a rule agentfs
// stays unrestricted.
func TestRulesHideState(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ws, filepath.Join(dir, "wslink")); err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(ws, ".env")
	if err := os.WriteFile(envFile, []byte("KEY=old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	plain := runWith(t, "", map[string]string{"HOME": home})
	if code, out := plain("write", envFile, "--content", "KEY=new\n"); code != 0 {
		t.Fatalf("write: %d %s", code, out)
	}
	stateDir := filepath.Join(home, ".local", "state", "agentplane")
	datas, _ := filepath.Glob(filepath.Join(stateDir, "history", "*", "*.data"))
	if len(datas) != 1 {
		t.Fatalf("history: %v", datas)
	}
	if code, out := plain("read", datas[0]); code != 0 || !strings.Contains(out, "KEY=old") {
		t.Fatalf("without a rule the history is the caller's: %d %s", code, out)
	}
	for name, environ := range map[string]map[string]string{
		"default":              {"HOME": home},
		"AGENTPLANE_STATE_DIR": {"HOME": home, "AGENTPLANE_STATE_DIR": filepath.Join(dir, "other")},
		"XDG_STATE_HOME":       {"HOME": home, "XDG_STATE_HOME": filepath.Join(dir, "xdg")},
	} {
		run := runWith(t, "", environ)
		for _, rule := range [][]string{{"--deny", "**/.env"}, {"--root", home}} {
			for _, args := range [][]string{
				{"read", datas[0]},
				{"write", datas[0], "--content", "KEY=forged\n"},
				{"read", filepath.Join(stateDir, state.KeyFile)},
			} {
				code, out := run(append(args, rule...)...)
				if code == 0 || gjson.Get(out, "error.code").String() != "path_denied" {
					t.Errorf("%s: agentfs %v %v: exit %d, %.200s", name, args, rule, code, out)
				}
			}
		}
	}
	if b, _ := os.ReadFile(datas[0]); string(b) != "KEY=old\n" {
		t.Fatalf("history forged: %q", b)
	}

	// The call's own history, not made yet, under a linked workspace.
	own := filepath.Join(dir, "wslink", "st")
	run := runWith(t, "", map[string]string{"HOME": home})
	forged := filepath.Join(own, "history", "0f", "000000000001.data")
	code, out := run("write", forged, "--content", "KEY=forged\n", "--state-dir", own, "--root", filepath.Join(dir, "wslink"))
	if code == 0 || gjson.Get(out, "error.code").String() != "path_denied" {
		t.Errorf("write into the call's own history through a link: exit %d, %.200s", code, out)
	}
}

// TestLockHoldsPolicyFiles: under the lock, agentfs (the model's own tool)
// must not change the command policy's rule files inside the floor's
// workspace, those the config names or AGENTPLANE_POLICY does: agentsh's
// next call reads its rules there.
func TestLockHoldsPolicyFiles(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	sys := filepath.Join(dir, "etc", "config.toml")
	byConfig, byEnv, other := filepath.Join(ws, "rules.star"), filepath.Join(ws, "env.star"), filepath.Join(ws, "other.star")
	rule := "prefix_rule(pattern=[\"rm\"], decision=\"forbidden\")\n"
	testkit.WriteFiles(t, map[string]string{
		sys:      "sandbox = \"workspace-write\"\nworkspace = \"" + ws + "\"\nsandbox_lock = true\npolicy = [\"" + byConfig + "\"]\n",
		byConfig: rule, byEnv: rule, other: rule,
	})
	run := runWith(t, sys, map[string]string{"HOME": filepath.Join(dir, "home"), "XDG_STATE_HOME": filepath.Join(dir, "state"),
		"AGENTPLANE_POLICY": byEnv})
	for _, p := range []string{byConfig, byEnv} {
		code, out := run("write", p, "--content", "prefix_rule(pattern=[\"rm\"], decision=\"allow\")\n")
		if code == 0 || gjson.Get(out, "error.code").String() != "sandbox_locked" {
			t.Errorf("agentfs write %s under the lock: exit %d, %s; want sandbox_locked", p, code, out)
		}
		if got, _ := os.ReadFile(p); string(got) != rule {
			t.Errorf("%s rewritten: %q", p, got)
		}
	}
	if code, out := run("write", other, "--content", "x\n"); code != 0 {
		t.Errorf("agentfs write of an ordinary file in the workspace: exit %d, %s", code, out)
	}
}
