package sandboxflags

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox"
)

// floorCall parses args as a call's flags with vars as the environment and
// runs the floor check on it.
func floorCall(t *testing.T, vars map[string]string, args ...string) error {
	t.Helper()
	var o Options
	cmd := &cobra.Command{Use: "agentsh"}
	AddFlags(cmd.Flags(), &o)
	AddLockFlag(cmd.Flags())
	if err := cmd.Flags().Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	home := t.TempDir()
	env := &clikit.Env{Program: &clikit.Program{Name: "agentsh"}, LookupEnv: func(k string) (string, bool) {
		if k == "HOME" || k == "XDG_CONFIG_HOME" {
			return home, true
		}
		v, ok := vars[k]
		return v, ok
	}}
	return CheckFloor(env, &o)
}

// TestFloorFlags: the flags marked clikit.Floor are the settings the
// engine's floor has rules for (sandbox.FloorSettings; the rules
// themselves are tested there), and each flag's configured value and call
// value reach the engine: under the lock a looser value given as a flag is
// refused with sandbox_locked and a stricter one passes; without the lock
// the configured value is only a default.
func TestFloorFlags(t *testing.T) {
	cases := map[string]struct {
		configured   string
		loose, tight []string
	}{
		"sandbox":     {"workspace-write", []string{"--sandbox", "none"}, []string{"--sandbox", "read-only"}},
		"workspace":   {"/tmp/floor-ws", []string{"--workspace", "/tmp"}, []string{"--workspace", "/tmp/floor-ws/sub"}},
		"net":         {"none", []string{"--net", "host"}, []string{"--net", "none"}},
		"memory":      {"512M", []string{"--memory", "1G"}, []string{"--memory", "256M"}},
		"cpu-time":    {"10s", []string{}, []string{"--cpu-time", "5s"}},
		"pids":        {"64", []string{"--pids", "65"}, []string{"--pids", "64"}},
		"file-size":   {"1M", []string{"--file-size", "2M"}, []string{"--file-size", "1K"}},
		"nofile":      {"100", []string{"--nofile", "0"}, []string{"--nofile", "10"}},
		"allow-write": {"/tmp/a", []string{"--allow-write", "/tmp/b"}, []string{"--allow-write", "/tmp/a"}},
		"allow-host":  {"example.com", []string{"--allow-host", "evil.example"}, []string{"--allow-host", "example.com"}},
		"deny-read":   {"/secret", []string{"--deny-read", "/other"}, []string{"--deny-read", "/secret", "--deny-read", "/other"}},
		"user":        {"nobody", []string{"--user", "root"}, []string{"--user", "nobody"}},
		"user-caches": {"false", []string{"--user-caches"}, []string{"--user-caches=false"}},
	}
	var probe Options
	cmd := &cobra.Command{}
	AddFlags(cmd.Flags(), &probe)
	marked := clikit.MarkedOn(cmd.Flags(), clikit.Floor)
	var names []string
	for n := range cases {
		names = append(names, n)
	}
	slices.Sort(names)
	if strings.Join(marked, " ") != strings.Join(names, " ") {
		t.Fatalf("flags marked Floor %v, cases for %v", marked, names)
	}
	engine := sandbox.FloorSettings()
	slices.Sort(engine)
	if strings.Join(marked, " ") != strings.Join(engine, " ") {
		t.Fatalf("flags marked Floor %v, floor settings of the engine %v", marked, engine)
	}
	for _, name := range marked {
		c := cases[name]
		v := "AGENTPLANE_" + strings.ToUpper(clikit.ConfigKey(name))
		locked := map[string]string{v: c.configured, "AGENTPLANE_SANDBOX_LOCK": "true"}
		if err := floorCall(t, locked, c.loose...); result.AsError(err).Code != result.CodeSandboxLocked {
			t.Errorf("%s: floor %s, call %v: %v, want sandbox_locked", name, c.configured, c.loose, err)
		}
		if err := floorCall(t, locked, c.tight...); err != nil {
			t.Errorf("%s: floor %s, call %v: %v, want accepted", name, c.configured, c.tight, err)
		}
		if err := floorCall(t, map[string]string{v: c.configured}, c.loose...); err != nil {
			t.Errorf("%s: no lock, call %v: %v, want accepted", name, c.loose, err)
		}
	}
}

// TestFloorPinsWorkspace: under the lock, a workspace-write sandbox with no
// configured workspace writes where agentsh was started, whatever the
// call's --cwd; a call's --allow-write and --workspace outside it are
// refused even though the operator configured neither.
func TestFloorPinsWorkspace(t *testing.T) {
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	locked := map[string]string{"AGENTPLANE_SANDBOX": "workspace-write", "AGENTPLANE_SANDBOX_LOCK": "1"}
	var o Options
	cmd := &cobra.Command{Use: "agentsh"}
	AddFlags(cmd.Flags(), &o)
	AddLockFlag(cmd.Flags())
	env := &clikit.Env{Program: &clikit.Program{Name: "agentsh"}, LookupEnv: func(k string) (string, bool) {
		v, ok := locked[k]
		return v, ok
	}}
	o.Mode = sandbox.ModeWorkspaceWrite // as the configured default would set it
	if err := CheckFloor(env, &o); err != nil {
		t.Fatal(err)
	}
	if o.Workspace != here {
		t.Errorf("workspace %q, want the starting directory %q", o.Workspace, here)
	}
	if p := o.Policy(env, "/tmp"); p.Workspace != here {
		t.Errorf("policy workspace %q for a call in /tmp, want %q", p.Workspace, here)
	}
	for _, args := range [][]string{{"--allow-write", "/etc"}, {"--workspace", "/"}, {"--workspace", filepath.Dir(here)}} {
		args = append([]string{"--sandbox", "workspace-write"}, args...)
		err := floorCall(t, locked, args...)
		if re := result.AsError(err); re.Code != result.CodeSandboxLocked || !strings.Contains(re.Message, "--"+strings.TrimPrefix(args[2], "--")) {
			t.Errorf("call %v: %v, want sandbox_locked", args, err)
		}
	}
	if err := floorCall(t, locked, "--sandbox", "workspace-write", "--allow-write", filepath.Join(here, "sub")); err != nil {
		t.Errorf("a writable path inside the workspace: %v", err)
	}
}

// TestFloorEverySource: the lock holds if any source of configuration sets
// it, and every source's values are a floor of their own: a variable set
// to 0, a variable with a looser default, or --config naming a file
// without the lock does not lift the lock of another source.
func TestFloorEverySource(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("xdg/agentplane/config.toml", "sandbox = \"read-only\"\nsandbox_lock = true\n")
	loose := write("loose.toml", "sandbox = \"none\"\nsandbox_lock = false\n")
	for _, c := range []struct {
		name   string
		vars   map[string]string
		config string
		args   []string
		locked bool
	}{
		{"the file's lock", nil, "", []string{"--sandbox", "none"}, true},
		{"a variable unlocks", map[string]string{"AGENTPLANE_SANDBOX_LOCK": "0", "AGENTSH_SANDBOX_LOCK": "false"}, "", []string{"--sandbox", "none"}, true},
		{"a variable loosens the floor", map[string]string{"AGENTPLANE_SANDBOX": "none"}, "", []string{"--sandbox", "none"}, true},
		{"--config shadows", nil, loose, []string{"--sandbox", "none"}, true},
		{"AGENTPLANE_CONFIG shadows", map[string]string{"AGENTPLANE_CONFIG": loose}, "", []string{"--sandbox", "none"}, true},
		{"a stricter variable", map[string]string{"AGENTPLANE_SANDBOX": "read-only"}, loose, []string{"--sandbox", "read-only"}, false},
		{"a lock in the variables alone, as the flag parses it", map[string]string{"XDG_CONFIG_HOME": dir, "AGENTSH_SANDBOX_LOCK": "TRUE",
			"AGENTSH_SANDBOX": "read-only"}, "", []string{"--sandbox", "none"}, true},
	} {
		var o Options
		cmd := &cobra.Command{Use: "agentsh"}
		AddFlags(cmd.Flags(), &o)
		if err := cmd.Flags().Parse(c.args); err != nil {
			t.Fatal(err)
		}
		vars := map[string]string{"XDG_CONFIG_HOME": filepath.Join(dir, "xdg")}
		for k, v := range c.vars {
			vars[k] = v
		}
		env := &clikit.Env{Program: &clikit.Program{Name: "agentsh"}, ConfigFile: c.config, LookupEnv: func(k string) (string, bool) {
			v, ok := vars[k]
			return v, ok
		}}
		err := CheckFloor(env, &o)
		if got := result.AsError(err); c.locked != (err != nil && got.Code == result.CodeSandboxLocked) || (!c.locked && err != nil) {
			t.Errorf("%s: %v, want locked=%v", c.name, err, c.locked)
		}
	}
}

// TestFilesRootsResolvedOnce: agentfs's writable roots are resolved when
// the rules are made, refusing a planted link, and not again: a locked
// allow-write directory replaced by a link out after that (by a command
// still running in another call's sandbox) leaves the path it now reaches
// outside the roots.
func TestFilesRootsResolvedOnce(t *testing.T) {
	dir, ws, outside, build, _, env := lockedAllowWrite(t, "agentfs")
	rules, err := Files(env, filepath.Join(dir, "state"))
	if err != nil || rules.MayChange == nil {
		t.Fatalf("Files: %+v, %v", rules, err)
	}
	if err := rules.MayChange(filepath.Join(build, "f")); err != nil {
		t.Fatalf("a change in the allow-write directory: %v", err)
	}
	if err := os.Rename(filepath.Join(ws, "sub"), filepath.Join(ws, "sub.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, build); err != nil {
		t.Fatal(err)
	}
	// The files engine hands MayChange the resolved path.
	if err := rules.MayChange(filepath.Join(outside, "f")); err == nil {
		t.Fatal("a change where the swapped-in link points was allowed")
	}
	if _, err := Files(env, filepath.Join(dir, "state")); err == nil {
		t.Fatal("rules made with the planted link in place")
	}
}

// TestSavedRootsPlantedLink: a job's saved sandbox (or a session's) whose
// allow-write directory now goes through a link a command put inside its
// workspace is refused at the next restart or call, also by a supervisor.
func TestSavedRootsPlantedLink(t *testing.T) {
	_, ws, outside, build, vars, env := lockedAllowWrite(t, "agentjob")
	saved := &sandbox.Policy{Mode: sandbox.ModeWorkspaceWrite, Workspace: ws, AllowWrite: []string{build}}
	for name, check := range map[string]func(*clikit.Env, *sandbox.Policy) error{"CheckPolicy": CheckPolicy, "CheckPolicyDetached": CheckPolicyDetached} {
		if err := check(env, saved); err != nil {
			t.Fatalf("%s before the link: %v", name, err)
		}
	}
	if err := os.Rename(filepath.Join(ws, "sub"), filepath.Join(ws, "sub.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, build); err != nil {
		t.Fatal(err)
	}
	// With the roots configured, the floor's own comparison refuses it.
	for name, check := range map[string]func(*clikit.Env, *sandbox.Policy) error{"CheckPolicy": CheckPolicy, "CheckPolicyDetached": CheckPolicyDetached} {
		var e *result.Error
		if err := check(env, saved); !errors.As(err, &e) || e.Code != result.CodeSandboxLocked {
			t.Errorf("%s with the planted link: %v, want sandbox_locked", name, err)
		}
	}
	// With the workspace not configured, a supervisor (which runs where
	// no call is made) has no floor workspace for the link to lie in, and
	// the floor's allow-write resolves through the link as the saved one
	// does: the saved roots' own resolution refuses it.
	delete(vars, "AGENTPLANE_WORKSPACE")
	var e *result.Error
	if err := CheckPolicyDetached(env, saved); !errors.As(err, &e) || e.Code != result.CodeSandboxLocked {
		t.Errorf("CheckPolicyDetached without a configured workspace: %v, want sandbox_locked", err)
	}
}

// lockedAllowWrite makes a workspace ws with an allow-write directory
// build two levels below it and a directory outside, and an environment
// (vars, which the test may change) that locks a workspace-write sandbox
// on them for program.
func lockedAllowWrite(t *testing.T, program string) (dir, ws, outside, build string, vars map[string]string, env *clikit.Env) {
	t.Helper()
	dir = t.TempDir()
	ws, outside = filepath.Join(dir, "ws"), filepath.Join(dir, "outside")
	build = filepath.Join(ws, "sub", "build")
	for _, d := range []string{build, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	vars = map[string]string{"AGENTPLANE_SANDBOX_LOCK": "1", "AGENTPLANE_SANDBOX": "workspace-write",
		"AGENTPLANE_WORKSPACE": ws, "AGENTPLANE_ALLOW_WRITE": build, "HOME": t.TempDir()}
	env = &clikit.Env{Program: &clikit.Program{Name: program}, SystemConfig: filepath.Join(t.TempDir(), "etc", "config.toml"),
		LookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok }}
	return dir, ws, outside, build, vars, env
}

// TestFilesProgramsDir: under the lock agentfs writes nothing in the
// directory of agentplane's programs, also inside the floor's workspace:
// a helper program planted beside them (agentplane-sandbox), or a program
// replaced, would run unconfined at the next sandboxed call.
func TestFilesProgramsDir(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	progs := sandbox.ProgramsDir(exe)
	ws := filepath.Dir(progs)
	vars := map[string]string{"AGENTPLANE_SANDBOX_LOCK": "1", "AGENTPLANE_SANDBOX": "workspace-write",
		"AGENTPLANE_WORKSPACE": ws, "HOME": t.TempDir()}
	env := &clikit.Env{Program: &clikit.Program{Name: "agentfs"}, SystemConfig: filepath.Join(t.TempDir(), "etc", "config.toml"),
		LookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok }}
	rules, err := Files(env, filepath.Join(t.TempDir(), "state"))
	if err != nil || rules.MayChange == nil {
		t.Fatalf("Files: %+v, %v", rules, err)
	}
	for _, p := range []string{filepath.Join(progs, sandbox.HelperProgram), exe} {
		var e *result.Error
		if err := rules.MayChange(p); !errors.As(err, &e) || e.Code != result.CodeSandboxLocked {
			t.Errorf("MayChange(%s) = %v, want sandbox_locked", p, err)
		}
	}
	if err := rules.MayChange(filepath.Join(ws, "beside")); err != nil {
		t.Errorf("a file beside the programs' directory: %v", err)
	}
}

// TestFilesHelperSymlinkTarget: the helper's program beside the programs
// may be a symbolic link into the workspace (a development build): agentfs
// under the lock wrote the file it leads to, which the next sandboxed call
// starts unconfined. Its directory is the programs' too.
func TestFilesHelperSymlinkTarget(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	progs := sandbox.ProgramsDir(exe)
	ws := filepath.Dir(progs)
	build, err := os.MkdirTemp(ws, "build-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(build) })
	target := filepath.Join(build, sandbox.HelperProgram)
	if err := os.WriteFile(target, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(progs, sandbox.HelperProgram)
	if err := os.Symlink(target, link); err != nil {
		t.Skipf("cannot link a helper beside the test's program: %v", err)
	}
	t.Cleanup(func() { os.Remove(link) })
	vars := map[string]string{"AGENTPLANE_SANDBOX_LOCK": "1", "AGENTPLANE_SANDBOX": "workspace-write",
		"AGENTPLANE_WORKSPACE": ws, "HOME": t.TempDir()}
	env := &clikit.Env{Program: &clikit.Program{Name: "agentfs"}, SystemConfig: filepath.Join(t.TempDir(), "etc", "config.toml"),
		LookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok }}
	rules, err := Files(env, filepath.Join(t.TempDir(), "state"))
	if err != nil || rules.MayChange == nil {
		t.Fatalf("Files: %+v, %v", rules, err)
	}
	var e *result.Error
	if err := rules.MayChange(target); !errors.As(err, &e) || e.Code != result.CodeSandboxLocked {
		t.Errorf("MayChange(%s) = %v, want sandbox_locked", target, err)
	}
	if err := rules.MayChange(filepath.Join(ws, "beside")); err != nil {
		t.Errorf("a file beside the programs' directory: %v", err)
	}
}

// TestSystemConfigDirPublic: the system-wide config file's directory is
// protected, and made readable by every user should the sandbox create it
// (sandbox.Policy.Public); the user's own is private.
func TestSystemConfigDirPublic(t *testing.T) {
	home := t.TempDir()
	var o Options
	o.Mode = sandbox.ModeWorkspaceWrite
	env := &clikit.Env{Program: &clikit.Program{Name: "agentsh"}, LookupEnv: func(k string) (string, bool) {
		if k == "HOME" || k == "XDG_CONFIG_HOME" || k == "XDG_STATE_HOME" {
			return home, true
		}
		return "", false
	}}
	p := o.Policy(env, home)
	sys := filepath.Dir(clikit.DefaultSystemConfig)
	if !slices.Contains(p.Protect, sys) || !slices.Equal(p.Public, []string{sys}) {
		t.Errorf("protected %v, public %v: want %s in both, and alone in the public ones", p.Protect, p.Public, sys)
	}
}
