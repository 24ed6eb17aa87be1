package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestStaticBuild builds the programs as scripts/install does (no cgo)
// and checks that what it installs is static and does what a cgo build
// does where the two differ: the user lookups, which without cgo read the
// files and then ask NSS through getent (internal/account).
func TestStaticBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the programs")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the release build's linkage is checked on Linux")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool")
	}
	bin := t.TempDir()
	build := exec.Command(goTool, "build", "-trimpath", "-o", bin+"/", "../agentsh", "../agentplane-sandbox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	install, err := os.ReadFile("../../scripts/install")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(install), "CGO_ENABLED=0 go build") {
		t.Error("scripts/install no longer builds without cgo: this test checks a build nobody ships")
	}
	for _, p := range []string{"agentsh", "agentplane-sandbox"} {
		f, err := elf.Open(filepath.Join(bin, p))
		if err != nil {
			t.Fatal(err)
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				t.Errorf("%s has a program interpreter: it is not static", p)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s needs %v", p, libs)
		}
		f.Close()
	}
	dir := t.TempDir()
	agentsh := func(args ...string) string {
		t.Helper()
		c := exec.Command(filepath.Join(bin, "agentsh"), args...)
		c.Dir = dir
		c.Env = append(os.Environ(), "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
		out, _ := c.Output()
		return string(out)
	}
	if out := agentsh("--", "echo", "hello"); gjson.Get(out, "stdout").String() != "hello\n" {
		t.Fatalf("static agentsh: %s", out)
	}
	if out := agentsh("--user", "no-such-user-agentplane", "--", "true"); gjson.Get(out, "error.code").String() != "invalid_request" {
		t.Errorf("unknown user: %s", out)
	}
	// Not a canonical uid: a cgo LookupId would cut 2^32 to 0, root.
	for _, u := range []string{"4294967296", "+0", "007"} {
		if out := agentsh("--user", u, "--", "true"); gjson.Get(out, "error.code").String() != "invalid_request" {
			t.Errorf("--user %s: %s", u, out)
		}
	}
	if os.Geteuid() != 0 {
		return
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	out := agentsh("--sandbox", "read-only", "--user", "nobody", "--", "id", "-u")
	if gjson.Get(out, "stdout").String() != nobody.Uid+"\n" || gjson.Get(out, "sandbox.user.name").String() != "nobody" {
		t.Errorf("--user nobody in the static build: %s", out)
	}
}
