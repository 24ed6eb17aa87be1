package proctree

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/result"
)

func TestParseSignal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want syscall.Signal
	}{
		{"TERM", syscall.SIGTERM}, {"SIGKILL", syscall.SIGKILL}, {"int", syscall.SIGINT},
		{"sigusr1", syscall.SIGUSR1}, {"9", syscall.SIGKILL}, {"64", 64}, {"SIG34", 34},
	} {
		got, err := ParseSignal(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "0", "65", "-1", "NOPE", "SIG", "SIG65", "SIG0"} {
		_, err := ParseSignal(in)
		if err == nil {
			t.Errorf("ParseSignal(%q) succeeded", in)
			continue
		}
		if c := result.AsError(err).Code; c != result.CodeUsage {
			t.Errorf("ParseSignal(%q): code %q, want %q", in, c, result.CodeUsage)
		}
	}
}

// TestSignalNameRoundTrip: every name SignalName prints parses back.
func TestSignalNameRoundTrip(t *testing.T) {
	for n := 1; n <= maxSignal; n++ {
		name := SignalName(syscall.Signal(n))
		if !strings.HasPrefix(name, "SIG") {
			t.Fatalf("SignalName(%d) = %q", n, name)
		}
		got, err := ParseSignal(name)
		if err != nil || got != syscall.Signal(n) {
			t.Fatalf("ParseSignal(SignalName(%d)=%q) = %v, %v", n, name, got, err)
		}
	}
	if SignalName(syscall.SIGTERM) != "SIGTERM" {
		t.Fatalf("SIGTERM is %q", SignalName(syscall.SIGTERM))
	}
}

func TestOwnerCheck(t *testing.T) {
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    Owner
		want Verdict
	}{
		{"self", self, OwnerAlive},
		{"self, boot not recorded", Owner{PID: self.PID, Start: self.Start}, OwnerAlive},
		{"recycled pid", Owner{PID: self.PID, Start: self.Start + 1, Boot: self.Boot}, OwnerDied},
		{"another boot", Owner{PID: self.PID, Start: self.Start, Boot: "00000000-0000-0000-0000-000000000000"}, OwnerHostRestarted},
		{"no pid", Owner{Boot: self.Boot}, OwnerDied},
	} {
		if got := tc.o.Check(); got != tc.want {
			t.Errorf("%s: Check() = %v, want %v", tc.name, got, tc.want)
		}
	}
	// An exited (and reaped) child is dead.
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	id, err := Identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if v := (Owner{PID: id.PID, Start: id.Start, Boot: self.Boot}).Check(); v != OwnerDied {
		t.Fatalf("exited child: %v", v)
	}
}

func TestWait(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	id, err := Identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// Bounded by the context while the process lives.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Wait(ctx, id); err != context.Canceled {
		t.Fatalf("Wait with a cancelled context: %v", err)
	}
	// A wrong start time is another process: gone at once.
	if err := Wait(context.Background(), ID{PID: id.PID, Start: id.Start + 1}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Wait(context.Background(), id) }()
	_ = cmd.Process.Kill()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := Wait(context.Background(), id); err != nil {
		t.Fatal("Wait on a reaped process:", err)
	}
}

// startTree starts a shell (its own session) that starts a setsid
// grandchild and a plain background child, and prints their pids.
func startTree(t *testing.T, script string) (*exec.Cmd, []int) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = SignalGroup(cmd.Process.Pid, syscall.SIGKILL)
		_, _ = SignalDescendants(cmd.Process.Pid, syscall.SIGKILL)
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(line) {
		p, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, p)
	}
	return cmd, pids
}

func identities(t *testing.T, pids []int) []ID {
	var ids []ID
	for _, p := range pids {
		id, err := Identify(p)
		if err != nil {
			t.Fatalf("pid %d: %v", p, err)
		}
		ids = append(ids, id)
	}
	return ids
}

func awaitGone(t *testing.T, ids []ID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		if err := Wait(ctx, id); err != nil {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(id.PID) + "/stat")
			t.Fatalf("pid %d survived: %v: %s", id.PID, err, b)
		}
	}
}

// TestTerminateGraceThenKill: a main process that ignores the first signal
// is SIGKILLed after the grace, and the setsid grandchild with it.
func TestTerminateGraceThenKill(t *testing.T) {
	// The setsid child waits for its exec before the shell prints, so the
	// pids printed are those of the sleeps, not of forks about to exec.
	cmd, pids := startTree(t, `trap '' TERM; setsid sleep 60 & a=$!; sleep 60 & b=$!; `+
		`while [ "$(cat /proc/$a/comm /proc/$b/comm 2>/dev/null)" != "$(printf 'sleep\nsleep')" ]; do :; done; `+
		`echo $a $b; while :; do sleep 1; done`)
	ids := identities(t, append(pids, cmd.Process.Pid))
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tree := Tree{Main: ids[len(ids)-1], Group: cmd.Process.Pid, Root: cmd.Process.Pid}
	if !Terminate(ctx, tree, syscall.SIGTERM, 50*time.Millisecond, exited) {
		t.Fatal("main process not seen to exit")
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("main ended with %v, want SIGKILL after the grace", cmd.ProcessState)
	}
	awaitGone(t, ids)
}

// TestTerminateSessionMembersAndSpare: with no exited channel Main is
// waited for by pidfd; members of the session that were reparented away
// are reached through Session, and Spare leaves one alone.
func TestTerminateSessionMembersAndSpare(t *testing.T) {
	cmd, pids := startTree(t, `sleep 60 & a=$!; sleep 61 & b=$!; `+
		`while [ "$(cat /proc/$a/comm /proc/$b/comm 2>/dev/null)" != "$(printf 'sleep\nsleep')" ]; do :; done; echo $a $b; wait`)
	go func() { _ = cmd.Wait() }()
	ids := identities(t, pids)
	main, err := Identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	spared := ids[1]
	defer syscall.Kill(spared.PID, syscall.SIGKILL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tree := Tree{Main: main, Session: main, Spare: func(s Stat) bool { return s.PID == spared.PID && s.StartTime == spared.Start }}
	if !Terminate(ctx, tree, syscall.SIGTERM, 10*time.Second, nil) {
		t.Fatal("main not seen to exit")
	}
	awaitGone(t, []ID{main, ids[0]})
	if !spared.Alive() {
		t.Fatal("the spared process was killed")
	}
}

func TestTreeSignalNeverHitsRecycledMain(t *testing.T) {
	// A Main whose start time does not match is not signalled.
	self, err := Identify(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if n := (Tree{Main: ID{PID: self.PID, Start: self.Start + 1}}).Signal(syscall.SIGKILL); n != 0 {
		t.Fatalf("signalled %d", n)
	}
}
