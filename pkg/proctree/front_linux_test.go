package proctree

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// frontCmd is the watchdog front run as the guard runs it, with argv
// after its own name and stdin from in.
func frontCmd(t *testing.T, in string, argv ...string) *exec.Cmd {
	t.Helper()
	front, err := watchFront()
	if err != nil {
		if len(frontELF) == 0 {
			t.Skipf("no watchdog front for %s", runtime.GOARCH)
		}
		t.Fatal(err)
	}
	cmd := exec.Command(front, argv...)
	cmd.Args = append([]string{"agentplane-watchdog"}, argv...)
	cmd.Stdin = strings.NewReader(in)
	return cmd
}

// TestWatchFront: "done" ends the front without running the rest of its
// argv; end of file without it runs the rest with the front's
// environment, as does any other first line; with nothing to run it
// fails.
func TestWatchFront(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "ran")
	touch := []string{"/bin/sh", "-c", `printf '%s' "$FRONT_VAR" > "$1"`, "sh", mark}
	for _, c := range []struct {
		name, in string
		ran      bool
	}{
		{"done", "done\n", false},
		{"eof", "", true},
		{"not done", "1 2\n", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			os.Remove(mark)
			cmd := frontCmd(t, c.in, touch...)
			cmd.Env = append(os.Environ(), "FRONT_VAR=passed")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("front: %v %s", err, out)
			}
			got, err := os.ReadFile(mark)
			if c.ran != (err == nil) {
				t.Fatalf("ran the watchdog: %v, want %v", err == nil, c.ran)
			}
			if c.ran && string(got) != "passed" {
				t.Errorf("the watchdog got FRONT_VAR=%q, want the front's environment", got)
			}
		})
	}
	err := frontCmd(t, "").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 127 {
		t.Errorf("front with nothing to exec: %v, want exit status 127", err)
	}
}

// TestWatchFrontSealed: nothing can change the front once it is made,
// not even through its own descriptor.
func TestWatchFrontSealed(t *testing.T) {
	front, err := watchFront()
	if err != nil {
		t.Skip(err)
	}
	if f, err := os.OpenFile(front, os.O_WRONLY, 0); err == nil {
		_, werr := f.Write([]byte("\x7fELF"))
		f.Close()
		if werr == nil {
			t.Fatal("wrote to the sealed front")
		}
	}
	if err := os.Truncate(front, 0); err == nil {
		t.Fatal("truncated the sealed front")
	}
}

// TestWatchFrontMatchesSource: the committed front is what front/gen.sh
// builds from the assembly, where GNU binutils for both architectures
// are installed (CI installs them and sets AGENTPLANE_REQUIRE_FRONT_TOOLS,
// which makes a missing tool a failure).
func TestWatchFrontMatchesSource(t *testing.T) {
	for _, tool := range []string{"as", "ld", "aarch64-linux-gnu-as", "aarch64-linux-gnu-ld", "gofmt", "od"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("AGENTPLANE_REQUIRE_FRONT_TOOLS") != "" {
				t.Fatalf("%s is not installed", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
	}
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "front"), os.DirFS("front")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", filepath.Join(dir, "front", "gen.sh")).CombinedOutput(); err != nil {
		t.Fatalf("gen.sh: %v %s", err, out)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		name := "front_linux_" + arch + ".go"
		want, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what front/gen.sh builds: run it", name)
		}
	}
}
