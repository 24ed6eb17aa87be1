package proctree

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
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
	// "rmdir": at end of file the front removes argv[5] (the guard's
	// cgroup) itself, without running the rest; a directory that stays
	// busy makes it give up with exit status 1 after its retries (not
	// waited for here: 5 s).
	os.Remove(mark)
	cg := filepath.Join(t.TempDir(), "cgroup")
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := frontCmd(t, "rmdir\n", "/bin/sh", "-c", `: > `+mark, "sh", cg, "token").CombinedOutput(); err != nil {
		t.Fatalf("front rmdir: %v %s", err, out)
	}
	if _, err := os.Stat(cg); !os.IsNotExist(err) {
		t.Errorf("the front left argv[5]: %v", err)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("the front ran the watchdog on rmdir")
	}
	// Gone already: nothing to do.
	if err := frontCmd(t, "rmdir\n", "/bin/sh", "-c", ":", "sh", cg, "token").Run(); err != nil {
		t.Errorf("front rmdir of a missing directory: %v", err)
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

// TestWatchFrontMatchesSource: the code of the committed fronts is what
// the assembler makes of front/front_ARCH.S (the .text of each, compared
// byte for byte; the ELF around it is the linker's), where GNU as for both
// architectures is installed (CI installs it and sets
// AGENTPLANE_REQUIRE_FRONT_TOOLS, which makes a missing tool a failure).
func TestWatchFrontMatchesSource(t *testing.T) {
	for arch, tool := range map[string]string{"amd64": "as", "arm64": "aarch64-linux-gnu-as"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("AGENTPLANE_REQUIRE_FRONT_TOOLS") != "" {
				t.Fatalf("%s is not installed", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
		obj := filepath.Join(t.TempDir(), arch+".o")
		if out, err := exec.Command(tool, "-o", obj, filepath.Join("front", "front_"+arch+".S")).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v %s", tool, err, out)
		}
		want := textOf(t, obj, nil)
		got := textOf(t, "", committedFront(t, arch))
		if !bytes.Equal(got, want) {
			t.Errorf("the committed %s front's code differs from front/front_%s.S: run front/gen.sh", arch, arch)
		}
	}
}

// committedFront reads the bytes of front_linux_ARCH.go back from its
// source, so that both architectures are checked on either.
func committedFront(t *testing.T, arch string) []byte {
	t.Helper()
	src, err := os.ReadFile("front_linux_" + arch + ".go")
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, f := range strings.FieldsFunc(string(src), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }) {
		if v, ok := strings.CutPrefix(f, "0x"); ok && len(v) == 2 {
			b, err := strconv.ParseUint(v, 16, 8)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out = append(out, byte(b))
		}
	}
	return out
}

// textOf is the .text section of the ELF file path or, if path is "", of
// the ELF image b.
func textOf(t *testing.T, path string, b []byte) []byte {
	t.Helper()
	var f *elf.File
	var err error
	if path != "" {
		f, err = elf.Open(path)
	} else {
		f, err = elf.NewFile(bytes.NewReader(b))
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sec := f.Section(".text")
	if sec == nil {
		t.Fatalf("%s: no .text", path)
	}
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestWatchFrontReplaced: when the front's descriptor number no longer
// names the front (closed twice elsewhere and reused), a new front is
// made; when the front cannot be exec'd, the guard starts the shell.
func TestWatchFrontReplaced(t *testing.T) {
	path, err := watchFront()
	if err != nil {
		t.Skip(err)
	}
	front.mu.Lock()
	fd := front.fd
	front.mu.Unlock()
	// Another file takes the number, as a double close would let it.
	null, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Dup3(null, fd, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	unix.Close(null)
	again, err := watchFront()
	if err != nil {
		t.Fatal(err)
	}
	if again == path {
		t.Fatalf("the front is still %s, now /dev/null", path)
	}
	// A front that cannot be exec'd: its recorded descriptor is /dev/null
	// with the identity kept, and the guard still starts, with the shell.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	front.mu.Lock()
	sfd, sdev, sino, spath := front.fd, front.dev, front.ino, front.path
	front.fd, front.dev, front.ino, front.path = fd, st.Dev, st.Ino, "/proc/self/fd/"+strconv.Itoa(fd)
	front.mu.Unlock()
	defer func() {
		front.mu.Lock()
		front.fd, front.dev, front.ino, front.path = sfd, sdev, sino, spath
		front.mu.Unlock()
	}()
	g, err := StartGuard([]string{"/bin/false"})
	if err != nil {
		t.Fatalf("the guard did not fall back to the shell: %v", err)
	}
	defer g.Release()
	if g.Mode() != GuardCgroup {
		return
	}
	// The program, not the argv: the parent of a vfork resumes before the
	// new program's arguments are in place, so cmdline can still be empty.
	exe, err := os.Readlink("/proc/" + strconv.Itoa(g.wd.Pid) + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	sh, err := filepath.EvalSymlinks(shPath)
	if err != nil {
		t.Fatal(err)
	}
	if exe != sh {
		t.Errorf("watchdog %q, want the shell %s", exe, sh)
	}
}

// TestWatchFrontLimited: started with no descriptor to spare (a limit
// the command may lower on the front with prlimit(2), hard limit
// included, which only CAP_SYS_RESOURCE raises again), the front, at its
// owner's end, still writes "1" to KillFD, the guard's cgroup.kill: the
// shell watchdog, which cannot start then, is not needed for the kill.
// The foreign architecture's front runs under qemu's user mode, which
// opens files of its own: there only the write is checked, unlimited.
func TestWatchFrontLimited(t *testing.T) {
	limit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("no prlimit(1)")
	}
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			dir := t.TempDir()
			prog := filepath.Join(dir, "front")
			if err := os.WriteFile(prog, committedFront(t, arch), 0o755); err != nil {
				t.Fatal(err)
			}
			argv := []string{limit, "--nofile=0:0", "--", prog}
			if arch != runtime.GOARCH {
				emu := map[string]string{"amd64": "qemu-x86_64-static", "arm64": "qemu-aarch64-static"}[arch]
				path, err := exec.LookPath(emu)
				if err != nil {
					t.Skipf("no %s to run the %s front", emu, arch)
				}
				argv = []string{path, prog}
			}
			killed := filepath.Join(dir, "cgroup.kill")
			kf, err := os.Create(killed)
			if err != nil {
				t.Fatal(err)
			}
			defer kf.Close()
			cmd := exec.Command(argv[0], append(argv[1:], "/bin/sh", "-c", ":")...)
			cmd.Stdin = strings.NewReader("") // the owner is gone
			cmd.ExtraFiles = []*os.File{nil, kf}
			_ = cmd.Run() // the shell may not start: the kill is done by then
			if b, _ := os.ReadFile(killed); string(b) != "1" {
				t.Errorf("KillFD got %q, want the cgroup killed (1)", b)
			}
		})
	}
}
