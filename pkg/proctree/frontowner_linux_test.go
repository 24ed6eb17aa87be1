package proctree

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// frontOwnerArg makes this test binary the guarded process of
// TestWatchFrontOwnerHeld: __front_owner SAY -- FRONT ARGV...
const frontOwnerArg = "__front_owner"

// runFrontOwner starts the front (args after "--": the program, then the
// argv it gets) on its stream with its pidfd as OwnerFD, gives a holder (sleep) a copy of its own
// end, as root could take with pidfd_getfd, writes SAY ("done", "rmdir"
// or nothing) to the stream, prints the front's pid and waits to be
// killed.
func runFrontOwner(args []string) {
	if len(args) < 3 || args[1] != "--" {
		os.Exit(2)
	}
	say, prog, argv := args[0], args[2], args[3:]
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		os.Exit(3)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "mine"), os.NewFile(uintptr(fds[1]), "theirs")
	front := exec.Command(prog)
	front.Args = argv
	front.Stdin = theirs
	if self := ownPidfd(); self != nil {
		front.ExtraFiles = []*os.File{self} // OwnerFD, as StartGuard passes it
	}
	if err := front.Start(); err != nil {
		os.Exit(3)
	}
	theirs.Close()
	holder := exec.Command("sleep", "7522")
	holder.ExtraFiles = []*os.File{mine}
	if tok := os.Getenv("FRONT_OWNER_TOKEN"); tok != "" {
		holder.Env = append(os.Environ(), EnvToken+"="+tok) // the guarded tree
	}
	if err := holder.Start(); err != nil {
		os.Exit(3)
	}
	if say != "" {
		if _, err := mine.WriteString(say + "\n"); err != nil {
			os.Exit(3)
		}
	}
	os.Stdout.WriteString(strconv.Itoa(front.Process.Pid) + " " + strconv.Itoa(holder.Process.Pid) + "\n")
	for {
		time.Sleep(time.Hour) // until killed (a bare select{} is a deadlock to the runtime)
	}
}

// TestWatchFrontOwnerHeld: the front learns of its owner's death from the
// owner's pidfd, though another process holds a copy of the owner's end
// of the stream (end of file never comes): not released, it runs the
// rest of its argv; released with "rmdir", it removes the cgroup;
// released with "done", it runs nothing. Each architecture's committed
// front is run where it runs: natively, or under qemu's user mode
// (qemu-ARCH-static), which CI installs.
func TestWatchFrontOwnerHeld(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			prog := filepath.Join(t.TempDir(), "front")
			if err := os.WriteFile(prog, committedFront(t, arch), 0o755); err != nil {
				t.Fatal(err)
			}
			pre := []string{prog, "agentplane-watchdog"}
			if arch != runtime.GOARCH {
				emu := map[string]string{"amd64": "qemu-x86_64-static", "arm64": "qemu-aarch64-static"}[arch]
				path, err := exec.LookPath(emu)
				if err != nil {
					if os.Getenv("AGENTPLANE_REQUIRE_FRONT_TOOLS") != "" {
						t.Fatalf("%s is not installed", emu)
					}
					t.Skipf("%s is not installed", emu)
				}
				pre = []string{path, "qemu", "-0", "agentplane-watchdog", prog}
			}
			for _, c := range []struct {
				say           string
				ran, rmdirred bool
			}{
				{"", true, false},
				{"rmdir", false, true},
				{"done", false, false},
			} {
				t.Run("say "+c.say, func(t *testing.T) {
					dir := t.TempDir()
					mark, cg := filepath.Join(dir, "ran"), filepath.Join(dir, "cgroup")
					if err := os.Mkdir(cg, 0o755); err != nil {
						t.Fatal(err)
					}
					argv := append(append([]string(nil), pre...), "/bin/sh", "-c", ": > "+mark, "sh", cg, "token")
					ranFront(t, c.say, argv)
					if _, err := os.Stat(mark); (err == nil) != c.ran {
						t.Errorf("ran the rest of its argv: %v, want %v", err == nil, c.ran)
					}
					if _, err := os.Stat(cg); os.IsNotExist(err) != c.rmdirred {
						t.Errorf("removed the cgroup: %v, want %v", os.IsNotExist(err), c.rmdirred)
					}
				})
			}
		})
	}
}

// TestWatchdogOwnerHeld: the watchdog of environ mode (RunWatchdog) learns
// of its owner's death from the owner's pidfd, though the guarded tree (a
// bearer of the token) holds a copy of the owner's end of the stream, and
// kills the tree.
func TestWatchdogOwnerHeld(t *testing.T) {
	t.Setenv("FRONT_OWNER_TOKEN", "watchdogheldtest")
	holder := ranFront(t, "", []string{os.Args[0], "watchdog", WatchdogCommand, GuardEnviron, "watchdogheldtest", ""})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := Wait(ctx, holder); err != nil {
		t.Fatal("the guarded tree outlived its owner")
	}
}

// ranFront runs a front owner that says say and SIGKILLs it, and returns
// once the front has exited, with the holder's identity.
func ranFront(t *testing.T, say string, argv []string) ID {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	owner := exec.Command(os.Args[0], append([]string{frontOwnerArg, say, "--"}, argv...)...)
	owner.Stdout = f
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	var front, holder int
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(out)
		if line, ok := strings.CutSuffix(string(b), "\n"); ok {
			p := strings.Fields(line)
			front, _ = strconv.Atoi(p[0])
			holder, _ = strconv.Atoi(p[1])
			break
		}
		if time.Now().After(deadline) {
			_ = owner.Process.Kill()
			t.Fatalf("the owner never started the front: %q", b)
		}
		time.Sleep(5 * time.Millisecond) // polling a file another process writes
	}
	t.Cleanup(func() { _ = syscall.Kill(holder, syscall.SIGKILL) })
	hid, err := Identify(holder)
	if err != nil {
		t.Fatal(err)
	}
	id, err := Identify(front)
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = owner.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := Wait(ctx, id); err != nil {
		_ = syscall.Kill(front, syscall.SIGKILL)
		t.Fatal("the front never learnt of its owner's death")
	}
	return hid
}
