package confine

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const landlockProbeCommand = "__landlock-probe"

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == landlockProbeCommand {
		os.Exit(landlockProbe(os.Args[2:]))
	}
	if len(os.Args) > 2 && os.Args[1] == coverProbeCommand {
		os.Exit(coverProbe(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// landlockProbe restricts itself with restrictFS(abi, [writable],
// [writeFiles]) and reports, one line each, what it could still do in
// writable, writeFiles and outside.
func landlockProbe(args []string) int {
	abi, _ := strconv.Atoi(args[0])
	w, wf, out := args[1], args[2], args[3]
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Println("nnp", err)
		return 1
	}
	wid, err := Identify(w)
	if err != nil {
		fmt.Println("identify", err)
		return 1
	}
	wfid, err := Identify(wf)
	if err != nil {
		fmt.Println("identify", err)
		return 1
	}
	if err := restrictFS(abi, []string{w}, []FileID{wid}, []string{wf}, []FileID{wfid}); err != nil {
		fmt.Println("restrict", err)
		return 1
	}
	try := func(name string, f func() error) {
		err := f()
		res := "ok"
		if err != nil {
			res = "denied"
			if !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EPERM) {
				res = err.Error()
			}
		}
		fmt.Printf("%s %s\n", name, res)
	}
	create := func(p string) func() error {
		return func() error {
			fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}
	}
	openW := func(p string) func() error {
		return func() error {
			fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}
	}
	read := func(p string) func() error {
		return func() error { _, err := os.ReadFile(p); return err }
	}
	try("create-writable", create(filepath.Join(w, "new")))
	try("mkdir-writable", func() error { return unix.Mkdir(filepath.Join(w, "sub"), 0o700) })
	try("refer-writable", func() error { return unix.Rename(filepath.Join(w, "new"), filepath.Join(w, "sub", "moved")) })
	try("create-outside", create(filepath.Join(out, "new")))
	try("write-outside", openW(filepath.Join(out, "existing")))
	try("truncate-outside", func() error { return unix.Truncate(filepath.Join(out, "existing"), 0) })
	try("unlink-outside", func() error { return unix.Unlink(filepath.Join(out, "existing")) })
	try("read-outside", read(filepath.Join(out, "existing")))
	try("write-writefiles", openW(filepath.Join(wf, "existing")))
	try("create-writefiles", create(filepath.Join(wf, "new")))
	try("unlink-writefiles", func() error { return unix.Unlink(filepath.Join(wf, "existing")) })
	try("write-dev-null", openW("/dev/null"))
	return 0
}

// restrictFS enforces, on the thread that calls it, exactly the rights of
// the policy: the mounts that also make the root read-only in a real run
// are absent here, so this is Landlock alone.
func TestRestrictFS(t *testing.T) {
	kernel := LandlockABI()
	if kernel < 3 {
		t.Skipf("kernel Landlock ABI %d", kernel)
	}
	want := map[string]string{
		"create-writable": "ok", "mkdir-writable": "ok", "refer-writable": "ok",
		"create-outside": "denied", "write-outside": "denied", "truncate-outside": "denied",
		"unlink-outside": "denied", "read-outside": "ok",
		"write-writefiles": "ok", "create-writefiles": "denied", "unlink-writefiles": "denied",
		"write-dev-null": "ok",
	}
	for abi := 3; abi <= min(kernel, 7); abi++ {
		t.Run("abi"+strconv.Itoa(abi), func(t *testing.T) {
			w, wf, out := t.TempDir(), t.TempDir(), t.TempDir()
			for _, d := range []string{wf, out} {
				if err := os.WriteFile(filepath.Join(d, "existing"), []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			got, err := exec.Command(self, landlockProbeCommand, strconv.Itoa(abi), w, wf, out).CombinedOutput()
			if err != nil {
				t.Fatalf("probe: %v: %s", err, got)
			}
			seen := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(string(got)), "\n") {
				k, v, _ := strings.Cut(line, " ")
				seen[k] = v
			}
			for k, v := range want {
				if seen[k] != v {
					t.Errorf("%s: %q, want %q", k, seen[k], v)
				}
			}
			if _, err := os.Stat(filepath.Join(out, "new")); err == nil {
				t.Error("a file was created outside the writable roots")
			}
		})
	}
}

// The handled rights follow the ABIs: truncate from 3, device ioctls
// from 5, the signal and abstract socket scopes from 6, no network rights
// (the namespace's job), and nothing newer than the policy is written for.
func TestHandledFor(t *testing.T) {
	for _, tc := range []struct {
		abi        int
		fs, scoped uint64
	}{
		{3, 1<<15 - 1, 0}, {4, 1<<15 - 1, 0}, {5, 1<<16 - 1, 0},
		{6, 1<<16 - 1, unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL},
		{7, 1<<16 - 1, unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL},
	} {
		a, err := handledFor(tc.abi)
		if err != nil || a.handledFS != tc.fs || a.scoped != tc.scoped || a.handledNet != 0 {
			t.Errorf("ABI %d: %+v %v", tc.abi, a, err)
		}
	}
	for _, abi := range []int{0, 2, 8, 9} {
		if _, err := handledFor(abi); err == nil {
			t.Errorf("ABI %d accepted", abi)
		}
	}
}
