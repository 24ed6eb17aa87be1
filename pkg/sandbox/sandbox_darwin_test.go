package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/capture"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/run"
)

// These tests run only on macOS, against the real sandbox-exec; on Linux
// they are compiled and linked (scripts/test-darwin) but not run. The test
// binary is its own helper, as on Linux.

const netProbeCommand = "__net-probe"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case HelperCommand:
			os.Exit(HelperMain(os.Args[2:]))
		case netProbeCommand:
			os.Exit(netProbe())
		}
	}
	os.Exit(m.Run())
}

// netProbe serves and dials on 127.0.0.1, then dials a non-loopback
// address, and prints one line per step.
func netProbe() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("listen:", err)
		return 1
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = c.Write([]byte("pong"))
			c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		fmt.Println("loopback:", err)
		return 1
	}
	buf := make([]byte, 4)
	n, _ := c.Read(buf)
	c.Close()
	fmt.Printf("loopback: %s\n", buf[:n])
	_, err = net.DialTimeout("tcp", "10.255.255.1:9", 3*time.Second)
	fmt.Printf("external: denied=%v err=%v\n", err != nil && strings.Contains(err.Error(), "operation not permitted"), err)
	return 0
}

func requireSeatbelt(t *testing.T) {
	t.Helper()
	if Probe().SandboxExec == "" {
		t.Skip("no " + SeatbeltExec)
	}
}

func sandboxedDarwin(t *testing.T, p Policy, dir string, argv ...string) (*run.Result, *Prepared) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	prep, err := Prepare(p, exe)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	t.Cleanup(prep.Cleanup)
	res, err := run.Run(context.Background(), run.Request{
		Argv:      prep.Argv(argv),
		Dir:       dir,
		Env:       append(os.Environ(), prep.Env...),
		Timeout:   60 * time.Second,
		KillAfter: time.Second,
		Drain:     200 * time.Millisecond,
		MaxOutput: 64 << 10,
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return res, prep
}

func textOf(h *capture.HeadTail) string {
	c := h.Snapshot()
	return string(c.Head) + string(c.Tail)
}

// realTempDir is t.TempDir with symlinks resolved (/var is /private/var).
func realTempDir(t *testing.T) string {
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDarwinWorkspaceWrite(t *testing.T) {
	requireSeatbelt(t)
	ws, outside := realTempDir(t), realTempDir(t)
	if err := os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := `echo in > in; echo tmp > "$TMPDIR/t" && echo tmp-ok
echo out > "$1/out" 2>/dev/null && echo OUT-WRITTEN
echo hook > .git/hooks/pre-commit 2>/dev/null && echo HOOK-WRITTEN
echo cfg > .git/config 2>/dev/null && echo CONFIG-WRITTEN
cat /etc/hosts >/dev/null && echo read-ok`
	res, prep := sandboxedDarwin(t, Policy{Mode: ModeWorkspaceWrite, Workspace: ws}, ws, "sh", "-c", script, "sh", outside)
	if err := prep.Failure(); err != nil {
		t.Fatal(err)
	}
	got := textOf(res.Stdout)
	if !strings.Contains(got, "tmp-ok") || !strings.Contains(got, "read-ok") {
		t.Fatalf("ordinary work failed: %q (stderr %q)", got, textOf(res.Stderr))
	}
	if b, err := os.ReadFile(filepath.Join(ws, "in")); err != nil || string(b) != "in\n" {
		t.Fatalf("workspace write: %q %v", b, err)
	}
	for _, bad := range []string{"OUT-WRITTEN", "HOOK-WRITTEN", "CONFIG-WRITTEN"} {
		if strings.Contains(got, bad) {
			t.Errorf("%s: %q", bad, got)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "out")); err == nil {
		t.Error("a file was created outside the workspace")
	}
}

func TestDarwinReadOnly(t *testing.T) {
	requireSeatbelt(t)
	ws := realTempDir(t)
	res, _ := sandboxedDarwin(t, Policy{Mode: ModeReadOnly}, ws, "sh", "-c", `echo x > f 2>/dev/null && echo WRITTEN; echo t > "$TMPDIR/t" && echo tmp-ok`)
	got := textOf(res.Stdout)
	if strings.Contains(got, "WRITTEN") || !strings.Contains(got, "tmp-ok") {
		t.Fatalf("read-only: %q (stderr %q)", got, textOf(res.Stderr))
	}
}

func TestDarwinDenyRead(t *testing.T) {
	requireSeatbelt(t)
	ws, secret := realTempDir(t), realTempDir(t)
	if err := os.WriteFile(filepath.Join(secret, "key"), []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := filepath.Join(ws, "later")
	res, _ := sandboxedDarwin(t, Policy{Mode: ModeWorkspaceWrite, Workspace: ws, DenyRead: []string{secret, later}}, ws, "sh", "-c",
		`cat "$1/key"; ls "$1"; echo made > "$2" 2>/dev/null && echo LATER-WRITTEN; echo done`, "sh", secret, later)
	got := textOf(res.Stdout)
	if strings.Contains(got, "SECRET") || strings.Contains(got, "key") || strings.Contains(got, "LATER-WRITTEN") || !strings.Contains(got, "done") {
		t.Fatalf("deny-read: %q (stderr %q)", got, textOf(res.Stderr))
	}
}

func TestDarwinNetNone(t *testing.T) {
	requireSeatbelt(t)
	exe, _ := os.Executable()
	res, _ := sandboxedDarwin(t, Policy{Net: NetNone}, realTempDir(t), exe, netProbeCommand)
	got := textOf(res.Stdout)
	if !strings.Contains(got, "loopback: pong") || !strings.Contains(got, "external: denied=true") {
		t.Fatalf("--net none: %q (stderr %q)", got, textOf(res.Stderr))
	}
}

func TestDarwinFileSizeLimit(t *testing.T) {
	ws := realTempDir(t)
	res, prep := sandboxedDarwin(t, Policy{FileSize: 4096}, ws, "sh", "-c", `head -c 100000 /dev/zero > big`)
	if code := prep.Classify(res.ExitCode, res.Signal); code != result.CodeFileSizeLimit {
		t.Fatalf("classified %q (exit %d, signal %q)", code, res.ExitCode, res.Signal)
	}
}

func TestDarwinCommandNotFound(t *testing.T) {
	requireSeatbelt(t)
	_, prep := sandboxedDarwin(t, Policy{Mode: ModeReadOnly}, realTempDir(t), "no-such-command-agentplane")
	var re *result.Error
	if err := prep.Failure(); !errors.As(err, &re) || re.Code != result.CodeCommandNotFound {
		t.Fatalf("failure %v, want %s", err, result.CodeCommandNotFound)
	}
}

func TestDarwinRefusals(t *testing.T) {
	exe, _ := os.Executable()
	for _, p := range []Policy{{Memory: 1 << 30}, {Pids: 64}, {User: "nobody"}} {
		_, err := PrepareWith(p, exe, Capabilities{SandboxExec: SeatbeltExec})
		var re *result.Error
		if !errors.As(err, &re) || re.Code != result.CodeSandboxUnavailable {
			t.Errorf("%+v: got %v, want %s", p, err, result.CodeSandboxUnavailable)
		}
	}
	if _, err := PrepareWith(Policy{Mode: ModeReadOnly}, exe, Capabilities{}); err == nil {
		t.Error("read-only without sandbox-exec was not refused")
	}
}

func TestDarwinCheck(t *testing.T) {
	c := Check()
	if c["platform"] != "darwin" {
		t.Fatalf("check: %v", c)
	}
	e := c["enforceable"].(map[string]any)
	if e["memory"] != false || e["pids"] != false || e["user"] != false {
		t.Fatalf("check claims what macOS cannot enforce: %v", e)
	}
}
