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
)

// TestMain lets this test binary serve as the keeper (KeeperCommand), or
// as a process whose main thread ended alone (loneThreadArg).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == loneThreadArg {
		runLoneThread()
	}
	if len(os.Args) > 1 && os.Args[1] == heldParentArg {
		runHeldParent()
	}
	if len(os.Args) > 1 && os.Args[1] == WatchdogCommand {
		os.Exit(RunWatchdog(os.Args[2:], os.Stdin))
	}
	if len(os.Args) > 1 && os.Args[1] == frontOwnerArg {
		runFrontOwner(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == heldChildArg {
		runHeldChild()
	}
	if len(os.Args) > 1 && os.Args[1] == KeeperCommand {
		os.Exit(RunKeeper(os.Args[2:], func(s Stat) bool {
			argv, _ := Argv(s.PID)
			return len(argv) > 1 && argv[0] == "sleep" && argv[1] == "7502" // the "detached server"
		}))
	}
	os.Exit(m.Run())
}

// startKept runs script under a keeper of an environ-mode guard and
// returns the keeper, the command's identity and the command's stdout.
func startKept(t *testing.T, script string) (*Keeper, ID, *bufio.Reader) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g := &Guard{mode: GuardEnviron, exe: self, token: "keepertest"}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = g.Env(os.Environ())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	k, err := g.Keep(cmd)
	if err != nil || k == nil {
		t.Fatalf("Keep: %v, %v", k, err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	id, err := k.Started()
	if err != nil {
		t.Fatal(err)
	}
	return k, id, bufio.NewReader(out)
}

// readPids reads n lines "TAG PID" and returns the processes by tag.
func readPids(t *testing.T, r *bufio.Reader, n int) map[string]ID {
	t.Helper()
	ids := map[string]ID{}
	for len(ids) < n {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading pids: %v", err)
		}
		tag, p, _ := strings.Cut(strings.TrimSpace(line), " ")
		pid, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("not a pid: %q", line)
		}
		id, err := Identify(pid)
		if err != nil {
			t.Fatal(err)
		}
		ids[tag] = id
		t.Cleanup(func() {
			if id.Alive() {
				_ = syscall.Kill(id.PID, syscall.SIGKILL)
			}
		})
	}
	return ids
}

func waitGone(t *testing.T, ids ...ID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, id := range ids {
		if err := Wait(ctx, id); err != nil {
			st, _ := ReadStat(id.PID)
			argv, _ := Argv(id.PID)
			t.Fatalf("process %d (%q, %+v) outlived the keeper's kill", id.PID, argv, st)
		}
	}
}

// TestKeeperStatus: the command is the keeper's child in a session of its
// own ($$ is the pid Started reports), carries the guard's token while the
// keeper does not, and Wait returns its exit status.
func TestKeeperStatus(t *testing.T) {
	k, id, out := startKept(t, `echo $$; echo "$AGENTPLANE_GUARD"; exit 7`)
	defer k.Release()
	if pid, _ := out.ReadString('\n'); strings.TrimSpace(pid) != strconv.Itoa(id.PID) {
		t.Errorf("$$ is %s, Started said %d", pid, id.PID)
	}
	if tok, _ := out.ReadString('\n'); strings.TrimSpace(tok) != "keepertest" {
		t.Errorf("the command's token is %q", tok)
	}
	ws, err := k.Wait()
	if err != nil || !ws.Exited() || ws.ExitStatus() != 7 {
		t.Fatalf("Wait: %v %v, want exit 7", ws, err)
	}
	if env, err := Environ(k.cmd.Process.Pid); err == nil && carriesToken(env, "keepertest") {
		t.Error("the keeper bears the token: the watchdog would kill it mid-work")
	}
}

// TestKeeperKillsOnEOF: once the guarded process is gone (its end of the
// socket closed without "done"), the keeper kills every descendant that
// cleared its environment and left the session, and spares the exempt.
func TestKeeperKillsOnEOF(t *testing.T) {
	k, _, out := startKept(t, `env -i /bin/sh -c 'setsid sleep 7501 & echo a $!'
(setsid sleep 7502 & echo kept $!) &
sleep 7503 & echo b $!
wait`)
	ids := readPids(t, out, 3)
	kept := ids["kept"]
	// The exempt predicate knows it once it runs sleep, not setsid.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		if argv, _ := Argv(kept.PID); len(argv) > 0 && argv[0] == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("setsid never executed sleep 7502")
		}
	}
	k.ctl.Close() // as when the guarded process is SIGKILLed
	<-k.exited
	waitGone(t, ids["a"], ids["b"])
	if !kept.Alive() {
		t.Error("the exempt process was killed")
	}
}

// TestKeeperKill: Kill (the guarded process's final cleanup) kills the
// tree and reports nothing left; Release then ends the keeper.
func TestKeeperKill(t *testing.T) {
	k, _, out := startKept(t, `env -i setsid sleep 7504 & echo a $!`)
	ids := readPids(t, out, 1)
	if _, err := k.Wait(); err != nil {
		t.Fatal(err)
	}
	if left := k.Kill(5 * time.Second); len(left) != 0 {
		t.Errorf("left %v", left)
	}
	waitGone(t, ids["a"])
	k.Release()
	select {
	case <-k.exited:
	default:
		t.Error("the keeper still runs after Release")
	}
}
