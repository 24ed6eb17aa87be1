package files

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

// TestPermissionDenied needs an unprivileged process: as a normal user it
// runs in-process; as root it re-runs this test binary as nobody.
func TestPermissionDenied(t *testing.T) {
	dir := t.TempDir()
	// The tree must be reachable by nobody, the secret file not.
	for _, d := range []string{filepath.Dir(dir), dir} {
		os.Chmod(d, 0o755)
	}
	put(t, filepath.Join(dir, "secret"), "x\n")
	os.Chmod(filepath.Join(dir, "secret"), 0o600)
	os.Mkdir(filepath.Join(dir, "ro"), 0o555)
	put(t, filepath.Join(dir, "ro-file"), "x\n")
	os.Chmod(filepath.Join(dir, "ro-file"), 0o644)

	if os.Geteuid() != 0 {
		checkPermissionDenied(t, dir)
		return
	}
	// Copy the test binary where nobody can run it.
	bin := filepath.Join(dir, "files.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(dst, src)
	src.Close()
	dst.Close()
	cmd := exec.Command(bin, "-test.run=^TestPermissionHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "AGENTFS_PERM_DIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper as nobody: %v\n%s", err, out.String())
	}
	if !bytes.Contains(out.Bytes(), []byte("--- PASS: TestPermissionHelper")) {
		t.Fatalf("helper did not run:\n%s", out.String())
	}
}

func TestPermissionHelper(t *testing.T) {
	dir := os.Getenv("AGENTFS_PERM_DIR")
	if dir == "" {
		t.Skip("helper for TestPermissionDenied")
	}
	checkPermissionDenied(t, dir)
}

func checkPermissionDenied(t *testing.T, dir string) {
	fsys := &FS{Root: dir, Dir: dir}
	if _, err := fsys.Read("secret", ReadOptions{}); code(err) != result.CodePermissionDenied {
		t.Errorf("read: %v", err)
	}
	if _, err := fsys.Write("ro/new", []byte("x"), WriteOptions{}); code(err) != result.CodePermissionDenied {
		t.Errorf("write in a read-only directory: %v", err)
	}
	if _, err := fsys.Edit("ro-file", []EditSpec{{Old: "x", New: "y"}}, EditOptions{}); code(err) != result.CodePermissionDenied {
		t.Errorf("edit in a directory not ours: %v", err)
	}
	if get(t, filepath.Join(dir, "ro-file")) != "x\n" {
		t.Error("file changed")
	}
}
