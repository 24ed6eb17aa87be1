package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/internal/faultpoint"
	"github.com/agentplane/agentplane/internal/testkit"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/reexec"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox"
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

// escapeScript starts, in the background, descendants that leave the
// command's Unix session and clear their environment (so neither the
// session nor the guard's token finds them), writes their pids to the file
// $1 and then "ready", and waits: env -i then setsid, a double fork through
// env -i and setsid, a Python double fork with setsid and an execve with an
// empty environment, and a Perl daemon that also closes every descriptor
// and leaves the working directory (a plain child keeps the script's wait). $2 and $3 are python3 and perl ("" when
// absent: that case is left out).
const escapeScript = `p=$1 py=$2 pl=$3 n=3; : >> "$p"
sleep 7200 & echo $! >> $p
env -i /bin/sh -c 'setsid sleep 7201 & echo $! >> "$1"' sh "$p" &
(env -i /bin/sh -c '(setsid sleep 7202 & echo $! >> "$1") &' sh "$p") &
if [ -n "$py" ]; then n=$((n+1)); "$py" -c '
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[1], "a") as f:
            f.write("%d\n" % os.getpid())
        os.execve("/bin/sleep", ["sleep", "7203"], {})
    os._exit(0)
os.wait()
' "$p" & fi
if [ -n "$pl" ]; then n=$((n+1)); "$pl" -e '
use POSIX;
my $p = shift;
exit 0 if fork;
POSIX::setsid();
exit 0 if fork;
open(my $f, ">>", $p) or die; print $f "$$\n"; close $f;
POSIX::close($_) for 0..1023;
chdir "/";
%ENV = ();
exec "/bin/sleep", "7204";
' "$p" & fi
while [ $(wc -l < $p) -lt $n ]; do sleep 0.01; done
echo $$ >> $p
echo ready >> $p
wait`

// rootAndPython skips the test (saying why) unless it runs as root and
// the machine has python3, whose path it returns.
func rootAndPython(t *testing.T, why string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip(why)
	}
	py := interpreter("/usr/bin/python3", "/usr/local/bin/python3")
	if py == "" {
		t.Skip("no python3")
	}
	return py
}

// interpreter returns the absolute path of an interpreter the escape
// script uses, or "" when the machine has none (the real file, not a
// version manager's shim).
func interpreter(names ...string) string {
	for _, n := range names {
		if st, err := os.Stat(n); err == nil && st.Mode().IsRegular() {
			return n
		}
	}
	return ""
}

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
					t.Fatalf("process %d of the tree is already gone: %v; pid file: %q", pid, err, b)
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

// oneShot is agentsh run with args, as the containment tests run it: the
// test binary's main, state and configuration under dir, dir its working
// directory, and a process group of its own (so that a kill of the test's
// group does not reach it).
func oneShot(exe, dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// killAgentsh SIGKILLs the agentsh cmd runs, waits for its exit (exited,
// from startWatched) and then for every process of ids to be gone.
func killAgentsh(t *testing.T, cmd *exec.Cmd, exited <-chan struct{}, ids []proctree.ID) {
	t.Helper()
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	awaitGone(t, ids, killed)
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
		escape       bool // the tree is escapeScript's, not treeScript's
	}{
		{"sigkill", false, false, false, false},
		{"killpg-caller", false, true, false, false},
		{"sigkill-nobody", true, false, false, false},
		{"killpg-caller-nobody", true, true, false, false},
		{"watchdog-then-agentsh", false, false, true, false},
		{"watchdog-then-agentsh-nobody", true, false, true, false},
		{"escape-sigkill", false, false, false, true},
		{"escape-sigkill-nobody", true, false, false, true},
		{"escape-killpg-caller-nobody", true, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.asNobody && os.Geteuid() != 0 {
				t.Skip("needs root to drop to nobody")
			}
			dir, exe := publicDir(t)
			pidfile := filepath.Join(dir, "pids")
			args := []string{"--timeout", "10m", "--", "sh", "-c", treeScript, "sh", pidfile}
			if tc.escape {
				py := interpreter("/usr/bin/python3", "/usr/local/bin/python3")
				pl := interpreter("/usr/bin/perl", "/usr/local/bin/perl")
				t.Logf("escapes through env -i and setsid; python3 %q, perl %q", py, pl)
				args = []string{"--timeout", "10m", "--", "sh", "-c", escapeScript, "sh", pidfile, py, pl}
			}
			cmd := exec.Command(exe, args...)
			cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
			cmd.Dir = dir
			// The caller's group: agentsh leads a group of its own, as
			// under a shell with job control or an agent host.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if tc.asNobody {
				cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 65534, Gid: 65534}
			}
			exited, alive := startWatched(t, cmd)
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
		if argv, err := proctree.Argv(s.PID); err == nil && strings.Contains(strings.Join(argv, " "), "watchdog") {
			return s.PID
		}
	}
	t.Fatalf("no watchdog among agentsh's children")
	return 0
}

// TestContainmentWatchdogPipeHeld: whoever may look into the watchdog
// (the command, unsandboxed, as root or as the same user) opens its end of
// the guard's stream again through /proc/PID/fd/0, for writing, and holds
// it, as a detached descendant would: `exec 9>/proc/$WD/fd/0`. A pipe so
// held never reached end of file, so a SIGKILL of agentsh left the tree
// running under a watchdog that waited for ever. The stream cannot be
// opened so; agentsh's death still reaches the watchdog.
func TestContainmentWatchdogPipeHeld(t *testing.T) {
	dir, exe := publicDir(t)
	pidfile := filepath.Join(dir, "pids")
	cmd := exec.Command(exe, "--timeout", "10m", "--", "sh", "-c", treeScript, "sh", pidfile)
	cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir, "TMPDIR="+dir)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	exited, alive := startWatched(t, cmd)
	ids := awaitReady(t, pidfile, alive)
	wd := findWatchdog(t, cmd.Process.Pid)
	for _, fd := range []int{0, 1} {
		if f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", wd, fd), os.O_WRONLY, 0); err == nil {
			t.Errorf("the watchdog's descriptor %d opens again through /proc for writing", fd)
			defer f.Close() // held, as the attack holds it, until the end
		}
	}
	killAgentsh(t, cmd, exited, ids)
}

// grabScript (python3) takes a copy of every descriptor of agentsh, the
// first ancestor that is agentsh but not its keeper, through pidfd_getfd
// (which a process of the same user may use on a dumpable one), and holds
// them in a detached sleep whose pid it appends to the file argv[1]: the
// copies of agentsh's ends of the watchdog's and the keeper's streams
// keep their end of file, the news of agentsh's death, from coming. It
// exits only once the sleep has appended its pid (the sleep's exec closes
// their pipe): the caller appends "ready" after it.
const grabScript = `import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def parent(p):
    s = open("/proc/%d/stat" % p).read()
    return int(s[s.rindex(")") + 2:].split()[1])
p = os.getppid()
while p > 1:
    a = open("/proc/%d/cmdline" % p, "rb").read().split(b"\0")
    if os.path.basename(a[0]) == b"agentsh" and a[1:2] != [b"__keeper"]:
        break
    p = parent(p)
pfd = os.pidfd_open(p)
got = [fd for fd in (libc.syscall(438, pfd, n, 0) for n in range(256)) if fd >= 0]
sys.stderr.write("grabbed %d from %s\n" % (len(got), open("/proc/%d/cmdline" % p).read()))
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    for fd in got:
        os.set_inheritable(fd, True)
    with open(sys.argv[1], "a") as f:
        f.write("%d\n" % os.getpid())
    os.execve("/bin/sleep", ["sleep", "7311"], {})
os.close(w)
os.read(r, 1)
`

// TestContainmentDescriptorsGrabbed: the command takes copies of
// agentsh's descriptors (pidfd_getfd) into a detached process, and agentsh
// is SIGKILLed: the copies of its ends of the watchdog's and the keeper's
// streams kept their end of file from coming, and the tree ran on. As
// nobody agentsh is undumpable (proctree.Seal), so the copies cannot be
// taken; root (CAP_SYS_PTRACE) takes them, and the watchdog's front and
// the keeper learn of agentsh's death from its pidfd as well.
func TestContainmentDescriptorsGrabbed(t *testing.T) {
	py := rootAndPython(t, "needs root (and to drop to nobody)")
	for _, tc := range []struct {
		name string
		cred *syscall.Credential
		took bool // the command takes the descriptors
	}{
		{"root", nil, true},
		{"nobody", &syscall.Credential{Uid: 65534, Gid: 65534}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, exe := publicDir(t)
			pidfile := filepath.Join(dir, "pids")
			script := `p=$1; "$2" -c "$3" "$p" 2>"$p.err" || exit 1; echo $$ >> $p; echo ready >> $p; exec sleep 7312`
			cmd := exec.Command(exe, "--timeout", "10m", "--", "sh", "-c", script, "sh", pidfile, py, grabScript)
			cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
			cmd.Dir = dir
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: tc.cred}
			exited, alive := startWatched(t, cmd)
			ids := awaitReady(t, pidfile, alive)
			b, _ := os.ReadFile(pidfile + ".err")
			if took := !strings.Contains(string(b), "grabbed 0 "); !strings.Contains(string(b), "grabbed") || took != tc.took {
				t.Fatalf("want the descriptors taken: %v, have %q", tc.took, b)
			}
			killAgentsh(t, cmd, exited, ids)
		})
	}
}

// sessionServer returns the pid of the one session server whose state is
// under dir (XDG_STATE_HOME): the process that serves the socket, not
// the shell (the status's pid) nor, without a cgroup, its keeper.
func sessionServer(t *testing.T, dir string) int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "agentplane", "sessions", "*", "status.json"))
	if len(files) != 1 {
		t.Fatalf("want one session's status.json, have %q", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	pid := int(gjson.GetBytes(b, "server_pid").Int())
	if pid <= 0 {
		t.Fatalf("no server_pid in %s", b)
	}
	a, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if !strings.Contains(string(a), reexec.SessionServer) {
		t.Fatalf("server_pid %d is %q, not a session server", pid, a)
	}
	return pid
}

// TestContainmentSessionDescriptorsGrabbed: a command in a session takes
// copies of the session server's descriptors (pidfd_getfd) into a
// detached process, and the server is SIGKILLed: the copy of the server's
// end of its watchdog's stream kept the end of file from coming, and the
// shell's tree ran on. The watchdog learns of the death from the server's
// pidfd; without a cgroup (as nobody) the keeper above the server is its
// parent and reaps it.
func TestContainmentSessionDescriptorsGrabbed(t *testing.T) {
	py := rootAndPython(t, "needs root (and to drop to nobody)")
	for _, tc := range []struct {
		name string
		cred *syscall.Credential
	}{
		{"root", nil},
		{"nobody", &syscall.Credential{Uid: 65534, Gid: 65534}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, exe := publicDir(t)
			pidfile := filepath.Join(dir, "pids")
			if err := os.WriteFile(filepath.Join(dir, "grab.py"), []byte(grabScript), 0o644); err != nil {
				t.Fatal(err)
			}
			env := append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
			command := func(args ...string) *exec.Cmd {
				c := exec.Command(exe, args...)
				c.Env, c.Dir = env, dir
				c.SysProcAttr = &syscall.SysProcAttr{Credential: tc.cred}
				return c
			}
			run := func(args ...string) string {
				t.Helper()
				out, err := command(args...).Output()
				if err != nil {
					t.Fatalf("agentsh %v: %v\n%s", args, err, out)
				}
				return string(out)
			}
			handle := gjson.Get(run("session", "start"), "session").String()
			t.Cleanup(func() { _ = command("session", "stop", handle).Run() })
			script := `p=$1; "$2" ./grab.py "$p" || exit 1; echo $$ >> $p; echo ready >> $p; exec sleep 7313`
			run("--session", handle, "-c", "sh -c '"+script+"' sh "+pidfile+" "+py+" >/dev/null 2>"+pidfile+".err &")
			ids := awaitReady(t, pidfile, func() bool { return true })
			server := sessionServer(t, dir)
			// The attack was made: the command holds copies of the
			// server's descriptors.
			if b, _ := os.ReadFile(pidfile + ".err"); !strings.Contains(string(b), "grabbed") || strings.Contains(string(b), "grabbed 0 ") {
				t.Fatalf("the command took no descriptor of the session server: %q", b)
			}
			killed := time.Now()
			if err := syscall.Kill(server, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			awaitGone(t, ids, killed)
		})
	}
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
	server := sessionServer(t, dir)
	if shell := int(gjson.Get(run("session", "status", handle), "pid").Int()); shell > 0 {
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
func TestContainmentEarlyKill(t *testing.T) { earlyKill(t, "7207", false) }

// TestContainmentEarlyKillSandboxed is TestContainmentEarlyKill with a
// sandbox, whose helper agentsh starts while its packages are still being
// initialised, before the watchdog (package spawn): killed at every
// millisecond, before the helper got its spec, while it confines itself
// or once the command runs, agentsh leaves neither the command nor the
// helper behind.
func TestContainmentEarlyKillSandboxed(t *testing.T) {
	requireSandbox(t)
	before := orphanHelpers()
	earlyKill(t, "7208", true)
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := slices.DeleteFunc(orphanHelpers(), func(pid int) bool { return slices.Contains(before, pid) })
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox helpers %v outlived their agentsh", left)
		}
		time.Sleep(10 * time.Millisecond) // polling /proc for the kills
	}
}

// requireSandbox skips a test that needs the sandbox's namespaces (root)
// and its filesystem and network modes.
// sandboxWorkspace skips the test without a sandbox, and returns
// publicDir's directory and program with a workspace "ws" in it, beside
// the program (a writable root that holds agentplane's programs is
// refused).
func sandboxWorkspace(t *testing.T) (dir, exe, ws string) {
	t.Helper()
	requireSandbox(t)
	dir, exe = publicDir(t)
	ws = filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir, exe, ws
}

func requireSandbox(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for the sandbox's namespaces")
	}
	if c := sandbox.Check()["enforceable"].(map[string]any); c["workspace-write"] != true || c["net_none"] != true {
		t.Skip("the sandbox is not enforceable here")
	}
}

// orphanHelpers returns the live sandbox helpers whose parent is gone
// (reparented to PID 1).
func orphanHelpers() []int {
	snap, err := proctree.Snapshot()
	if err != nil {
		return nil
	}
	var out []int
	for _, s := range snap {
		if s.Dead() || s.PPID != 1 {
			continue
		}
		if argv, err := proctree.Argv(s.PID); err == nil && len(argv) > 1 && argv[1] == sandbox.HelperCommand {
			out = append(out, s.PID)
		}
	}
	return out
}

// earlyKill SIGKILLs agentsh at every millisecond of its start, in a
// sandbox or not (whose workspace is beside the program: one that holds
// it is refused), and checks that nothing of the command survives.
func earlyKill(t *testing.T, marker string, sandboxed bool) {
	dir, exe := publicDir(t)
	marker += strconv.Itoa(os.Getpid() % 1000)
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	var args []string
	if sandboxed {
		args = []string{"--sandbox", "workspace-write", "--net", "none", "--cwd", ws}
	}
	script := "sleep " + marker + " & setsid sleep " + marker + " & touch \"$0\"; wait"
	reached := 0
	const kills = 40
	for i := 0; i < kills; i++ {
		delay := time.Duration(i) * time.Millisecond
		started := filepath.Join(ws, "started."+strconv.Itoa(i))
		cmd := oneShot(exe, dir, slices.Concat([]string{"--timeout", "10m"}, args, []string{"--", "sh", "-c", script, started})...)
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
		// proctree.Argv, not the file: a sleep in the middle of its exec
		// reads empty there.
		argv, err := proctree.Argv(s.PID)
		if err == nil && slices.Equal(argv, []string{"sleep", marker}) {
			out = append(out, s.PID)
		}
	}
	return out
}

// TestContainmentSparesDetachedNobody: as an unprivileged user (no
// cgroup: the keeper holds the tree), SIGKILL of agentsh kills the
// command but not a session the command started on purpose, nor that
// session's own background process.
func TestContainmentSparesDetachedNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop to nobody")
	}
	dir, exe := publicDir(t)
	pidfile := filepath.Join(dir, "pids")
	env := append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	nobody := &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	script := `a=$1 p=$2
"$a" session start --name keep > /dev/null || exit 9
"$a" --session keep -c 'sleep 7602 >/dev/null 2>&1 & echo $! >> '"$p" > /dev/null || exit 9
env -i setsid sleep 7601 & echo $! >> $p
echo $$ >> $p
echo ready >> $p
wait`
	cmd := exec.Command(exe, "--timeout", "10m", "--", "sh", "-c", script, "sh", exe, pidfile)
	cmd.Env, cmd.Dir, cmd.SysProcAttr = env, dir, nobody
	exited, alive := startWatched(t, cmd)
	t.Cleanup(func() {
		c := exec.Command(exe, "session", "stop", "keep")
		c.Env, c.Dir, c.SysProcAttr = env, dir, nobody
		_ = c.Run()
	})
	ids := awaitReady(t, pidfile, alive)
	background, tree := ids[0], ids[1:]
	killAgentsh(t, cmd, exited, tree)
	if !background.Alive() {
		t.Fatal("the session's background process died with the call that started the session")
	}
	c := exec.Command(exe, "--session", "keep", "-c", "echo still-here")
	c.Env, c.Dir, c.SysProcAttr = env, dir, nobody
	out, _ := c.Output()
	if got := gjson.Get(string(out), "stdout").String(); got != "still-here\n" {
		t.Fatalf("the session did not survive: %s", out)
	}
}

// TestContainmentKeeperKilledNobody: as nobody, the command (or anyone)
// SIGKILLs the keeper, its parent: the tree, now agentsh's, is killed at
// once, so that agentsh's own death afterwards leaves nothing behind, and
// agentsh still reports the call.
func TestContainmentKeeperKilledNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop to nobody")
	}
	dir, exe := publicDir(t)
	pidfile := filepath.Join(dir, "pids")
	py := interpreter("/usr/bin/python3", "/usr/local/bin/python3")
	pl := interpreter("/usr/bin/perl", "/usr/local/bin/perl")
	cmd := exec.Command(exe, "--timeout", "10m", "--", "sh", "-c", escapeScript, "sh", pidfile, py, pl)
	cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out strings.Builder
	cmd.Stdout = &out
	exited, alive := startWatched(t, cmd)
	ids := awaitReady(t, pidfile, alive)
	keeper := 0
	snap, err := proctree.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snap {
		if argv, err := proctree.Argv(s.PID); err == nil && s.PPID == cmd.Process.Pid && len(argv) > 1 && argv[1] == proctree.KeeperCommand {
			keeper = s.PID
		}
	}
	if keeper == 0 {
		t.Fatal("no keeper among agentsh's children")
	}
	killed := time.Now()
	if err := syscall.Kill(keeper, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitGone(t, ids, killed)
	<-exited
	if got := gjson.Get(out.String(), "signal").String(); got != "SIGKILL" {
		t.Errorf("agentsh reported %s, want the command killed", out.String())
	}
}

// keeperOf returns the pid of agentsh's child that is its keeper (0: none).
func keeperOf(t *testing.T, agentsh int) int {
	t.Helper()
	snap, err := proctree.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snap {
		if argv, err := proctree.Argv(s.PID); err == nil && s.PPID == agentsh && len(argv) > 1 && argv[1] == proctree.KeeperCommand {
			return s.PID
		}
	}
	return 0
}

// TestContainmentKeeperLostBeforeStartNobody: as nobody, the keeper dies
// after it forked the command and before it reported the start (the
// command kills its parent at once, or anyone kills the keeper then).
// agentsh cannot report the command, but what the command started is
// killed all the same: nothing else would kill it once agentsh exits.
// The keeper is held at that step by a fault point (it hangs there)
// while the command gets its tree ready, then killed.
func TestContainmentKeeperLostBeforeStartNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop to nobody")
	}
	dir, exe := publicDir(t)
	pidfile := filepath.Join(dir, "pids")
	py := interpreter("/usr/bin/python3", "/usr/local/bin/python3")
	pl := interpreter("/usr/bin/perl", "/usr/local/bin/perl")
	cmd := exec.Command(exe, "--timeout", "10m", "--", "sh", "-c", escapeScript, "sh", pidfile, py, pl)
	cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir,
		faultpoint.Env+"=keeper.forked=hang")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out strings.Builder
	cmd.Stdout = &out
	exited, alive := startWatched(t, cmd)
	ids := awaitReady(t, pidfile, alive)
	keeper := keeperOf(t, cmd.Process.Pid)
	if keeper == 0 {
		t.Fatal("no keeper among agentsh's children")
	}
	killed := time.Now()
	if err := syscall.Kill(keeper, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	awaitGone(t, ids, killed)
	if got := gjson.Get(out.String(), "status").String(); got != "error" {
		t.Errorf("agentsh reported %s, want a start failure", out.String())
	}
}

// TestContainmentKeeperStoppedNobody: as nobody, the command stops its
// keeper (its $PPID: the same user may signal it), leaves a descendant
// that cleared its environment and left the session, and ends, or runs
// into its --timeout. A stopped keeper reports nothing: agentsh waited
// for it for ever, past any timeout, and a SIGKILL of agentsh meanwhile
// left the tree to a keeper that could not act. agentsh continues its
// stopped helpers: the call ends as it would have, and nothing is left.
func TestContainmentKeeperStoppedNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop to nobody")
	}
	for _, tc := range []struct {
		name, tail, status string
	}{
		{"exits", "", "completed"},
		{"timeout", "; exec sleep 5862", "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, exe := publicDir(t)
			pidfile := filepath.Join(dir, "pids")
			script := `p=$1
env -i /bin/sh -c 'setsid sleep 5861 & echo $! >> "$1"' sh "$p"
kill -STOP $PPID
echo ready >> $p` + tc.tail
			cmd := exec.Command(exe, "--timeout", "2s", "--kill-after", "1s", "--", "sh", "-c", script, "sh", pidfile)
			cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
			cmd.Dir = dir
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			var out strings.Builder
			cmd.Stdout = &out
			exited, alive := startWatched(t, cmd)
			t.Cleanup(func() {
				if k := keeperOf(t, cmd.Process.Pid); k != 0 {
					_ = syscall.Kill(k, syscall.SIGKILL)
				}
				_ = cmd.Process.Kill()
				<-exited
			})
			ids := awaitReady(t, pidfile, alive)
			t.Cleanup(func() {
				for _, id := range ids {
					if id.Alive() {
						_ = syscall.Kill(id.PID, syscall.SIGKILL)
					}
				}
			})
			// The call's own bound is 2 s; this one only keeps a failing
			// test from waiting for ever.
			select {
			case <-exited:
			case <-time.After(60 * time.Second):
				t.Fatal("agentsh still waits for its stopped keeper, a minute past the call's timeout")
			}
			awaitGone(t, ids, time.Now())
			if got := gjson.Get(out.String(), "status").String(); got != tc.status {
				t.Errorf("agentsh reported %s, want status %s", out.String(), tc.status)
			}
		})
	}
}

// TestContainmentKeeperStoppedKilledNobody: as nobody, the command stops
// its keeper (its $PPID) and SIGKILLs agentsh at once, before agentsh can
// continue the keeper (ResumeStops), and leaves a descendant that cleared
// its environment and left the session. The keeper's parent-death signal,
// SIGCONT, continues it when agentsh dies, and it kills what is below it;
// before, it stayed stopped for ever and the descendant ran on.
func TestContainmentKeeperStoppedKilledNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop to nobody")
	}
	for i := 0; i < 3; i++ {
		dir, exe := publicDir(t)
		pidfile := filepath.Join(dir, "pids")
		script := `p=$1
env -i /bin/sh -c 'setsid sleep 5871 & echo $! >> "$1"' sh "$p"
a=$(ps -o ppid= -p $PPID)
echo $PPID >> $p
echo ready >> $p
while [ ! -e "$p.go" ]; do sleep 0.01; done
kill -STOP $PPID; kill -KILL $a
exec sleep 5872`
		cmd := oneShot(exe, dir, "--timeout", "10m", "--", "sh", "-c", script, "sh", pidfile)
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 65534, Gid: 65534}
		exited, alive := startWatched(t, cmd)
		ids := awaitReady(t, pidfile, alive)
		if err := os.WriteFile(pidfile+".go", nil, 0o644); err != nil {
			t.Fatal(err)
		}
		<-exited
		// The descendant, and the keeper, which must not be left stopped.
		awaitGone(t, ids, time.Now())
	}
}

// TestContainmentSessionNobody: as nobody (no cgroup), SIGKILL of a
// session server kills its shell and what the shell started in the
// background, also descendants that cleared their environment and left
// the session: the server runs below a keeper of its own.
func TestContainmentSessionNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop to nobody")
	}
	dir, exe := publicDir(t)
	pidfile := filepath.Join(dir, "pids")
	env := append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	run := func(args ...string) string {
		t.Helper()
		c := exec.Command(exe, args...)
		c.Env, c.Dir = env, dir
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := c.Output()
		if err != nil {
			t.Fatalf("agentsh %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("session", "start", "--name", "s")
	t.Cleanup(func() {
		c := exec.Command(exe, "session", "stop", "s")
		c.Env, c.Dir = env, dir
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		_ = c.Run()
	})
	if err := os.WriteFile(filepath.Join(dir, "tree.sh"), []byte(escapeScript), 0o755); err != nil {
		t.Fatal(err)
	}
	py := interpreter("/usr/bin/python3", "/usr/local/bin/python3")
	pl := interpreter("/usr/bin/perl", "/usr/local/bin/perl")
	run("--session", "s", "-c", fmt.Sprintf("sh ./tree.sh %s '%s' '%s' >/dev/null 2>&1 &", pidfile, py, pl))
	ids := awaitReady(t, pidfile, func() bool { return true })
	// The server is the session-serve process whose parent is its keeper
	// (or the only one, without a keeper).
	snap, err := proctree.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	serves := map[int]bool{}
	for _, s := range snap {
		if argv, err := proctree.Argv(s.PID); err == nil && len(argv) > 2 && argv[1] == "__session-serve" && strings.HasPrefix(argv[2], dir) {
			serves[s.PID] = true
		}
	}
	server := 0
	for _, s := range snap {
		if serves[s.PID] && (serves[s.PPID] || len(serves) == 1) {
			server = s.PID
		}
	}
	if server == 0 {
		t.Fatalf("no session server among %v", serves)
	}
	killed := time.Now()
	if err := syscall.Kill(server, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitGone(t, ids, killed)
}

// TestGroupKillSparesRecycledPID: the command's process group is killed
// only while its leader is an unreaped zombie, whose id no other process
// can get. agentsh is frozen right after the reap; a stranger is then
// given the leader's very pid as the leader of a session of its own (the
// kernel's next-pid knob), and agentsh, thawed, must leave it alone.
func TestGroupKillSparesRecycledPID(t *testing.T) {
	const knob = testkit.NextPIDKnob
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
	exited, _ := startWatched(t, cmd)
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
	stranger := testkit.StrangerAt(t, leader)
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

// TestContainmentLeavesGuardCgroupAsRoot: an unsandboxed root command moves
// a descendant out of the guard's cgroup (root may write any cgroup.procs),
// clears its environment and leaves the session: after a SIGKILL of agentsh
// nothing finds it (no subreaper above it is left, cgroup.kill misses it,
// the token and the session are gone). Open: the cgroup mode needs a keeper
// (a subreaper parent of the command) as the environ mode has; --sandbox
// holds the tree in a PID namespace instead.
func TestContainmentLeavesGuardCgroupAsRoot(t *testing.T) {
	t.Skip("open defect: as root without --sandbox a descendant that leaves the guard's cgroup, its session and the token outlives a SIGKILLed agentsh")
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir, exe := publicDir(t)
	pidfile := filepath.Join(dir, "pids")
	script := `p=$1
env -i /bin/sh -c 'for f in /sys/fs/cgroup/unified/cgroup.procs /sys/fs/cgroup/cgroup.procs; do [ -w $f ] && echo $$ > $f && break; done; echo $$ >> "$1"; exec setsid sleep 7651' sh "$p" &
while [ ! -s $p ]; do sleep 0.01; done
echo ready >> $p
wait`
	cmd := oneShot(exe, dir, "--timeout", "10m", "--", "sh", "-c", script, "sh", pidfile)
	exited, alive := startWatched(t, cmd)
	ids := awaitReady(t, pidfile, alive)
	killAgentsh(t, cmd, exited, ids)
}

// TestContainmentBothKilledSwept: agentsh and its watchdog both SIGKILLed
// (the watchdog stopped first, so it cannot act): nothing removes the
// guard's cgroup, and the tree in it keeps running. The next agentsh's
// guard sweeps it (due: the stamp in its temp dir is removed): the cgroup of
// the dead owner goes and the tree in it dies.
func TestContainmentBothKilledSwept(t *testing.T) {
	dir, exe := publicDir(t)
	pidfile := filepath.Join(dir, "pids")
	env := append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir, "TMPDIR="+dir)
	cmd := exec.Command(exe, "--timeout", "10m", "--", "sh", "-c", treeScript, "sh", pidfile)
	cmd.Env, cmd.Dir = env, dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	exited, alive := startWatched(t, cmd)
	ids := awaitReady(t, pidfile, alive)
	cg := guardCgroupOf(t, ids[0].PID)
	if cg == "" {
		_ = cmd.Process.Kill()
		<-exited
		awaitGone(t, ids, time.Now())
		t.Skip("no guard cgroup here (environ mode)")
	}
	// agentsh is frozen first (it would continue a stopped watchdog,
	// and kill the tree on the watchdog's death), waited for until the
	// whole of it has stopped, then the watchdog and agentsh are killed.
	wd := findWatchdog(t, cmd.Process.Pid)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WUNTRACED, nil)
		if err != syscall.EINTR {
			if err != nil || !ws.Stopped() {
				t.Fatalf("agentsh did not stop: %v %v", ws, err)
			}
			break
		}
	}
	if err := syscall.Kill(wd, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	if _, err := os.Stat(cg); err != nil {
		t.Fatalf("the guard's cgroup went before the sweep: %v", err)
	}
	for _, id := range ids {
		if !id.Alive() {
			t.Fatalf("process %d died with agentsh and its watchdog: nothing left for the sweep", id.PID)
		}
	}

	// The first agentsh swept (its temp dir held no stamp) and stamped;
	// a minute later the next one is due again: the stamp is removed.
	if err := os.Remove(filepath.Join(dir, "agentplane-guard-swept."+strconv.Itoa(os.Getuid()))); err != nil {
		t.Fatal(err)
	}
	next := exec.Command(exe, "--", "true")
	next.Env, next.Dir = env, dir
	if out, err := next.CombinedOutput(); err != nil {
		t.Fatalf("agentsh -- true: %v\n%s", err, out)
	}
	killed := time.Now()
	awaitGone(t, ids, killed)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(cg); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead guard's cgroup %s was not swept", cg)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a generous bound
	}
}

// guardCgroupOf returns the directory of the guard cgroup pid runs in, or
// "" when it runs in none.
func guardCgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		p, ok := strings.CutPrefix(line, "0::")
		if !ok || !strings.HasPrefix(filepath.Base(p), "agentplane-guard-") {
			continue
		}
		for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
			if st, err := os.Stat(filepath.Join(root, p)); err == nil && st.IsDir() {
				return filepath.Join(root, p)
			}
		}
	}
	return ""
}

// startWatched starts cmd and returns a channel closed once it has exited
// (and was reaped), and whether it still runs.
func startWatched(t *testing.T, cmd *exec.Cmd) (<-chan struct{}, func() bool) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	return exited, func() bool {
		select {
		case <-exited:
			return false
		default:
			return true
		}
	}
}

// TestSandboxEndLeavesNothing: a sandboxed call gives its result on the
// helper's report of the command's end, before the helper's own exit (the
// namespaces' teardown); by then nothing the command left in the
// background is alive (setsid, ignoring SIGTERM and SIGHUP, nohup), and the
// guard's cgroup, which the exiting helper may still be in, is removed
// after agentsh exits (by the watchdog).
func TestSandboxEndLeavesNothing(t *testing.T) {
	dir, exe, ws := sandboxWorkspace(t)
	tag := fmt.Sprintf("agentsh-end-%d", time.Now().UnixNano())
	script := `sh -c 'sleep 600; :' ` + tag + ` &
setsid sh -c 'trap "" TERM HUP; sleep 600; :' ` + tag + ` &
nohup sh -c 'sleep 600; :' ` + tag + ` >/dev/null 2>&1 &
(sh -c 'sleep 600; :' ` + tag + ` &) 
exit 3`
	for _, net := range []string{"none", "host"} {
		t.Run("net-"+net, func(t *testing.T) {
			cmd := exec.Command(exe, "--timeout", "10m", "--sandbox", "workspace-write", "--net", net, "--cwd", ws, "--", "sh", "-c", script)
			cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
			out, err := cmd.Output()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 3 || gjson.GetBytes(out, "exit_code").Int() != 3 {
				t.Fatalf("agentsh: %v %s", err, out)
			}
			agentsh := cmd.Process.Pid
			snap, err := proctree.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			var helpers []int
			for _, s := range snap {
				argv, _ := proctree.Argv(s.PID)
				if !strings.Contains(strings.Join(argv, "\x00"), tag) {
					continue
				}
				// The sandbox helper (its argv holds the command) reports
				// the command's end before its own exit is done: it may
				// still be exiting, but must be gone soon.
				if len(argv) > 1 && (argv[1] == "__sandbox-exec" || filepath.Base(argv[0]) == "agentplane-sandbox") {
					helpers = append(helpers, s.PID)
					continue
				}
				t.Errorf("process %d (%s, state %c) of the command outlived the result", s.PID, strings.Join(argv, " "), s.State)
				_ = syscall.Kill(s.PID, syscall.SIGKILL)
			}
			for _, pid := range helpers {
				deadline := time.Now().Add(30 * time.Second)
				for {
					b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
					if err != nil || !strings.Contains(string(b), tag) {
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("the sandbox helper %d was still there 30 s after the result", pid)
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			// The guard's cgroup, named after agentsh, goes once the
			// helper's exit is done.
			own, _ := os.ReadFile("/proc/self/cgroup")
			var parents []string
			for _, line := range strings.Split(string(own), "\n") {
				if p, ok := strings.CutPrefix(line, "0::"); ok {
					parents = append(parents, filepath.Join("/sys/fs/cgroup", p), filepath.Join("/sys/fs/cgroup/unified", p))
				}
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				var left []string
				for _, p := range parents {
					m, _ := filepath.Glob(filepath.Join(p, fmt.Sprintf("agentplane-guard-%d.*", agentsh)))
					left = append(left, m...)
				}
				if len(left) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the guard's cgroup was never removed: %v", left)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// traceScript (python3) stops, through ptrace, every ancestor that is an
// agentsh it may trace (PTRACE_SEIZE, then PTRACE_INTERRUPT: a stop that
// the tracee's parent is not told of, and that a SIGCONT does not end),
// says on stderr how many it stopped, appends its pid to the file argv[1]
// and becomes "sleep 4611", the tracer that holds them stopped. Started
// with env -i and setsid, it escapes the guard's token and the command's
// session: only a subreaper's kill finds it.
const traceScript = `import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
def parent(p):
    s = open("/proc/%d/stat" % p).read()
    return int(s[s.rindex(")") + 2:].split()[1])
n, p = 0, os.getppid()
while p > 1:
    a = open("/proc/%d/cmdline" % p, "rb").read().split(b"\0")
    if os.path.basename(a[0]) == b"agentsh" and libc.ptrace(0x4206, p, None, None) == 0:
        libc.ptrace(0x4207, p, None, None)
        os.waitpid(p, 0x40000000)
        n += 1
    p = parent(p)
sys.stderr.write("traced %d\n" % n)
with open(sys.argv[1], "a") as f:
    f.write("%d\n" % os.getpid())
os.execve("/bin/sleep", ["sleep", "4611"], {})
`

// TestContainmentHelpersTracedNobody: as nobody, the command traces the
// helpers of the same user that hold its tree, the keeper above a
// one-shot command or above a session server, and stops them (ptrace),
// from a descendant that left the session and cleared its environment.
// A traced stop is not a stop agentsh sees and continues (ResumeStops),
// and a stopped keeper kills nothing when agentsh or the server is
// SIGKILLed: the tracer ran on. The one-shot keeper (and the watchdog) is
// undumpable, as agentsh is (proctree.Seal), so no process of its user may
// trace it; the session's case is open (see the skip).
func TestContainmentHelpersTracedNobody(t *testing.T) {
	py := rootAndPython(t, "needs root to drop to nobody")
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	script := `p=$1
env -i setsid "$2" "$3" "$p" 2>"$p.err" &
while [ ! -s "$p" ]; do sleep 0.01; done
echo $$ >> $p
echo ready >> $p
wait`
	for _, session := range []bool{false, true} {
		name := "oneshot"
		if session {
			name = "session"
		}
		t.Run(name, func(t *testing.T) {
			if session {
				// The session server is its keeper's child: traced, its
				// SIGKILL leaves a zombie only the tracer may reap, and the
				// keeper's wait for it never returns; the keeper itself may
				// be traced. Neither can be sealed as the one-shot keeper is:
				// a detached server is told from a forged one by its
				// executable (reexec.DetachedServers), which /proc shows of
				// a dumpable process only, and a sealed keeper or server was
				// killed as a stranger by the keeper of the call that
				// started the session.
				t.Skip("open defect: as nobody, a session's command traces its server and the server's keeper, and outlives the server's SIGKILL")
			}
			dir, exe := publicDir(t)
			pidfile := filepath.Join(dir, "pids")
			if err := os.WriteFile(filepath.Join(dir, "trace.py"), []byte(traceScript), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "tree.sh"), []byte(script), 0o644); err != nil {
				t.Fatal(err)
			}
			env := append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
			command := func(args ...string) *exec.Cmd {
				c := exec.Command(exe, args...)
				c.Env, c.Dir = env, dir
				c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: nobody}
				return c
			}
			var ids []proctree.ID
			var kill func()
			if session {
				out, err := command("session", "start").Output()
				if err != nil {
					t.Fatalf("agentsh session start: %v\n%s", err, out)
				}
				handle := gjson.GetBytes(out, "session").String()
				t.Cleanup(func() { _ = command("session", "stop", handle).Run() })
				if out, err := command("--session", handle, "-c", "sh ./tree.sh "+pidfile+" "+py+" ./trace.py >/dev/null 2>&1 &").Output(); err != nil {
					t.Fatalf("agentsh --session: %v\n%s", err, out)
				}
				ids = awaitReady(t, pidfile, func() bool { return true })
				server := sessionServer(t, dir)
				kill = func() { _ = syscall.Kill(server, syscall.SIGKILL) }
			} else {
				cmd := command("--timeout", "10m", "--", "sh", "./tree.sh", pidfile, py, "./trace.py")
				exited, alive := startWatched(t, cmd)
				ids = awaitReady(t, pidfile, alive)
				kill = func() {
					_ = cmd.Process.Kill()
					<-exited
				}
			}
			b, _ := os.ReadFile(pidfile + ".err")
			t.Logf("the tracer: %s", strings.TrimSpace(string(b)))
			killed := time.Now()
			kill()
			awaitGone(t, ids, killed)
		})
	}
}

// TestContainmentWatchdogLimitedAsRoot: a root command lowers the resource
// limits of the watchdog (prlimit(2) needs no more than root, or the same
// user, and no ptrace access to the undumpable front): no descriptor, no
// address space. The front then could not start the shell watchdog (its
// loader opens the C library) once agentsh was SIGKILLed, and the cgroup
// was never killed. The front writes cgroup.kill through a descriptor
// agentsh opened for it before the command existed (KillFD), which needs
// no resource, and restores the limits, where it may, before it starts
// the shell.
func TestContainmentWatchdogLimitedAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir, exe := publicDir(t)
	pidfile := filepath.Join(dir, "pids")
	cmd := oneShot(exe, dir, "--timeout", "10m", "--", "sh", "-c", treeScript, "sh", pidfile)
	exited, alive := startWatched(t, cmd)
	ids := awaitReady(t, pidfile, alive)
	if guardCgroupOf(t, ids[0].PID) == "" {
		_ = cmd.Process.Kill()
		<-exited
		awaitGone(t, ids, time.Now())
		t.Skip("no guard cgroup here (environ mode)")
	}
	// What the command, as root, may do to the watchdog: the test does it
	// for it, to the process it finds the same way.
	wd := findWatchdog(t, cmd.Process.Pid)
	if err := zeroLimits(wd); err != nil {
		t.Fatalf("the watchdog's limits: %v", err)
	}
	killAgentsh(t, cmd, exited, ids)
}

// TestContainmentWatchdogStoppedAsRoot: the command (as root, or as the
// user) stops the watchdog and SIGKILLs agentsh at once, before agentsh
// can continue the watchdog (ResumeStops): the watchdog's parent-death
// signal, SIGCONT, continues it when agentsh dies (a stop still pending is
// dropped), and it kills the tree. Before, it stayed stopped for ever, or
// died of the SIGHUP the kernel sends a stopped process group orphaned by
// agentsh's exit, and the tree ran on.
func TestContainmentWatchdogStoppedAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for i := 0; i < 5; i++ {
		dir, exe := publicDir(t)
		pidfile := filepath.Join(dir, "pids")
		cmd := oneShot(exe, dir, "--timeout", "10m", "--", "sh", "-c", treeScript, "sh", pidfile)
		exited, alive := startWatched(t, cmd)
		ids := awaitReady(t, pidfile, alive)
		// What the command may do to the watchdog, done by the test for it
		// to the process it finds the same way.
		wd := findWatchdog(t, cmd.Process.Pid)
		if err := syscall.Kill(wd, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		wdID, err := proctree.Identify(wd)
		if err != nil {
			t.Fatal(err)
		}
		killAgentsh(t, cmd, exited, ids)
		// Another call's sweep of dead owners' cgroups (a minute at most,
		// in a suite that runs many) may have killed the tree: the
		// watchdog itself must not be left stopped.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = proctree.Wait(ctx, wdID)
		cancel()
		if err != nil {
			st, _ := os.ReadFile("/proc/" + strconv.Itoa(wd) + "/stat")
			_ = syscall.Kill(wd, syscall.SIGKILL)
			t.Fatalf("the watchdog stopped before agentsh's SIGKILL is still there: %s", st)
		}
	}
}

// TestContainmentKeeperLimitedNobody: as nobody, the command lowers the
// descriptor limit of its keeper, its $PPID (prlimit(2) needs only the
// same user, no ptrace access: the keeper is undumpable and still
// reachable), to none, hard limit included, and leaves a descendant that
// cleared its environment and left the session. When agentsh is
// SIGKILLed the keeper cannot open /proc to find its descendants, and
// the descendant runs on. Open: a process without CAP_SYS_RESOURCE cannot
// raise its hard limit again, and finding the tree takes descriptors.
func TestContainmentKeeperLimitedNobody(t *testing.T) {
	t.Skip("open defect: as nobody a command that takes its keeper's descriptors away (prlimit --nofile=0:0) outlives a SIGKILLed agentsh")
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop to nobody")
	}
	limit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("no prlimit(1)")
	}
	dir, exe := publicDir(t)
	pidfile := filepath.Join(dir, "pids")
	script := `p=$1
env -i /bin/sh -c 'setsid sleep 4621 & echo $! >> "$1"' sh "$p"
"$2" --pid $PPID --nofile=0:0 || exit 1
echo $$ >> $p
echo ready >> $p
exec sleep 4622`
	cmd := exec.Command(exe, "--timeout", "10m", "--", "sh", "-c", script, "sh", pidfile, limit)
	cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	exited, alive := startWatched(t, cmd)
	ids := awaitReady(t, pidfile, alive)
	killAgentsh(t, cmd, exited, ids)
}

// TestGuardFailedLeavesNoCgroup: when the watchdog cannot start (too few
// descriptors), a sandboxed call whose helper agentsh started ahead in the
// guard's cgroup runs contained by that helper, and the cgroup, which the
// guard could not remove with the helper in it, is removed once the run is
// over (red team 7, F3): at every descriptor limit around the one where
// the watchdog's start fails, no guard cgroup of the call is left.
func TestGuardFailedLeavesNoCgroup(t *testing.T) {
	requireSandbox(t)
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	own := ""
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = p
		}
	}
	var parent string
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st syscall.Statfs_t
		if syscall.Statfs(root, &st) == nil && st.Type == 0x63677270 { // CGROUP2_SUPER_MAGIC
			parent = filepath.Join(root, own)
		}
	}
	if parent == "" {
		t.Skip("no cgroup v2")
	}
	dir, exe := publicDir(t)
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	for n := 14; n <= 32; n++ {
		cmd := exec.Command("sh", "-c", `ulimit -n "$1" && exec "$2" --sandbox workspace-write --net none --cwd "$3" -- true`, "sh", strconv.Itoa(n), exe, ws)
		cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
		out, _ := cmd.Output()
		pid := cmd.Process.Pid // sh execs agentsh
		// A run that ended well hands the cgroup's removal to its
		// watchdog, which does it once the helper's exit is done.
		deadline := time.Now().Add(20 * time.Second)
		for {
			left, _ := filepath.Glob(filepath.Join(parent, "agentplane-guard-"+strconv.Itoa(pid)+".*"))
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("nofile %d: the call left its guard cgroup %v; it printed %s", n, left, out)
			}
			time.Sleep(10 * time.Millisecond) // polling the cgroup filesystem for the removal
		}
	}
}

// TestSandboxHelperDiedBeforeStart: a helper that dies before it starts
// the command (its Go runtime aborts for want of a thread, the OOM killer)
// exits with a status of its own, which was reported as the command's
// ("completed", exit 2; red team 7, F4). Here the helper's program beside
// agentsh is one that exits 2 at once: the call fails with
// sandbox_failed, its helper started ahead or not, and never says the
// command completed.
func TestSandboxHelperDiedBeforeStart(t *testing.T) {
	requireSandbox(t)
	dir, exe := publicDir(t)
	if err := os.WriteFile(filepath.Join(dir, sandbox.HelperProgram), []byte("#!/bin/sh\nexit 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	cfg := filepath.Join(dir, "agentplane")
	for _, d := range []string{ws, cfg} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		args   []string
		config string
		codes  []string
	}{
		// The configuration's sandbox: the helper starts with its spec
		// written, and dies.
		{"config", []string{"--cwd", ws, "--", "true"}, "sandbox = \"workspace-write\"\n", []string{result.CodeSandboxFailed}},
		// Started ahead: it may be gone before its spec is sent.
		{"ahead", []string{"--sandbox", "workspace-write", "--cwd", ws, "--", "true"}, "", []string{result.CodeSandboxFailed, result.CodeStartFailed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(cfg, "config.toml"), []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 10; i++ {
				cmd := exec.Command(exe, tc.args...)
				cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
				out, _ := cmd.Output()
				if code := gjson.GetBytes(out, "error.code").String(); !slices.Contains(tc.codes, code) || gjson.GetBytes(out, "status").String() == "completed" {
					t.Fatalf("a helper that exits 2 before the command: %s, want an error of %v", out, tc.codes)
				}
			}
		})
	}
}

// TestSandboxCommandKillsHelper: a command that crashes its helper (PID 1
// of its namespace: SIGSEGV ends the Go runtime) has run, however soon it
// does it: the call is never reported as one whose helper died before the
// command started (red team 8, F5: the helper said it had started the
// command only after the fork, which the command could outrun).
func TestSandboxCommandKillsHelper(t *testing.T) {
	dir, exe, ws := sandboxWorkspace(t)
	for i := 0; i < 30; i++ {
		cmd := exec.Command(exe, "--sandbox", "workspace-write", "--cwd", ws, "--", "sh", "-c", "kill -SEGV 1; echo ran >> ran.log")
		cmd.Env = append(os.Environ(), "AGENTSH_TEST_MAIN=1", "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
		out, _ := cmd.Output()
		if gjson.GetBytes(out, "error.code").String() == result.CodeSandboxFailed {
			t.Fatalf("run %d: a command that ran is reported as not started: %s", i, out)
		}
	}
}
