package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// treeScript starts, in the background, every kind of descendant that
// escapes a plain process-group kill, writes their pids to the file $1 and
// then "ready", and waits: a plain child, a setsid child, a nohup child, a
// double-forked orphan, and a setsid double fork.
const treeScript = `p=$1
sleep 7101 & echo $! >> $p
setsid sleep 7102 & echo $! >> $p
nohup sleep 7103 >/dev/null 2>&1 & echo $! >> $p
(sleep 7104 & echo $! >> $p)
setsid sh -c 'sleep 7105 & echo $! >> '$p &
while [ $(wc -l < $p) -lt 5 ]; do sleep 0.01; done
echo $$ >> $p
echo ready >> $p
wait`

// publicDir is a temporary directory that any user can enter, with a copy
// of this test binary in it, for runs as nobody.
func publicDir(t *testing.T) (dir, exe string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "agentsh-contain-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	exe = filepath.Join(dir, "agentsh")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(exe, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, exe
}

// awaitReady waits (bounded) for the script's "ready" line and returns the
// identities of the processes it listed.
func awaitReady(t *testing.T, pidfile string, alive func() bool) []proctree.ID {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, _ := os.ReadFile(pidfile)
		if lines := strings.Fields(string(b)); len(lines) > 0 && lines[len(lines)-1] == "ready" {
			var ids []proctree.ID
			for _, l := range lines[:len(lines)-1] {
				pid, err := strconv.Atoi(l)
				if err != nil {
					t.Fatalf("pid file: %q", b)
				}
				id, err := proctree.Identify(pid)
				if err != nil {
					t.Fatalf("process %d of the tree is already gone: %v", pid, err)
				}
				ids = append(ids, id)
			}
			return ids
		}
		if time.Now().After(deadline) || !alive() {
			t.Fatalf("the command never got ready; pid file: %q", b)
		}
		time.Sleep(5 * time.Millisecond) // polling a file a shell appends to
	}
}

// awaitGone waits for every process to be gone and reports how long the
// last one took. The bound is generous for a loaded machine; the time
// itself is logged (the guarantee is 2 s, measured in scripts/bench).
func awaitGone(t *testing.T, ids []proctree.ID, since time.Time) {
	t.Helper()
	t.Cleanup(func() {
		for _, id := range ids {
			if id.Alive() {
				_ = syscall.Kill(id.PID, syscall.SIGKILL)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, id := range ids {
		if err := proctree.Wait(ctx, id); err != nil {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(id.PID) + "/cmdline")
			t.Fatalf("process %d (%s) outlived its killed parent", id.PID, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	t.Logf("the whole tree was gone %v after the kill", time.Since(since).Round(time.Millisecond))
}

// TestContainment: SIGKILL of agentsh, or of its caller's whole process
// group, kills the command's tree: setsid, nohup and double-forked
// descendants included. As root the guard uses a cgroup; as nobody (no
// writable cgroup) the environment token.
func TestContainment(t *testing.T) {
	for _, tc := range []struct {
		name         string
		asNobody     bool
		killGroup    bool
		killWatchdog bool // SIGKILL the watchdog first, then agentsh
	}{
		{"sigkill", false, false, false},
		{"killpg-caller", false, true, false},
		{"sigkill-nobody", true, false, false},
		{"killpg-caller-nobody", true, true, false},
		{"watchdog-then-agentsh", false, false, true},
		{"watchdog-then-agentsh-nobody", true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.asNobody && os.Geteuid() != 0 {
				t.Skip("needs root to drop to nobody")
			}
			dir, exe := publicDir(t)
			pidfile := filepath.Join(dir, "pids")
			cmd := exec.Command(exe, "--timeout", "10m", "--", "sh", "-c", treeScript, "sh", pidfile)
			cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
			cmd.Dir = dir
			// The caller's group: agentsh leads a group of its own, as
			// under a shell with job control or an agent host.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if tc.asNobody {
				cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 65534, Gid: 65534}
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { _ = cmd.Wait(); close(exited) }()
			alive := func() bool {
				select {
				case <-exited:
					return false
				default:
					return true
				}
			}
			ids := awaitReady(t, pidfile, alive)
			killed := time.Now()
			if tc.killWatchdog {
				// The command (or anyone) kills the watchdog: agentsh
				// sees it die and kills the tree itself, so agentsh's own
				// death later finds nothing to leave behind. (Both killed
				// in the same instant is the one case no guard survives.)
				wd := findWatchdog(t, cmd.Process.Pid)
				if err := syscall.Kill(wd, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				awaitGone(t, ids, killed)
			}
			if tc.killGroup {
				if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			} else if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-exited
			awaitGone(t, ids, killed)
		})
	}
}

// findWatchdog returns the pid of the watchdog agentsh (pid) started.
func findWatchdog(t *testing.T, pid int) int {
	t.Helper()
	snap, err := proctree.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snap {
		if s.PPID != pid {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.PID)); err == nil && strings.Contains(string(b), "watchdog") {
			return s.PID
		}
	}
	t.Fatalf("no watchdog among agentsh's children")
	return 0
}

// TestContainmentSession: SIGKILL of a session server kills its shell and
// everything the shell started in the background.
func TestContainmentSession(t *testing.T) {
	dir, exe := publicDir(t)
	pidfile := filepath.Join(dir, "pids")
	env := append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	run := func(args ...string) string {
		t.Helper()
		c := exec.Command(exe, args...)
		c.Env, c.Dir = env, dir
		out, err := c.Output()
		if err != nil {
			t.Fatalf("agentsh %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	started := run("session", "start")
	handle := gjson.Get(started, "session").String()
	t.Cleanup(func() {
		c := exec.Command(exe, "session", "stop", handle)
		c.Env, c.Dir = env, dir
		_ = c.Run()
	})
	if err := os.WriteFile(filepath.Join(dir, "tree.sh"), []byte(treeScript), 0o755); err != nil {
		t.Fatal(err)
	}
	// The tree is started in the background of the session's shell, and
	// the call returns at once.
	run("--session", handle, "-c", "sh ./tree.sh "+pidfile+" >/dev/null 2>&1 &")
	ids := awaitReady(t, pidfile, func() bool { return true })
	status := run("session", "status", handle)
	server := int(gjson.Get(status, "server_pid").Int())
	if server == 0 {
		server = int(gjson.Get(status, "pid").Int())
	}
	shell := int(gjson.Get(status, "shell_pid").Int())
	if server <= 0 {
		t.Fatalf("no server pid in %s", status)
	}
	if shell > 0 {
		if id, err := proctree.Identify(shell); err == nil {
			ids = append(ids, id)
		}
	}
	killed := time.Now()
	if err := syscall.Kill(server, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitGone(t, ids, killed)
}

// TestContainmentEarlyKill: agentsh SIGKILLed at every millisecond of its
// start, while the watchdog and the cgroup are being set up and the
// command is being started, leaves nothing of the command running:
// whatever of it started is killed by the watchdog.
func TestContainmentEarlyKill(t *testing.T) {
	dir, exe := publicDir(t)
	marker := "7207" + strconv.Itoa(os.Getpid()%1000)
	script := "sleep " + marker + " & setsid sleep " + marker + " & touch \"$0\"; wait"
	reached := 0
	const kills = 40
	for i := 0; i < kills; i++ {
		delay := time.Duration(i) * time.Millisecond
		started := filepath.Join(dir, "started."+strconv.Itoa(i))
		cmd := exec.Command(exe, "--timeout", "10m", "--", "sh", "-c", script, started)
		cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay) // the moment of the kill is what varies, not a synchronisation
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if _, err := os.Stat(started); err == nil {
			reached++
		}
	}
	t.Logf("%d of %d kills came after the command had started", reached, kills)
	// Every survivor would be a "sleep MARKER"; the watchdogs kill within
	// milliseconds, the bound is for a loaded machine.
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := sleepers(marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("processes %v of a killed agentsh's command survived", left)
		}
		time.Sleep(10 * time.Millisecond) // polling /proc for the kills
	}
}

// sleepers returns the live processes running "sleep MARKER".
func sleepers(marker string) []int {
	snap, err := proctree.Snapshot()
	if err != nil {
		return nil
	}
	var out []int
	for _, s := range snap {
		if s.Dead() {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.PID))
		if err == nil && string(b) == "sleep\x00"+marker+"\x00" {
			out = append(out, s.PID)
		}
	}
	return out
}

// TestGroupKillSparesRecycledPID: the command's process group is killed
// only while its leader is an unreaped zombie, whose id no other process
// can get. agentsh is frozen right after the reap; a stranger is then
// given the leader's very pid as the leader of a session of its own (the
// kernel's next-pid knob), and agentsh, thawed, must leave it alone.
func TestGroupKillSparesRecycledPID(t *testing.T) {
	const knob = "/proc/sys/kernel/ns_last_pid"
	if os.Geteuid() != 0 {
		t.Skip("needs root to set " + knob)
	}
	if _, err := os.Stat(knob); err != nil {
		t.Skip("no " + knob)
	}
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "pid")
	cmd := exec.Command(os.Args[0], "--", "sh", "-c", `echo $$ > "$1"`, "sh", pidfile)
	cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir,
		"AGENTPLANE_FAULTPOINT=run.reaped=stop")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	deadline := time.Now().Add(60 * time.Second)
	for {
		if st, err := proctree.ReadStat(cmd.Process.Pid); err == nil && st.State == 'T' {
			break
		}
		select {
		case <-exited:
			t.Fatal("agentsh exited without stopping at run.reaped")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("agentsh never stopped at run.reaped")
		}
		time.Sleep(5 * time.Millisecond) // polling another process's state
	}
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	leader, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file: %q", b)
	}
	// Other processes of a busy machine take pids too: try until the
	// stranger gets exactly the leader's.
	var stranger *exec.Cmd
	for range 200 {
		if err := os.WriteFile(knob, []byte(strconv.Itoa(leader-1)), 0o644); err != nil {
			t.Skipf("cannot set %s: %v", knob, err)
		}
		c := exec.Command("sleep", "7201")
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		if c.Process.Pid == leader {
			stranger = c
			break
		}
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	if stranger == nil {
		t.Skipf("pid %d was never handed out again", leader)
	}
	strangerExited := make(chan struct{})
	go func() { _ = stranger.Wait(); close(strangerExited) }()
	t.Cleanup(func() { _ = stranger.Process.Kill(); <-strangerExited })
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	<-exited
	select {
	case <-strangerExited:
		t.Fatalf("agentsh killed process %d, which got its command's pid after the reap", leader)
	default:
	}
	if err := syscall.Kill(leader, 0); err != nil {
		t.Fatalf("the stranger with pid %d is gone: %v", leader, err)
	}
}
