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
// given and says whether each is covered (an empty tmpfs) or left out.
func coverProbe(areas []string) int {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		println("private:", err.Error())
		return 1
	}
	if err := coverTempAreas(areas, nil); err != nil {
		println("cover:", err.Error())
		return 2
	}
	for _, a := range areas {
		var st unix.Statfs_t
		if unix.Statfs(a, &st) == nil && st.Type == unix.TMPFS_MAGIC {
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
