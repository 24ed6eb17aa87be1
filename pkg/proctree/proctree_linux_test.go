package proctree

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseStatCommWithParens(t *testing.T) {
	line := "4242 (we ird) (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 100 18446744073709551615\n"
	s, err := parseStat(4242, []byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if s.PPID != 1 || s.PGID != 4242 || s.SID != 4242 || s.State != 'S' || s.StartTime != 987654 {
		t.Fatalf("parsed %+v", s)
	}
}

func TestParseStatMalformed(t *testing.T) {
	for _, in := range []string{"", "12 (x", "12 (x) S 1 2"} {
		if _, err := parseStat(12, []byte(in)); err == nil {
			t.Errorf("parseStat(%q) succeeded", in)
		}
	}
}

func TestBootID(t *testing.T) {
	id, err := BootID()
	if err != nil {
		t.Skip("no boot id:", err)
	}
	if len(id) < 32 {
		t.Fatalf("boot id %q", id)
	}
}

// TestDescendantsFindsSetsidGrandchild starts a shell whose child calls
// setsid and checks that the grandchild is found below the shell.
func TestDescendantsFindsSetsidGrandchild(t *testing.T) {
	cmd := exec.Command("sh", "-c", "setsid sleep 30 & echo $!; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = SignalGroup(cmd.Process.Pid, syscall.SIGKILL)
		_, _ = SignalDescendants(cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	want := strings.TrimSpace(string(buf[:n]))
	deadline := time.Now().Add(10 * time.Second)
	for {
		snap, err := Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range Descendants(snap, cmd.Process.Pid) {
			if want != "" && want == strconv.Itoa(d.PID) {
				if d.SID == cmd.Process.Pid {
					t.Fatalf("grandchild did not get its own session")
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("setsid grandchild %s not found below %d", want, cmd.Process.Pid)
		}
		time.Sleep(10 * time.Millisecond) // polling /proc for a process that is being exec'd
	}
}

func TestCwdAndEnviron(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("sleep", "600")
	cmd.Dir = dir
	cmd.Env = []string{"AGENTPLANE_TEST_MARK=here", "PATH=/usr/bin:/bin"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if got, err := Cwd(cmd.Process.Pid); err != nil || got != dir {
		t.Fatalf("Cwd = %q, %v; want %q", got, err, dir)
	}
	// Start returns once the exec closed its close-on-exec pipe, which
	// the kernel does before it lays out the new image's environment:
	// Environ must wait for the layout rather than read a half-made image.
	env, err := Environ(cmd.Process.Pid)
	if err != nil || !slices.Contains(env, "AGENTPLANE_TEST_MARK=here") {
		t.Fatalf("Environ = %q, %v", env, err)
	}
}

// TestEnvironRacesExec reads the environment of a process that does
// nothing but exec itself again, so that many reads land in the middle of
// an exec (it alternates between sh and env): every one must see the
// environment the process carries.
func TestEnvironRacesExec(t *testing.T) {
	script := filepath.Join(t.TempDir(), "reexec")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec /usr/bin/env \"$0\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script)
	cmd.Env = []string{"AGENTPLANE_TEST_MARK=here", "PATH=/usr/bin:/bin"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	exe, _ := Executable(pid)
	// Read until the image changed often enough, whatever the load
	// (the bound is only against a process that stopped exec'ing).
	execs := 0
	for i, deadline := 0, time.Now().Add(2*time.Minute); execs < 20 && time.Now().Before(deadline); i++ {
		env, err := Environ(pid)
		if err != nil || !slices.Contains(env, "AGENTPLANE_TEST_MARK=here") {
			t.Fatalf("read %d (after %d execs seen): Environ = %q, %v", i, execs, env, err)
		}
		if e, err := Executable(pid); err == nil && (exe == nil || !os.SameFile(e, exe)) {
			execs, exe = execs+1, e // sh and the script alternate as the image
		}
	}
	if execs < 20 {
		t.Fatalf("the process exec'd only %d times while it was read", execs)
	}
	t.Logf("%d image changes seen", execs)
}

// TestArgvRacesExec: the same for the command line, which an exec shows
// only once its arguments are copied into the new image (a read in
// between is empty): every read names the script.
func TestArgvRacesExec(t *testing.T) {
	script := filepath.Join(t.TempDir(), "reexec")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec /usr/bin/env \"$0\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	exe, _ := Executable(pid)
	execs := 0
	for i, deadline := 0, time.Now().Add(2*time.Minute); execs < 20 && time.Now().Before(deadline); i++ {
		argv, err := Argv(pid)
		if err != nil || !slices.Contains(argv, script) {
			t.Fatalf("read %d (after %d execs seen): Argv = %q, %v", i, execs, argv, err)
		}
		if e, err := Executable(pid); err == nil && (exe == nil || !os.SameFile(e, exe)) {
			execs, exe = execs+1, e
		}
	}
	if execs < 20 {
		t.Fatalf("the process exec'd only %d times while it was read", execs)
	}
}

// TestArgvEnds: a zombie has no command line to give, a kernel thread an
// empty one.
func TestArgvEnds(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if argv, err := Argv(cmd.Process.Pid); !errors.Is(err, ErrProcessExited) {
		t.Errorf("Argv of a zombie = %q, %v; want ErrProcessExited", argv, err)
	}
	_ = cmd.Wait()
	if argv, err := Argv(2); err != nil || len(argv) != 0 { // kthreadd
		t.Errorf("Argv of kthreadd = %q, %v; want empty", argv, err)
	}
}

func TestImageArgs(t *testing.T) {
	// Fields 48 and 49 (arg_start, arg_end), 27 (end_code) and 9 (flags).
	line := func(state string, flags, endCode, argStart, argEnd uint64) string {
		f := make([]string, 50)
		for i := range f {
			f[i] = "0"
		}
		f[0], f[6], f[24] = state, strconv.FormatUint(flags, 10), strconv.FormatUint(endCode, 10)
		f[45], f[46] = strconv.FormatUint(argStart, 10), strconv.FormatUint(argEnd, 10)
		return "42 (a) b) " + strings.Join(f, " ") + "\n"
	}
	for _, c := range []struct {
		name string
		stat string
		want int
	}{
		{"laid out, empty", line("S", 0, 8192, 4096, 4096), envEmpty},
		// Not empty: the read came before the layout, or during a later exec.
		{"laid out, not empty", line("S", 0, 8192, 4096, 4110), envUnsettled},
		{"mid-exec", line("R", 0, 0, 0, 0), envUnsettled},
		{"mid-layout", line("R", 0, 0, 4096, 4096), envUnsettled},
		{"exiting", line("D", 0, 0, 0, 0), envUnsettled},
		{"zombie", line("Z", 0, 0, 0, 0), envGone},
		{"kernel thread", line("I", pfKthread, 0, 0, 0), envEmpty},
		{"short", "42 (a) S 1 2 3\n", envUnsettled},
		{"malformed", "42 (a", envUnsettled},
	} {
		if got := imageArgs([]byte(c.stat)); got != c.want {
			t.Errorf("%s: imageArgs = %d, want %d", c.name, got, c.want)
		}
	}
}

// TestEnvironEmpty: a process started with no environment at all has an
// empty one, which is an answer, not an exec in progress.
func TestEnvironEmpty(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "600")
	cmd.Env = []string{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	env, err := Environ(cmd.Process.Pid)
	if err != nil || len(env) != 0 {
		t.Fatalf("Environ = %q, %v; want empty", env, err)
	}
}

func TestImageEnv(t *testing.T) {
	// Fields 3.. of a stat line, with fields 50 and 51 (env_start,
	// env_end), field 27 (end_code) and field 9 (flags) set as the case
	// needs.
	line := func(state string, flags, endCode, envStart, envEnd uint64) string {
		f := make([]string, 50)
		for i := range f {
			f[i] = "0"
		}
		f[0], f[6] = state, strconv.FormatUint(flags, 10)
		f[24], f[47], f[48] = strconv.FormatUint(endCode, 10), strconv.FormatUint(envStart, 10), strconv.FormatUint(envEnd, 10)
		return "42 (a) b) " + strings.Join(f, " ") + "\n"
	}
	for _, c := range []struct {
		name string
		stat string
		want int
	}{
		{"laid out, empty", line("S", 0, 8192, 4096, 4096), envEmpty},
		{"laid out, not empty", line("S", 0, 8192, 4096, 4200), envUnsettled},
		{"mid-exec", line("R", 0, 0, 0, 0), envUnsettled},
		// The kernel walks the strings with both bounds at their start.
		{"mid-layout of the environment", line("R", 0, 0, 4096, 4096), envUnsettled},
		{"mid-layout, sleeping on a fault", line("D", 0, 0, 4096, 4096), envUnsettled},
		{"exiting", line("D", 0, 0, 0, 0), envUnsettled},
		{"zombie", line("Z", 0, 0, 0, 0), envGone},
		{"kernel thread", line("I", pfKthread, 0, 0, 0), envEmpty},
		{"short", "42 (a) S 1 2 3\n", envUnsettled},
		{"malformed", "42 (a", envUnsettled},
	} {
		if got := imageEnv([]byte(c.stat)); got != c.want {
			t.Errorf("%s: imageEnv = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestThreadExiting(t *testing.T) {
	line := func(state string, flags uint64) string {
		return "42 (a) b) " + state + " 1 1 1 0 -1 " + strconv.FormatUint(flags, 10) + " 0 0\n"
	}
	for _, c := range []struct {
		name string
		stat string
		want bool
	}{
		{"running", line("R", 0x400040), false},
		{"sleeping", line("S", 0x400040), false},
		{"exiting", line("R", 0x400044), true},
		{"zombie", line("Z", 0x400040), true},
		{"short", "42 (a) S 1 2\n", true},
		{"malformed", "42 (a", true},
	} {
		if got := threadExiting([]byte(c.stat)); got != c.want {
			t.Errorf("%s: threadExiting = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestReadProc: a file larger than the buffer comes whole (the buffer
// grows), a stat agrees with os.ReadFile's, and a process that is gone
// is fs.ErrNotExist, as os.ReadFile said.
func TestReadProc(t *testing.T) {
	want, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	got, err := readProc("/proc/self/status", make([]byte, 16))
	if err != nil {
		t.Fatal(err)
	}
	// Only the first line is stable between two reads of one's own status.
	first := func(b []byte) string { l, _, _ := strings.Cut(string(b), "\n"); return l }
	if first(got) != first(want) || len(got) < len(want)/2 {
		t.Fatalf("read %d bytes starting %q, want %d starting %q", len(got), first(got), len(want), first(want))
	}
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	st, err := ReadStat(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(c.Process.Pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// The state may change between the reads (R as it starts, then S).
	wantSt, err := parseStat(c.Process.Pid, b)
	st.State, wantSt.State = 0, 0
	if err != nil || wantSt != st || st.Threads != 1 {
		t.Fatalf("ReadStat %+v, want %+v (%v)", st, wantSt, err)
	}
	_ = c.Process.Kill()
	_ = c.Wait()
	if _, err := ReadStat(c.Process.Pid); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat of a reaped process: %v, want not exist", err)
	}
}

// BenchmarkReadStat is one process's stat, the unit of every scan of the
// process table (Snapshot, the session tracker).
func BenchmarkReadStat(b *testing.B) {
	pid := os.Getpid()
	for b.Loop() {
		if _, err := ReadStat(pid); err != nil {
			b.Fatal(err)
		}
	}
}

// TestChildren: the children a multi-threaded process started from any of
// its threads are all listed, and a process that is gone is an error.
func TestChildren(t *testing.T) {
	var cmds []*exec.Cmd
	done := make(chan *exec.Cmd)
	for i := 0; i < 4; i++ {
		go func() {
			// A thread of its own: a child is listed by the thread that forked it.
			runtime.LockOSThread()
			c := exec.Command("sleep", "60")
			if err := c.Start(); err != nil {
				t.Error(err)
				done <- nil
				return
			}
			done <- c
		}()
	}
	for i := 0; i < 4; i++ {
		if c := <-done; c != nil {
			cmds = append(cmds, c)
		}
	}
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	self, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	kids, err := Children(os.Getpid(), self.Threads)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		if !slices.Contains(kids, c.Process.Pid) {
			t.Errorf("child %d not listed in %v", c.Process.Pid, kids)
		}
	}
	if one, err := Children(cmds[0].Process.Pid, 1); err != nil || len(one) != 0 {
		t.Errorf("children of sleep: %v, %v", one, err)
	}
	_ = cmds[0].Process.Kill()
	_ = cmds[0].Wait()
	if _, err := Children(cmds[0].Process.Pid, 1); err == nil {
		t.Error("children of a reaped process: no error")
	}
}

// TestTerminateSparesRecycledGroup: once the main process has exited (its
// exited channel closed: reaped), a live process with the leader's pid is
// a stranger that got the recycled pid, and its group is not signalled.
func TestTerminateSparesRecycledGroup(t *testing.T) {
	stranger := exec.Command("sleep", "7621")
	stranger.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	gone := make(chan struct{})
	go func() { _ = stranger.Wait(); close(gone) }()
	defer func() { _ = stranger.Process.Kill(); <-gone }()
	exited := make(chan struct{})
	close(exited)
	// The tree's leader "was" the stranger's pid: a group and a root of
	// that pid, its exit already seen.
	pid := stranger.Process.Pid
	Terminate(context.Background(), Tree{Group: pid, Root: os.Getpid() + 1<<22}, syscall.SIGKILL, 0, exited)
	// A SIGKILL takes effect asynchronously: give it a second to show.
	select {
	case <-gone:
		t.Fatal("Terminate killed the group of a stranger with the reaped leader's pid")
	case <-time.After(time.Second):
	}
}

// TestTreeKillWaits: Kill returns only once every process it killed is
// gone (a zombie at most), not merely signalled: the shell's children and a
// setsid grandchild it left, with a stopped one among them.
func TestTreeKillWaits(t *testing.T) {
	cmd := exec.Command("sh", "-c", `sleep 7631 & setsid sleep 7632 & sleep 7633 & kill -STOP $!; echo $!; wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	buf := make([]byte, 64)
	if n, _ := out.Read(buf); n == 0 {
		t.Fatal("no output from the shell")
	}
	sh, err := Identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// The shell printed after starting all three, so they are its
	// children now (the setsid one too, until the shell is gone).
	snap, err := Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var victims []ID
	for _, d := range Descendants(snap, sh.PID) {
		victims = append(victims, ID{PID: d.PID, Start: d.StartTime})
	}
	if len(victims) < 3 {
		t.Fatalf("found %d descendants, want 3", len(victims))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !(Tree{Main: sh, Root: sh.PID}).Kill(ctx) {
		t.Fatal("Kill says some process is still there")
	}
	for _, v := range append(victims, sh) {
		if st, err := ReadStat(v.PID); err == nil && st.StartTime == v.Start && !st.Dead() {
			t.Errorf("process %d is still alive (state %c) after Kill returned", v.PID, st.State)
		}
	}
}
