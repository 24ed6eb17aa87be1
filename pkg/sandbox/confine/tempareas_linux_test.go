package confine

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const coverProbeCommand = "__cover-probe"

// coverProbe, in a mount namespace of its own, covers the areas it is
// given and says whether each is covered (a read-only mount of its own,
// not its parent's: of a symlink, what it points at) or left out.
// With "-noproc" first, it covers without /proc (the mount API's way).
func coverProbe(areas []string) int {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		println("private:", err.Error())
		return 1
	}
	if areas[0] == "-noproc" {
		areas = areas[1:]
		if err := unix.Unmount("/proc", unix.MNT_DETACH); err != nil {
			println("umount /proc:", err.Error())
			return 1
		}
	}
	if err := coverTempAreas(areas, nil); err != nil {
		println("cover:", err.Error())
		return 2
	}
	for _, a := range areas {
		var st, parent unix.Stat_t
		if unix.Stat(a, &st) == nil && unix.Stat(filepath.Dir(a), &parent) == nil && st.Dev != parent.Dev {
			if err := unix.Mkdir(filepath.Join(a, "x"), 0o700); err != unix.EROFS {
				println(a, "covered but not read-only")
				continue
			}
			println(a, "covered")
		} else {
			println(a, "left")
		}
	}
	return 0
}

// TestCoverSkipsVanishedArea: an area removed between the runner's listing
// and the helper's cover (another temp dir's, removed with it) holds
// nothing to hide: the run goes on, with the areas that are there covered.
// Before, the run failed with sandbox_failed ("cannot cover the temp
// area ...: no such file or directory"), which tests running in parallel
// with their own TMPDIRs hit.
func TestCoverSkipsVanishedArea(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a mount namespace")
	}
	dir := t.TempDir()
	here := filepath.Join(dir, "agentplane-sandbox.0")
	if err := os.Mkdir(here, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(here, "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(dir, "gone", "agentplane-sandbox.0")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, coverProbeCommand, gone, here)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cover: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), here+" covered") || !strings.Contains(string(out), gone+" left") {
		t.Fatalf("want %s covered and %s left out:\n%s", here, gone, out)
	}
}

// An area that is a symlink when the helper covers it (its owner swapped
// its directory for one after the runner listed it) is not followed: the
// cover would land on whatever the link names, in the run's namespace (the
// run's workspace, its TMPDIR, "/"). It is left out, like a vanished one.
func TestCoverNoSymlink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a mount namespace")
	}
	dir := t.TempDir()
	target := filepath.Join(dir, "workspace")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "agentplane-sandbox.65534")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	here := filepath.Join(dir, "agentplane-sandbox.0")
	if err := os.Mkdir(here, 0o700); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{link, here}, {"-noproc", link, here}} {
		cmd := exec.Command(exe, append([]string{coverProbeCommand}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("cover %v: %v\n%s", args, err, out)
		}
		if !strings.Contains(string(out), here+" covered") || !strings.Contains(string(out), link+" left") {
			t.Fatalf("%v: want %s covered and %s (a symlink) left out:\n%s", args, here, link, out)
		}
	}
}
