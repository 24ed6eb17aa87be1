package sandbox

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/result"
)

// TestFloorCheck: for every setting a floor holds, a looser call is
// refused with sandbox_locked and an equal or stricter one passes; a
// setting the operator did not configure is free.
func TestFloorCheck(t *testing.T) {
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(ws, "to-etc")); err != nil {
		t.Fatal(err)
	}
	floor := Settings{Mode: ModeWorkspaceWrite, Workspace: ws, Net: NetNone, AllowWrite: []string{"/w"}, AllowHost: []string{"example.com"},
		DenyRead: []string{"/secret"}, Memory: 512 << 20, CPUTime: 10 * time.Second, Pids: 64, FileSize: 1 << 20, Nofile: 100,
		User: "nobody"}
	cases := []struct {
		held   string
		call   Settings
		locked bool
	}{
		{FloorSandbox, Settings{Mode: ModeNone}, true},
		{FloorSandbox, Settings{Mode: ""}, true},
		{FloorSandbox, Settings{Mode: ModeWorkspaceWrite}, false},
		{FloorSandbox, Settings{Mode: ModeReadOnly}, false},
		{FloorWorkspace, Settings{Workspace: "/"}, true},
		{FloorWorkspace, Settings{Workspace: filepath.Dir(ws)}, true},
		{FloorWorkspace, Settings{Workspace: ws + "-beside"}, true},
		{FloorWorkspace, Settings{Workspace: filepath.Join(ws, "to-etc")}, true}, // a link out
		{FloorWorkspace, Settings{Workspace: filepath.Join(ws, "to-etc", "new")}, true},
		{FloorWorkspace, Settings{Workspace: ws}, false},
		{FloorWorkspace, Settings{Workspace: filepath.Join(ws, "sub")}, false},
		{FloorWorkspace, Settings{Workspace: filepath.Join(ws, "not-yet")}, false},
		{FloorWorkspace, Settings{}, false}, // the floor's is given
		{FloorNet, Settings{Net: NetHost}, true},
		{FloorNet, Settings{Net: NetProxy, AllowHost: []string{"x"}}, true},
		{FloorNet, Settings{Net: NetNone}, false},
		{FloorMemory, Settings{Memory: 1 << 30}, true},
		{FloorMemory, Settings{}, true}, // no limit is the loosest
		{FloorMemory, Settings{Memory: 512 << 20}, false},
		{FloorMemory, Settings{Memory: 1}, false},
		{FloorCPUTime, Settings{CPUTime: 11 * time.Second}, true},
		{FloorCPUTime, Settings{CPUTime: 5 * time.Second}, false},
		{FloorPids, Settings{Pids: 65}, true},
		{FloorPids, Settings{Pids: 64}, false},
		{FloorFileSize, Settings{FileSize: 2 << 20}, true},
		{FloorFileSize, Settings{FileSize: 1024}, false},
		{FloorNofile, Settings{}, true},
		{FloorNofile, Settings{Nofile: 10}, false},
		{FloorAllowWrite, Settings{AllowWrite: []string{"/w", "/elsewhere"}}, true},
		{FloorAllowWrite, Settings{AllowWrite: []string{"/w"}}, false},
		{FloorAllowWrite, Settings{}, false},
		{FloorAllowWrite, Settings{AllowWrite: []string{"/w/below"}}, false},
		{FloorAllowWrite, Settings{AllowWrite: []string{filepath.Join(ws, "sub")}}, false}, // in the workspace
		{FloorAllowWrite, Settings{AllowWrite: []string{filepath.Join(ws, "to-etc")}}, true},
		{FloorAllowHost, Settings{AllowHost: []string{"evil.example"}}, true},
		{FloorAllowHost, Settings{AllowHost: []string{"example.com"}}, false},
		{FloorDenyRead, Settings{DenyRead: []string{"/other"}}, true},
		{FloorDenyRead, Settings{DenyRead: []string{"/other", "/secret"}}, false},
		{FloorDenyRead, Settings{DenyRead: []string{"/./secret/"}}, false}, // the same path
		{FloorUser, Settings{User: "root"}, true},
		{FloorUser, Settings{}, true}, // the caller's own: root, for a root agentsh
		{FloorUser, Settings{User: "nobody"}, false},
		{FloorUserCaches, Settings{UserCaches: true}, true},
		{FloorUserCaches, Settings{}, false},
	}
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.held] = true
		err := Floor{Settings: floor, Held: []string{c.held}}.Check(c.call)
		if got := result.AsError(err); c.locked != (err != nil && got.Code == result.CodeSandboxLocked) || (!c.locked && err != nil) {
			t.Errorf("floor %s, call %+v: %v, want locked=%v", c.held, c.call, err, c.locked)
		}
		// Not held, nothing is refused.
		if err := (Floor{Settings: floor}).Check(c.call); err != nil {
			t.Errorf("no held setting, call %+v: %v", c.call, err)
		}
	}
	for _, name := range FloorSettings() {
		if !covered[name] {
			t.Errorf("no case for the floor setting %s", name)
		}
	}
	// A zero limit in the floor holds nothing.
	if err := (Floor{Held: []string{FloorMemory, FloorPids}}).Check(Settings{}); err != nil {
		t.Errorf("zero limits held: %v", err)
	}
	// A held name without a rule is never free.
	if err := (Floor{Held: []string{"no-such-setting"}}).Check(Settings{}); result.AsError(err).Code != result.CodeInternal {
		t.Errorf("a held setting without a rule: %v, want internal_error", err)
	}
}

// TestFloorImplied: a held filesystem sandbox holds the writable paths
// and the workspace even when the operator configured none, and a held
// proxy its allowlist: nothing the operator left empty can be added.
func TestFloorImplied(t *testing.T) {
	ws := t.TempDir()
	for _, c := range []struct {
		name  string
		floor Settings
		held  []string
		call  Settings
	}{
		{"allow-write under workspace-write", Settings{Mode: ModeWorkspaceWrite, Workspace: ws}, []string{FloorSandbox},
			Settings{Mode: ModeWorkspaceWrite, AllowWrite: []string{"/etc"}}},
		{"allow-write under read-only", Settings{Mode: ModeReadOnly}, []string{FloorSandbox},
			Settings{Mode: ModeReadOnly, AllowWrite: []string{"/etc"}}},
		{"workspace", Settings{Mode: ModeWorkspaceWrite, Workspace: ws}, []string{FloorSandbox},
			Settings{Mode: ModeWorkspaceWrite, Workspace: "/"}},
		{"user caches", Settings{Mode: ModeReadOnly}, []string{FloorSandbox},
			Settings{Mode: ModeReadOnly, UserCaches: true}},
		{"allowlist", Settings{Net: NetProxy}, []string{FloorNet},
			Settings{Net: NetProxy, AllowHost: []string{"evil.example"}}},
	} {
		err := Floor{Settings: c.floor, Held: c.held}.Check(c.call)
		if result.AsError(err).Code != result.CodeSandboxLocked {
			t.Errorf("%s: %v, want sandbox_locked", c.name, err)
		}
	}
	// Without a held sandbox the same paths are the call's own tightening.
	if err := (Floor{Settings: Settings{Memory: 1 << 20}, Held: []string{FloorMemory}}).Check(
		Settings{Mode: ModeWorkspaceWrite, AllowWrite: []string{"/etc"}, Memory: 1 << 20}); err != nil {
		t.Errorf("no held sandbox: %v", err)
	}
}

// TestResolveRoots: a writable root reached through a link inside another
// root is refused, wherever on its path the link is; a link outside every
// root (the system's, as /tmp on macOS) is followed as EvalSymlinks would.
func TestResolveRoots(t *testing.T) {
	dir := t.TempDir()
	ws, other := filepath.Join(dir, "ws"), filepath.Join(dir, "other")
	for _, d := range []string{filepath.Join(ws, "sub"), filepath.Join(ws, "real", "build"), filepath.Join(other, "build")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(other, filepath.Join(ws, "sub", "build")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(ws, "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ws, filepath.Join(dir, "wslink")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		roots []string
		want  bool
	}{
		{[]string{ws, filepath.Join(ws, "sub", "build")}, true},
		{[]string{ws, filepath.Join(ws, "up", "build")}, true},
		{[]string{filepath.Join(dir, "wslink"), filepath.Join(dir, "wslink", "up", "build")}, true},
		{[]string{ws, filepath.Join(ws, "real", "build")}, false},
		{[]string{filepath.Join(dir, "wslink"), filepath.Join(ws, "real", "build")}, false},
		{[]string{filepath.Join(ws, "sub", "build")}, false},
	} {
		got, err := ResolveRoots(c.roots)
		if c.want {
			if e, ok := err.(*result.Error); !ok || e.Code != result.CodeSandboxLocked {
				t.Errorf("ResolveRoots(%v) = %v, %v; want sandbox_locked", c.roots, got, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ResolveRoots(%v): %v", c.roots, err)
			continue
		}
		for i, r := range c.roots {
			if want, _ := filepath.EvalSymlinks(r); got[i] != want {
				t.Errorf("ResolveRoots(%v)[%d] = %s, want %s", c.roots, i, got[i], want)
			}
		}
	}
}
