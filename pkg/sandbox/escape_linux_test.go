package sandbox

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/run"
	"github.com/agentplane/agentplane/pkg/sandbox/confine"
)

// The escape suite: one or more attacks for each class of escape a red team
// found (and the contract forbids), each run against the real helper, each
// with a check that the attack would have worked without the layer that
// stops it where that can be shown. docs/sandbox.md says which layer stops
// which attack.

// attackCommand is a hidden mode of the test binary that makes the raw
// syscalls the shell cannot: it prints "<name>: <errno or ok>".
const attackCommand = "__attack"

func attack(args []string) int {
	res := func(name string, err error) {
		if err == nil {
			fmt.Printf("%s: ok\n", name)
			return
		}
		var en syscall.Errno
		if errors.As(err, &en) {
			fmt.Printf("%s: %s\n", name, unix.ErrnoName(en))
			return
		}
		fmt.Printf("%s: %v\n", name, err)
	}
	switch args[0] {
	case "unix": // connect to a pathname socket
		c, err := net.DialTimeout("unix", args[1], 2*time.Second)
		if err == nil {
			c.Close()
		}
		var op *net.OpError
		if errors.As(err, &op) {
			err = op.Err
			var se *os.SyscallError
			if errors.As(err, &se) {
				err = se.Err
			}
		}
		res("unix", err)
	case "vsock":
		fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
		if err == nil {
			unix.Close(fd)
		}
		res("vsock", err)
	case "io_uring":
		var params [120]byte
		_, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafePointer(&params[0])), 0)
		res("io_uring", errnoErr(e))
	case "keyctl":
		_, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, ^uintptr(3), 0) // KEY_SPEC_USER_KEYRING (-4)
		res("keyctl", errnoErr(e))
	case "prlimit": // prlimit on a pid given by number
		pid, _ := strconv.Atoi(args[1])
		var old unix.Rlimit
		res("prlimit", unix.Prlimit(pid, unix.RLIMIT_FSIZE, nil, &old))
	case "prlimit-self":
		var old unix.Rlimit
		res("prlimit-self", unix.Prlimit(0, unix.RLIMIT_FSIZE, nil, &old))
	case "kill":
		pid, _ := strconv.Atoi(args[1])
		res("kill", unix.Kill(pid, 0))
	case "readfd": // read every inherited descriptor above stderr
		for fd := 3; fd < 64; fd++ {
			b := make([]byte, 64)
			if n, err := unix.Pread(fd, b, 0); err == nil && n > 0 {
				fmt.Printf("fd %d: %q\n", fd, b[:n])
			}
		}
		fmt.Println("readfd: done")
	case "setuid-bit":
		res("chmod-setuid", unix.Chmod(args[1], 0o4755))
		res("chmod-setgid", unix.Chmod(args[1], 0o2755))
		fd, err := unix.Open(args[1]+".new", unix.O_CREAT|unix.O_WRONLY, 0o4755)
		if err == nil {
			unix.Close(fd)
		}
		res("open-setuid", err)
		res("chmod-plain", unix.Chmod(args[1], 0o755))
	case "shm":
		id, _ := strconv.Atoi(args[1])
		_, err := unix.SysvShmAttach(id, 0, unix.SHM_RDONLY)
		res("shm", err)
	case "helper": // reach PID 1, the helper (outside the command's filters, root's capabilities on its other threads)
		pidfd, err := unix.PidfdOpen(1, 0)
		if err != nil {
			res("pidfd_open", err)
		} else {
			getfd := error(unix.EBADF)
			for fd := 3; fd < 64; fd++ {
				nfd, err := unix.PidfdGetfd(pidfd, fd, 0)
				if err == nil {
					unix.Close(nfd)
					getfd = nil
					break
				}
				if !errors.Is(err, unix.EBADF) {
					getfd = err
				}
			}
			res("getfd", getfd)
		}
		fd, err := unix.Open("/proc/1/mem", unix.O_RDWR, 0)
		if err == nil {
			unix.Close(fd)
		}
		res("mem", err)
		res("seize", unix.PtraceSeize(1))
	case "netlink": // set lo down (CAP_NET_ADMIN), and dump the links (no capability), by an addressed sendto
		ask := func(typ, flags uint16, change uint32) error {
			fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			msg := make([]byte, unix.SizeofNlMsghdr+unix.SizeofIfInfomsg)
			binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
			binary.NativeEndian.PutUint16(msg[4:], typ)
			binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags)
			binary.NativeEndian.PutUint32(msg[8:], 1)
			ifi := msg[unix.SizeofNlMsghdr:]
			ifi[0] = unix.AF_UNSPEC
			if typ == unix.RTM_NEWLINK {
				binary.NativeEndian.PutUint32(ifi[4:], 1)       // lo
				binary.NativeEndian.PutUint32(ifi[12:], change) // IFF_UP changes, to off
			}
			if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
				return err
			}
			buf := make([]byte, 64<<10)
			for {
				n, _, err := unix.Recvfrom(fd, buf, 0)
				if err != nil {
					return err
				}
				msgs, err := syscall.ParseNetlinkMessage(buf[:n])
				if err != nil {
					return err
				}
				for _, m := range msgs {
					switch m.Header.Type {
					case unix.NLMSG_DONE:
						return nil
					case unix.NLMSG_ERROR:
						if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
							return syscall.Errno(-e)
						}
						return nil
					}
				}
			}
		}
		res("netlink-admin", ask(unix.RTM_NEWLINK, 0, unix.IFF_UP))
		res("netlink-dump", ask(unix.RTM_GETLINK, unix.NLM_F_DUMP, 0))
	case "passcred": // claim pid 1 and root in SCM_CREDENTIALS; what a plain send carries
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			res("socketpair", err)
			return 1
		}
		_ = unix.SetsockoptInt(fds[1], unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
		recv := func() string {
			buf, oob := make([]byte, 16), make([]byte, 128)
			_, oobn, _, _, err := unix.Recvmsg(fds[1], buf, oob, 0)
			if err != nil {
				return err.Error()
			}
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for _, m := range msgs {
				if uc, err := unix.ParseUnixCredentials(&m); err == nil {
					return fmt.Sprintf("pid=%d uid=%d gid=%d", uc.Pid, uc.Uid, uc.Gid)
				}
			}
			return "none"
		}
		forged := unix.UnixCredentials(&unix.Ucred{Pid: 1, Uid: 0, Gid: 0})
		if err := unix.Sendmsg(fds[0], []byte("x"), forged, nil, 0); err != nil {
			res("forged", err)
		} else {
			fmt.Printf("forged: sent, peer saw %s\n", recv())
		}
		if err := unix.Sendmsg(fds[0], []byte("y"), nil, nil, 0); err != nil {
			res("plain", err)
		} else {
			fmt.Printf("plain: peer saw %s\n", recv())
		}
		fmt.Printf("self: pid=%d uid=%d gid=%d\n", os.Getpid(), os.Getuid(), os.Getgid())
	case "endreport": // forge the helper's end report, reach its socket
		for fd := 3; fd < 64; fd++ {
			_, _ = unix.Write(fd, []byte("end 0\n"))
		}
		// (Root may list the numbers in /proc/1/fd, which says nothing.)
		link := error(unix.ENOENT)
		for fd := 0; fd < 64; fd++ {
			_, err := os.Readlink("/proc/1/fd/" + strconv.Itoa(fd))
			if err == nil {
				link = nil
				break
			}
			if !errors.Is(err, unix.ENOENT) {
				link = err
			}
		}
		res("procfd-link", link)
		res("procfd", forgeEach(unix.ENOENT, func(fd int) (int, error) {
			return unix.Open("/proc/1/fd/"+strconv.Itoa(fd), unix.O_WRONLY, 0)
		}))
		if pidfd, err := unix.PidfdOpen(1, 0); err == nil {
			res("getfd", forgeEach(unix.EBADF, func(fd int) (int, error) { return unix.PidfdGetfd(pidfd, fd, 0) }))
		}
		return 7
	default:
		fmt.Println("unknown attack", args[0])
		return 2
	}
	return 0
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func requireSandbox(t *testing.T) {
	t.Helper()
	requireLandlock(t)
	c := Probe()
	if !c.MountNS || !c.PidNS || !(c.Root || c.UserNS) || !c.MountAPI {
		t.Skip("no namespaces or mount API for this user")
	}
}

func wantLines(t *testing.T, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("missing %q in output:\n%s", w, got)
		}
	}
}

// Class 5: control files inside a writable root stay read-only, secrets
// hidden; ordinary writes beside them work.
func TestEscapeControlFiles(t *testing.T) {
	requireSandbox(t)
	_, ws, _ := dirs(t)
	stateDir := filepath.Join(ws, "state")
	for _, d := range []string{"jobs/j1", "sessions/s1", "cache"} {
		if err := os.MkdirAll(filepath.Join(stateDir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.WriteFile(filepath.Join(stateDir, "jobs/j1/spec.json"), []byte(`{"sandbox":"read-only"}`), 0o600))
	must(t, os.WriteFile(filepath.Join(stateDir, "secret.key"), []byte("SECRETKEY"), 0o600))
	must(t, os.WriteFile(filepath.Join(stateDir, "audit.log"), []byte("line\n"), 0o600))
	cfgDir := filepath.Join(ws, "config", "agentplane")
	must(t, os.MkdirAll(filepath.Join(ws, ".git"), 0o755))
	must(t, os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("[core]\n"), 0o644))
	p := Policy{Mode: ModeWorkspaceWrite, Workspace: ws,
		Protect: []string{stateDir, cfgDir}, Hide: []string{filepath.Join(stateDir, "secret.key"), filepath.Join(stateDir, "sessions")},
		CacheDir: filepath.Join(stateDir, "cache")}
	res, prep := sandboxed(t, p, ws, "sh", "-c", `
try() { if (eval "$1") 2>/dev/null; then echo "$2: allowed"; else echo "$2: denied"; fi; }
try 'echo "{}" > state/jobs/j1/spec.json' spec
try 'echo x >> state/audit.log' audit
try 'mkdir state/jobs/j2' newjob
try 'echo x > state/secret.key' key-write
echo "key=[$(cat state/secret.key)]"
echo "sessions=[$(ls -A state/sessions)]"
try 'echo x > .git/hooks/pre-commit' hook
try 'echo "[core] hooksPath=/tmp" >> .git/config' gitconfig
try 'mkdir -p config/agentplane && echo "sandbox=\"none\"" > config/agentplane/config.toml' config
try 'echo x > ordinary' ordinary
try 'mkdir -p "$GOCACHE" && echo x > "$GOCACHE/probe"' cache
`)
	o := out(res)
	// The key's cover is /dev/null: a write "succeeds" and goes nowhere.
	wantLines(t, o, "spec: denied", "audit: denied", "newjob: denied", "key=[]", "sessions=[]",
		"hook: denied", "gitconfig: denied", "config: denied", "ordinary: allowed", "cache: allowed")
	if strings.Contains(o, "SECRETKEY") {
		t.Fatal("secret key leaked")
	}
	if b, _ := os.ReadFile(filepath.Join(stateDir, "secret.key")); string(b) != "SECRETKEY" {
		t.Errorf("secret key changed: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(stateDir, "jobs/j1/spec.json")); string(b) != `{"sandbox":"read-only"}` {
		t.Errorf("spec changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(cfgDir, "config.toml")); err == nil {
		t.Error("a config file was planted")
	}
	if _, ok := prep.Report["protected"]; !ok {
		t.Errorf("report has no protected paths: %v", prep.Report)
	}
}

// Class 6: as root, metadata changes outside the writable roots fail, and
// no set-id bit can be planted inside them.
func TestEscapeMetadata(t *testing.T) {
	requireRoot(t)
	requireSandbox(t)
	_, ws, outside := dirs(t)
	target := filepath.Join(outside, "victim")
	must(t, os.WriteFile(target, []byte("x"), 0o644))
	mine := filepath.Join(ws, "prog")
	must(t, os.WriteFile(mine, []byte("#!/bin/sh\n"), 0o755))
	res, _ := sandboxed(t, Policy{Mode: ModeWorkspaceWrite, Workspace: ws}, ws, "sh", "-c", `
try() { if (eval "$1") 2>/dev/null; then echo "$2: allowed"; else echo "$2: denied"; fi; }
try 'chmod 4755 `+target+`' chmod-outside
try 'chown 65534 `+target+`' chown-outside
try 'touch -d 2001-01-01 `+target+`' utimes-outside
try 'ln `+target+` hardlink' link-outside
try 'mv `+target+` stolen' rename-outside
try 'chmod 700 prog' chmod-inside
`+self(t)+` `+attackCommand+` setuid-bit `+mine)
	o := out(res)
	wantLines(t, o, "chmod-outside: denied", "chown-outside: denied", "utimes-outside: denied", "link-outside: denied",
		"rename-outside: denied", "chmod-inside: allowed", "chmod-setuid: EPERM", "chmod-setgid: EPERM", "open-setuid: EPERM", "chmod-plain: ok")
	st, err := os.Stat(target)
	if err != nil || st.Mode().Perm() != 0o644 || st.ModTime().Year() == 2001 || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("victim changed: %v %v", st.Mode(), err)
	}
	if st, _ := os.Stat(mine); st.Mode()&os.ModeSetuid != 0 {
		t.Error("setuid bit planted")
	}
	if err := unix.Setxattr(target, "user.probe", []byte("1"), 0); err == nil {
		// The filesystem has user xattrs: the sandbox must refuse them outside.
		_ = unix.Removexattr(target, "user.probe")
		res, _ := sandboxed(t, Policy{Mode: ModeWorkspaceWrite, Workspace: ws}, ws, "sh", "-c",
			`if command -v setfattr >/dev/null; then setfattr -n user.x -v 1 `+target+` 2>/dev/null && echo setxattr: allowed || echo setxattr: denied; else echo setxattr: denied; fi`)
		wantLines(t, out(res), "setxattr: denied")
		if _, err := unix.Getxattr(target, "user.x", nil); err == nil {
			t.Error("xattr set outside")
		}
	}
}

// Class 7: --deny-read holds against /proc/PID/root of a process outside,
// raw block devices and inherited descriptors, with and without --sandbox.
func TestEscapeDenyReadRoutes(t *testing.T) {
	requireSandbox(t)
	_, ws, outside := dirs(t)
	secret := filepath.Join(outside, "secret")
	must(t, os.WriteFile(secret, []byte("TOPSECRET"), 0o600))
	// A process outside, as a concurrent unsandboxed call would be.
	other := exec.Command("sleep", "600")
	must(t, other.Start())
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	// A descriptor the caller leaves open without close-on-exec.
	fd, err := unix.Open(secret, unix.O_RDONLY, 0)
	must(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	for _, mode := range []string{ModeNone, ModeWorkspaceWrite} {
		t.Run(mode, func(t *testing.T) {
			p := Policy{Mode: mode, Workspace: ws, DenyRead: []string{secret}}
			res, _ := sandboxed(t, p, ws, "sh", "-c", `
echo "direct=[$(cat `+secret+` 2>/dev/null)]"
echo "proc=[$(cat /proc/`+strconv.Itoa(other.Process.Pid)+`/root`+secret+` 2>/dev/null)]"
echo "blockdevs=[$(find /dev -type b 2>/dev/null)]"
echo "procs=[$(ls /proc | grep -c '^[0-9]')]"
`+self(t)+` `+attackCommand+` readfd`)
			o := out(res)
			wantLines(t, o, "direct=[]", "proc=[]", "blockdevs=[]", "readfd: done")
			if strings.Contains(o, "TOPSECRET") {
				t.Fatalf("secret read: %s", o)
			}
		})
	}
	// Control: without the sandbox the inherited descriptor and /proc route work.
	cmd := exec.Command("sh", "-c", "cat /proc/"+strconv.Itoa(other.Process.Pid)+"/root"+secret+"; cat /proc/self/fd/"+strconv.Itoa(fd))
	b, _ := cmd.Output()
	if !strings.Contains(string(b), "TOPSECRET") {
		t.Fatalf("control run could not read the secret: %q", b)
	}
}

// Class 8: processes and IPC outside are out of reach.
func TestEscapeProcessesOutside(t *testing.T) {
	requireSandbox(t)
	_, ws, _ := dirs(t)
	other := exec.Command("sleep", "600")
	must(t, other.Start())
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	pid := strconv.Itoa(other.Process.Pid)
	shm, err := unix.SysvShmGet(unix.IPC_PRIVATE, 4096, unix.IPC_CREAT|0o666)
	must(t, err)
	t.Cleanup(func() { _, _ = unix.SysvShmCtl(shm, unix.IPC_RMID, nil) })
	for _, mode := range []string{ModeNone, ModeWorkspaceWrite} {
		t.Run(mode, func(t *testing.T) {
			p := Policy{Mode: mode, Workspace: ws, Nofile: 256}
			res, _ := sandboxed(t, p, ws, self(t), attackCommand, "prlimit", pid)
			res2, _ := sandboxed(t, p, ws, "sh", "-c", self(t)+" "+attackCommand+" kill "+pid+"; "+
				self(t)+" "+attackCommand+" shm "+strconv.Itoa(shm)+"; "+self(t)+" "+attackCommand+" prlimit-self; "+
				"echo ipcs=[$(ipcs -m | grep -c '^0x')]")
			o := out(res) + out(res2)
			// prlimit is refused twice over: the pid does not exist in the
			// namespace (ESRCH) and the filter refuses other pids (EPERM).
			wantLines(t, o, "kill: ESRCH", "prlimit-self: ok", "ipcs=[0]")
			if strings.Contains(o, "shm: ok") || strings.Contains(o, "prlimit: ok") {
				t.Errorf("host shared memory attached: %s", o)
			}
		})
	}
	if err := unix.Kill(other.Process.Pid, 0); err != nil {
		t.Fatalf("the outside process died: %v", err)
	}
}

// Class 9: --net none (and --net proxy) reaches no host daemon on a
// pathname Unix socket, and no vsock, io_uring or key ring.
func TestEscapeNetNoneUnixSockets(t *testing.T) {
	requireSandbox(t)
	_, ws, outside := dirs(t)
	sock := filepath.Join(outside, "daemon.sock")
	ln, err := net.Listen("unix", sock)
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// --net proxy is the same namespace with one door, the proxy.
	for _, p := range []Policy{{Net: NetNone}, {Net: NetProxy, AllowHosts: []string{"127.0.0.1:1"}}} {
		p.Mode, p.Workspace = ModeWorkspaceWrite, ws
		res, prep := sandboxed(t, p, ws, "sh", "-c",
			self(t)+" "+attackCommand+" unix "+sock+"; "+self(t)+" "+attackCommand+" vsock; "+
				self(t)+" "+attackCommand+" io_uring; "+self(t)+" "+attackCommand+" keyctl")
		o := out(res)
		if strings.Contains(o, "unix: ok") {
			t.Errorf("host Unix socket reached under --net %s: %s", p.Net, o)
		}
		wantLines(t, o, "vsock: EAFNOSUPPORT", "io_uring: ENOSYS", "keyctl: ENOSYS")
		if n, _ := prep.Report["hidden_unix_sockets"].(int); n < 1 {
			t.Errorf("--net %s: report: %v", p.Net, prep.Report["hidden_unix_sockets"])
		}
	}
	// Control: with the host network the same socket answers.
	res, _ := sandboxed(t, Policy{Mode: ModeWorkspaceWrite, Workspace: ws}, ws, self(t), attackCommand, "unix", sock)
	wantLines(t, out(res), "unix: ok")
}

// Class 10: limits without --sandbox cannot be left by moving out of the
// cgroup; a limit that was hit is reported although the command exits 0.
func TestEscapeLimitsCgroup(t *testing.T) {
	requireRoot(t)
	if Probe().CgroupV1Pids == "" {
		t.Skip("no cgroup v1 pids controller")
	}
	res, prep := sandboxed(t, Policy{Pids: 16}, "", "sh", "-c", `
for f in /sys/fs/cgroup/pids/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs /sys/fs/cgroup/cgroup.procs; do
  [ -e "$f" ] || continue
  if (echo $$ > "$f") 2>/dev/null; then echo "escape $f: allowed"; else echo "escape $f: denied"; fi
done
echo "cgroup=[$(grep pids /proc/self/cgroup)]"
sh -c 'i=0; while [ $i -lt 40 ]; do sleep 5 & i=$((i+1)); done' 2>/dev/null
exit 0`)
	o := out(res)
	if strings.Contains(o, ": allowed") {
		t.Fatalf("left the cgroup: %s", o)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s %s", res.ExitCode, o, text(res.Stderr))
	}
	hit := prep.LimitsHit()
	if len(hit) != 1 || hit[0] != result.CodePidsLimit {
		t.Errorf("limits hit %v, want [pids_limit] (output %s)", hit, o)
	}
}

// The tree cannot outlive its runner: SIGKILL of the helper (as when the
// runner dies: the helper has a parent-death signal) kills every process
// of the namespace, setsid and double forks included.
func TestEscapeOutliveRunner(t *testing.T) {
	requireSandbox(t)
	_, ws, _ := dirs(t)
	prep, err := Prepare(Policy{Mode: ModeWorkspaceWrite, Workspace: ws}, self(t))
	must(t, err)
	t.Cleanup(prep.Cleanup)
	cmd := exec.Command(self(t))
	cmd.Args = prep.Argv([]string{"sh", "-c", "setsid sh -c 'sleep 600 & sleep 600' & (sleep 600 &) ; echo started; exec sleep 600"})
	launch(t, prep, cmd)
	cmd.Env = append(os.Environ(), prep.Env...)
	cmd.Dir = ws
	cmd.SysProcAttr = prep.SysProcAttr
	pipe, _ := cmd.StdoutPipe()
	must(t, cmd.Start())
	buf := make([]byte, 8)
	if _, err := pipe.Read(buf); err != nil {
		t.Fatal(err)
	}
	// Wait until the sleeps exist: four of them below the helper.
	deadline := time.Now().Add(10 * time.Second)
	var desc []proctree.Stat
	for time.Now().Before(deadline) {
		snap, _ := proctree.Snapshot()
		desc = proctree.Descendants(snap, cmd.Process.Pid)
		n := 0
		for _, d := range desc {
			if c, _ := os.ReadFile("/proc/" + strconv.Itoa(d.PID) + "/comm"); strings.TrimSpace(string(c)) == "sleep" {
				n++
			}
		}
		if n >= 4 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline = time.Now().Add(5 * time.Second)
	for _, d := range desc {
		for proctree.Alive(d.PID, d.StartTime) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if proctree.Alive(d.PID, d.StartTime) {
			t.Errorf("pid %d outlived the helper", d.PID)
		}
	}
	if len(desc) < 4 {
		t.Errorf("only %d descendants seen", len(desc))
	}
}

// A runner killed with SIGKILL leaves its private directory; the next
// Prepare removes it once its owner is provably dead, and keeps a live
// owner's.
func TestSweepStale(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dead := exec.Command("true")
	must(t, dead.Start())
	deadStart, _ := proctree.StartTime(dead.Process.Pid)
	must(t, dead.Wait())
	boot, _ := proctree.BootID()
	mk := func(name, owner string) string {
		d := filepath.Join(tmp, tempPrefix+name)
		must(t, os.MkdirAll(filepath.Join(d, "tmp"), 0o700))
		must(t, os.WriteFile(filepath.Join(d, ownerFile), []byte(owner+" "+boot+"\n"), 0o600))
		return d
	}
	stale := mk("stale", strconv.Itoa(dead.Process.Pid)+"."+strconv.FormatUint(deadStart, 10))
	live := mk("live", ownerID())
	otherBoot := filepath.Join(tmp, tempPrefix+"oldboot")
	must(t, os.MkdirAll(otherBoot, 0o700))
	must(t, os.WriteFile(filepath.Join(otherBoot, ownerFile), []byte(ownerID()+" another-boot\n"), 0o600))
	// Today's directories name their owner instead.
	named := func(owner string) string {
		d := filepath.Join(tmp, runPrefix+owner+".0123ab")
		must(t, os.MkdirAll(filepath.Join(d, "tmp"), 0o700))
		return d
	}
	deadID := strconv.Itoa(dead.Process.Pid) + "." + strconv.FormatUint(deadStart, 10)
	staleNamed, liveNamed := named(deadID), named(ownerID())
	prep, err := Prepare(Policy{Mode: ModeReadOnly}, self(t))
	must(t, err)
	base := filepath.Base(filepath.Dir(prep.TempDir))
	if id, ok := nameOwner(base); !ok || id != ownerID() || len(base) > 29 {
		t.Errorf("private directory %s does not name its owner %s in 29 characters", prep.TempDir, ownerID())
	}
	prep.Cleanup()
	if _, err := os.Stat(filepath.Dir(prep.TempDir)); err == nil {
		t.Error("Cleanup kept the private directory")
	}
	sweepStale("")
	if _, err := os.Stat(staleNamed); err == nil {
		t.Error("a dead owner's named directory was kept")
	}
	if _, err := os.Stat(liveNamed); err != nil {
		t.Error("a live owner's named directory was removed")
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("stale directory of a dead owner kept")
	}
	if _, err := os.Stat(otherBoot); err == nil {
		t.Error("directory from another boot kept")
	}
	if _, err := os.Stat(live); err != nil {
		t.Error("a live owner's directory was removed")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The helper's own program, installed beside the caller, is used instead
// of the caller and enforces the same sandbox.
func TestHelperProgram(t *testing.T) {
	requireSandbox(t)
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not installed: cannot build the helper program")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, HelperProgram), "github.com/agentplane/agentplane/cmd/agentplane-sandbox")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	_, ws, outside := dirs(t)
	prep, err := Prepare(Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Net: NetNone}, filepath.Join(bin, "agentsh"))
	must(t, err)
	t.Cleanup(prep.Cleanup)
	if prep.Path != filepath.Join(bin, HelperProgram) {
		t.Fatalf("helper path %s", prep.Path)
	}
	cmd := exec.Command(prep.Path)
	cmd.Args = prep.Argv([]string{"sh", "-c", "echo x > " + outside + "/f 2>/dev/null || echo denied; echo in > inside && echo wrote; kill -TERM $$"})
	cmd.Env, cmd.Dir, cmd.SysProcAttr = append(os.Environ(), prep.Env...), ws, prep.SysProcAttr
	launch(t, prep, cmd)
	b, _ := cmd.Output()
	if string(b) != "denied\nwrote\n" {
		t.Fatalf("output %q", b)
	}
	if err := prep.Failure(); err != nil {
		t.Fatal(err)
	}
	code, sig := prep.ExitStatus(cmd.ProcessState.ExitCode(), "")
	if code != 143 || sig != "SIGTERM" {
		t.Errorf("exit %d %q, want 143 SIGTERM", code, sig)
	}
}

// The command cannot read its own policy's layout (the covered paths, the
// status file, the private directory) from the helper, PID 1 of its
// namespace: the spec comes on a pipe the helper closed before the
// command started, and argv names only the descriptor.
func TestEscapeReadOwnSpec(t *testing.T) {
	requireSandbox(t)
	_, ws, _ := dirs(t)
	res, prep := sandboxed(t, Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Net: NetNone, DenyRead: []string{"/etc/hostname"}}, ws,
		"sh", "-c", `tr '\0' ' ' < /proc/1/cmdline; echo; ls /proc/1/fd`)
	got := out(res)
	lines := strings.SplitN(got, "\n", 2)
	if len(lines) < 2 || !strings.HasSuffix(lines[0], " "+HelperCommand+" 3 -- sh -c tr '\\0' ' ' < /proc/1/cmdline; echo; ls /proc/1/fd ") {
		t.Fatalf("PID 1's argv %q", got)
	}
	base := filepath.Dir(prep.TempDir)
	for _, secret := range []string{base, filepath.Base(base), "/etc/hostname", "status", "deny"} {
		if strings.Contains(got, secret) {
			t.Errorf("PID 1 shows %q: %q", secret, got)
		}
	}
}

// A helper from another build refuses a spec it does not know rather than
// enforcing less than was asked.
func TestHelperRefusesOtherVersion(t *testing.T) {
	status := filepath.Join(t.TempDir(), "status")
	r, w, err := os.Pipe()
	must(t, err)
	_, _ = w.WriteString(`{"v":1,"status":"` + status + `","uid":-1,"gid":-1}`)
	w.Close()
	cmd := exec.Command(self(t), HelperCommand, "3", "--", "true")
	cmd.ExtraFiles = []*os.File{r}
	err = cmd.Run()
	r.Close()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != confine.ExitSetupFailed {
		t.Fatalf("run: %v", err)
	}
	if e := readFailure(status); e == nil || !strings.Contains(e.Error(), "another build") {
		t.Fatalf("failure %v", e)
	}
}

// Other runs' cgroups: a concurrent run's memory and pids cgroups (their
// names, counters and limits) are not visible to the command, which reads
// its own at the usual paths; a run with no limit of its own sees no
// cgroup at all. The control reads the victim's cgroup from the host's
// view, which is what the command saw before.
func TestEscapeOtherRunsCgroups(t *testing.T) {
	requireSandbox(t)
	requireRoot(t)
	c := Probe()
	if c.CgroupV1Memory == "" || c.CgroupV1Pids == "" {
		t.Skip("no writable cgroup v1 memory and pids controllers")
	}
	_, ws, _ := dirs(t)
	// The victim: a concurrent sandboxed run with limits, holding still.
	vprep, err := Prepare(Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Memory: 96 << 20, Pids: 24}, self(t))
	must(t, err)
	t.Cleanup(vprep.Cleanup)
	victim := exec.Command(self(t))
	victim.Args = vprep.Argv([]string{"sleep", "600"})
	launch(t, vprep, victim)
	victim.Env = append(os.Environ(), vprep.Env...)
	victim.Dir = ws
	victim.SysProcAttr = vprep.SysProcAttr
	must(t, victim.Start())
	t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
	// Its cgroups as the host sees them, once the helper joined them.
	var names []string
	deadline := time.Now().Add(20 * time.Second)
	for len(names) < 2 && time.Now().Before(deadline) {
		names = nil
		data, _ := os.ReadFile("/proc/" + strconv.Itoa(victim.Process.Pid) + "/cgroup")
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) < 3 || !strings.Contains(f[2], cgroupPrefix) {
				continue
			}
			mount := map[string]string{"memory": c.CgroupV1Memory, "pids": c.CgroupV1Pids}[f[1]]
			if mount == "" {
				continue
			}
			// Control: outside the sandbox it is right there.
			if _, err := os.Stat(filepath.Join(mount, f[2], "cgroup.procs")); err != nil {
				t.Fatalf("control: the victim's cgroup %s is not in the host's view: %v", f[2], err)
			}
			names = append(names, filepath.Base(f[2]))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(names) < 2 {
		t.Fatalf("the victim never joined its cgroups: %v", names)
	}
	script := `
echo "cgroup=[$(grep -E ':(memory|pids):' /proc/self/cgroup | tr '\n' ' ')]"
echo "dirs below own: $(find /sys/fs/cgroup -mindepth 2 -type d | wc -l)"
echo "hierarchies: $(ls /sys/fs/cgroup | tr '\n' ' ')"
echo "own memory limit: $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)"
echo "own pids max: $(cat /sys/fs/cgroup/pids/pids.max)"
echo "own pids current > 0: $([ "$(cat /sys/fs/cgroup/pids/pids.current)" -gt 0 ] && echo yes)"
for n in ` + strings.Join(names, " ") + `; do
  if find /sys/fs/cgroup /proc -maxdepth 6 -name "$n" 2>/dev/null | grep -q .; then echo "found $n"; fi
  if grep -rqs "$n" /sys/fs/cgroup /proc/self/mountinfo /proc/1/cgroup; then echo "named $n"; fi
done
exit 0`
	res, _ := sandboxed(t, Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Memory: 64 << 20, Pids: 32}, ws, "sh", "-c", script)
	o := out(res)
	if strings.Contains(o, "found ") || strings.Contains(o, "named ") {
		t.Fatalf("the other run's cgroup is visible: %s", o)
	}
	wantLines(t, o, "cgroup=[8:pids:/ 4:memory:/ ]", "dirs below own: 0", "hierarchies: memory pids ",
		"own memory limit: 67108864", "own pids max: 32", "own pids current > 0: yes")
	// No limit of its own: no cgroup to show.
	res, _ = sandboxed(t, Policy{Mode: ModeWorkspaceWrite, Workspace: ws}, ws, "sh", "-c", `echo "entries: $(find /sys/fs/cgroup -mindepth 1 | wc -l)"`)
	wantLines(t, out(res), "entries: 0")
}

// The helper, PID 1 of the command's namespace, survives the signals its
// caller sends it (its death would kill the command at once), and the
// command inherits none of them ignored or blocked: its dispositions are
// those of the same command run without the sandbox.
func TestSignals(t *testing.T) {
	requireSandbox(t)
	_, ws, _ := dirs(t)
	const script = `grep -E '^Sig(Ign|Blk)' /proc/self/status; echo ready; read x; grep -E '^Sig(Ign|Blk)' /proc/self/status`
	base := exec.Command("sh", "-c", script)
	base.Stdin = strings.NewReader("go\n")
	plain, err := base.CombinedOutput()
	if err != nil {
		t.Fatalf("plain: %v %s", err, plain)
	}
	plain = []byte(strings.Replace(string(plain), "ready\n", "", 1))
	prep, err := Prepare(Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Net: NetNone}, self(t))
	must(t, err)
	t.Cleanup(prep.Cleanup)
	argv := prep.Argv([]string{"sh", "-c", script})
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir, cmd.SysProcAttr = append(os.Environ(), prep.Env...), ws, prep.SysProcAttr
	launch(t, prep, cmd)
	stdin, err := cmd.StdinPipe()
	must(t, err)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	r := bufio.NewReader(stdout)
	var got strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("before ready: %v %q %v", err, got.String(), prep.Failure())
		}
		if line == "ready\n" {
			break
		}
		got.WriteString(line)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1,
		syscall.SIGPIPE, syscall.SIGALRM, syscall.SIGTSTP, syscall.SIGXCPU, syscall.Signal(40)} {
		must(t, cmd.Process.Signal(sig))
	}
	_, _ = stdin.Write([]byte("go\n"))
	rest, _ := io.ReadAll(r)
	got.Write(rest)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the helper did not survive the signals: %v %v", err, prep.Failure())
	}
	if got.String() != string(plain) {
		t.Errorf("dispositions in the sandbox:\n%s\nwant, as without it:\n%s", got.String(), plain)
	}
}

// The helper is PID 1 of the command's namespaces, the one process there
// outside its filters and Landlock domain (the gate's threads) with root's
// capabilities: the command can neither take its descriptors (the status
// file, the gate's seccomp listener) nor trace it or write its memory, in
// every kind of run.
func TestEscapeHelperProcess(t *testing.T) {
	requireSandbox(t)
	_, ws, _ := dirs(t)
	for name, p := range map[string]Policy{
		"net-none":        {Net: NetNone},
		"net-proxy":       {Net: NetProxy, AllowHosts: []string{"127.0.0.1:1"}},
		"limit-only":      {Pids: 64},
		"workspace-write": {Mode: ModeWorkspaceWrite, Workspace: ws},
		"read-only":       {Mode: ModeReadOnly, Net: NetNone},
	} {
		t.Run(name, func(t *testing.T) {
			res, prep := sandboxed(t, p, ws, self(t), attackCommand, "helper")
			o := out(res)
			for _, w := range []string{"getfd: ok", "mem: ok", "seize: ok"} {
				if strings.Contains(o, w) {
					t.Errorf("the command reached the helper (%s): %s %s", w, o, text(res.Stderr))
				}
			}
			if !strings.Contains(o, "seize: ") {
				t.Errorf("the attack did not run (exit %d, %v): %s %s", res.ExitCode, prep.Failure(), o, text(res.Stderr))
			}
		})
	}
}

// forgeEach writes a forged end report to the first of the helper's
// descriptors 0 to 63 that get opens (nil: one was reached), else returns
// the last error other than absent (absent itself when every number was
// simply not there).
func forgeEach(absent error, get func(fd int) (int, error)) error {
	last := absent
	for fd := 0; fd < 64; fd++ {
		f, err := get(fd)
		if err == nil {
			_, _ = unix.Write(f, []byte("end 0\n"))
			unix.Close(f)
			return nil
		}
		if !errors.Is(err, absent) {
			last = err
		}
	}
	return last
}

// TestEscapeWritableRootSwapped attacks the time between the check of a
// writable root and the helper's mounts: after Prepare resolved and
// checked the workspace (or an allow-write directory), a command of another
// sandbox that can write its parent replaces it by a symbolic link to a
// directory outside, or by another directory. The helper binds and grants
// what was checked or nothing: the run fails with sandbox_failed and
// nothing is written outside. Without the identity check the link would
// make the outside directory writable (the first round shows the write
// lands there when the link is in place at Prepare, where the check
// follows it, which is what an unchecked helper would do as well).
func TestEscapeWritableRootSwapped(t *testing.T) {
	requireRoot(t)
	requireLandlock(t)
	for _, root := range []string{"workspace", "allow-write"} {
		for _, swap := range []string{"symlink", "directory"} {
			t.Run(root+"/"+swap, func(t *testing.T) {
				_, ws, outside := dirs(t)
				sub, aw := filepath.Join(ws, "sub"), filepath.Join(ws, "aw")
				for _, d := range []string{sub, aw} {
					if err := os.Mkdir(d, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				p := Policy{Mode: ModeWorkspaceWrite, Workspace: sub, AllowWrite: []string{aw}}
				prep, err := Prepare(p, self(t))
				if err != nil {
					t.Fatalf("Prepare: %v", err)
				}
				t.Cleanup(prep.Cleanup)
				victim := sub
				if root == "allow-write" {
					victim = aw
				}
				if err := os.Rename(victim, victim+".checked"); err != nil {
					t.Fatal(err)
				}
				if swap == "symlink" {
					err = os.Symlink(outside, victim)
				} else {
					err = os.Mkdir(victim, 0o755)
				}
				if err != nil {
					t.Fatal(err)
				}
				files, started, err := prep.Launch()
				if err != nil {
					t.Fatalf("Launch: %v", err)
				}
				res, err := run.Run(context.Background(), run.Request{
					Argv: prep.Argv([]string{"sh", "-c", "echo x > " + victim + "/escaped"}), Dir: ws,
					Env: append(os.Environ(), prep.Env...), Timeout: time.Minute, KillAfter: time.Second,
					Drain: 200 * time.Millisecond, MaxOutput: 64 << 10, SysProcAttr: prep.SysProcAttr, ExtraFiles: files,
				})
				started()
				if err != nil {
					t.Fatalf("run: %v", err)
				}
				if _, err := os.Stat(filepath.Join(outside, "escaped")); err == nil {
					t.Fatalf("the command wrote outside through the swapped %s", root)
				}
				ferr := prep.Failure()
				var re *result.Error
				if !errors.As(ferr, &re) || re.Code != result.CodeSandboxFailed || !strings.Contains(re.Message, "changed since it was checked") {
					t.Fatalf("helper failure = %v (exit %d, stderr %q), want sandbox_failed naming the changed path", ferr, res.ExitCode, text(res.Stderr))
				}
				if _, err := os.Stat(filepath.Join(victim, "escaped")); err == nil {
					t.Fatalf("the command ran in the replacement %s", root)
				}
			})
		}
	}
}

// TestPrepareHoldsFloors: a policy's floors are checked on the paths
// Prepare resolved, so a workspace that leads out of the floor's through
// a link is refused by the engine itself, whatever a caller checked before.
func TestPrepareHoldsFloors(t *testing.T) {
	requireLandlock(t)
	_, ws, outside := dirs(t)
	link := filepath.Join(ws, "out")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	floor := Floor{Settings: Settings{Mode: ModeWorkspaceWrite, Workspace: ws}, Held: []string{FloorSandbox}}
	for _, p := range []Policy{
		{Mode: ModeWorkspaceWrite, Workspace: link, Floors: []Floor{floor}},
		{Mode: ModeWorkspaceWrite, Workspace: ws, AllowWrite: []string{link}, Floors: []Floor{floor}},
		{Mode: ModeNone, Floors: []Floor{floor}},
	} {
		prep, err := Prepare(p, self(t))
		if err == nil {
			prep.Cleanup()
			t.Fatalf("Prepare(%+v) accepted a policy below its floor", p)
		}
		var re *result.Error
		if !errors.As(err, &re) || re.Code != result.CodeSandboxLocked {
			t.Fatalf("Prepare(%+v) = %v, want sandbox_locked", p, err)
		}
	}
	prep, err := Prepare(Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Floors: []Floor{floor}}, self(t))
	if err != nil {
		t.Fatalf("Prepare at the floor: %v", err)
	}
	prep.Cleanup()
}

// TestEscapeControlDirSwapped: the same race against a protected control
// directory inside the workspace (a state directory): after Prepare
// checked it, a concurrent command renames its parent away and puts a
// decoy at its path. The helper protects the directory it checked or
// fails the run; without the identity check the read-only bind would land
// on the decoy and the real state directory, renamed, would be writable.
func TestEscapeControlDirSwapped(t *testing.T) {
	requireRoot(t)
	requireLandlock(t)
	_, ws, _ := dirs(t)
	stateDir := filepath.Join(ws, "a", "state")
	spec := filepath.Join(stateDir, "spec.json")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	prep, err := Prepare(Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Protect: []string{stateDir}}, self(t))
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	t.Cleanup(prep.Cleanup)
	if err := os.Rename(filepath.Join(ws, "a"), filepath.Join(ws, "a.real")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	files, started, err := prep.Launch()
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	res, err := run.Run(context.Background(), run.Request{
		Argv: prep.Argv([]string{"sh", "-c", "echo forged > a.real/state/spec.json"}), Dir: ws,
		Env: append(os.Environ(), prep.Env...), Timeout: time.Minute, KillAfter: time.Second,
		Drain: 200 * time.Millisecond, MaxOutput: 64 << 10, SysProcAttr: prep.SysProcAttr, ExtraFiles: files,
	})
	started()
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.real", "state", "spec.json")); string(b) != "{}" {
		t.Fatalf("the command rewrote the protected spec through the swapped parent: %q", b)
	}
	var re *result.Error
	if ferr := prep.Failure(); !errors.As(ferr, &re) || re.Code != result.CodeSandboxFailed || !strings.Contains(re.Message, "changed since it was checked") {
		t.Fatalf("helper failure = %v (exit %d, stderr %q), want sandbox_failed naming the changed path", ferr, res.ExitCode, text(res.Stderr))
	}
}

// TestEscapeHiddenPathSwapped: the race of TestEscapeControlDirSwapped
// against a hidden path (a --deny-read file or directory, the program's
// secrets): after Prepare looked at it, a concurrent command renames its
// parent away, and puts a decoy at its path or nothing. The helper hides
// the file it was told of or fails the run; without the identity check
// the cover lands on the decoy (or, the path gone, on nothing) and the
// command reads the real file under its new name.
func TestEscapeHiddenPathSwapped(t *testing.T) {
	requireRoot(t)
	requireLandlock(t)
	for _, c := range []struct{ name, kind, swap string }{
		{"file/decoy", "file", "decoy"}, {"file/gone", "file", "gone"},
		{"dir/decoy", "dir", "decoy"}, {"hide/gone", "hide", "gone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, ws, _ := dirs(t)
			secretDir := filepath.Join(ws, "a", "conf")
			must(t, os.MkdirAll(secretDir, 0o700))
			must(t, os.WriteFile(filepath.Join(secretDir, "key"), []byte("TOPSECRET"), 0o600))
			p := Policy{Mode: ModeWorkspaceWrite, Workspace: ws}
			read := "cat a.real/conf/key"
			switch c.kind {
			case "file":
				p.DenyRead = []string{filepath.Join(secretDir, "key")}
			case "dir":
				p.DenyRead = []string{secretDir}
			case "hide":
				// A file inside a hidden directory, as a session's socket
				// in the sessions directory: the outer cover holds.
				p.Hide = []string{filepath.Join(secretDir, "key"), secretDir, filepath.Join(secretDir, "key")}
			}
			prep, err := Prepare(p, self(t))
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			t.Cleanup(prep.Cleanup)
			must(t, os.Rename(filepath.Join(ws, "a"), filepath.Join(ws, "a.real")))
			if c.swap == "decoy" {
				must(t, os.MkdirAll(secretDir, 0o700))
				must(t, os.WriteFile(filepath.Join(secretDir, "key"), []byte("decoy"), 0o600))
			}
			files, started, err := prep.Launch()
			if err != nil {
				t.Fatalf("Launch: %v", err)
			}
			res, err := run.Run(context.Background(), run.Request{
				Argv: prep.Argv([]string{"sh", "-c", read}), Dir: ws,
				Env: append(os.Environ(), prep.Env...), Timeout: time.Minute, KillAfter: time.Second,
				Drain: 200 * time.Millisecond, MaxOutput: 64 << 10, SysProcAttr: prep.SysProcAttr, ExtraFiles: files,
			})
			started()
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if strings.Contains(out(res), "TOPSECRET") {
				t.Fatalf("the command read the hidden file through its swapped parent: %q", out(res))
			}
			var re *result.Error
			if ferr := prep.Failure(); !errors.As(ferr, &re) || re.Code != result.CodeSandboxFailed || !strings.Contains(re.Message, "changed since it was checked") && !strings.Contains(re.Message, "no such file") {
				t.Fatalf("helper failure = %v (exit %d, stderr %q), want sandbox_failed naming the changed path", ferr, res.ExitCode, text(res.Stderr))
			}
		})
	}
}

// TestEscapeProgramsInWorkspace: agentplane's own programs installed in a
// writable root (a workspace holding ./bin/agentsh, a home directory
// holding ~/bin) are the sandbox itself: the next call runs the helper
// from there, as root, before any confinement, and the user runs the
// programs outside any sandbox. A command replaces the program, or
// plants the helper's own program (agentplane-sandbox) beside it, which
// the next Prepare would choose. The directory holding them stays
// read-only to the command; without it both writes land and the next
// Prepare picks the forged helper.
func TestEscapeProgramsInWorkspace(t *testing.T) {
	requireSandbox(t)
	_, ws, _ := dirs(t)
	bin := filepath.Join(ws, "bin")
	must(t, os.Mkdir(bin, 0o755))
	exe := filepath.Join(bin, "agentsh")
	data, err := os.ReadFile(self(t))
	must(t, err)
	must(t, os.WriteFile(exe, data, 0o755))
	forged := filepath.Join(bin, HelperProgram)
	p := Policy{Mode: ModeWorkspaceWrite, Workspace: ws}
	res, _ := sandboxedAs(t, exe, p, ws, "sh", "-c", `
try() { if (eval "$1") 2>/dev/null; then echo "$2: allowed"; else echo "$2: denied"; fi; }
try 'printf "#!/bin/sh\necho forged\n" > bin/`+HelperProgram+` && chmod +x bin/`+HelperProgram+`' plant
try 'echo x >> bin/agentsh' replace
try 'mv bin bin.old' rename
try 'echo x > elsewhere' ordinary
`)
	wantLines(t, out(res), "plant: denied", "replace: denied", "rename: denied", "ordinary: allowed")
	if _, err := os.Stat(forged); err == nil {
		t.Errorf("a helper program was planted beside the program")
	}
	if b, _ := os.ReadFile(exe); len(b) != len(data) {
		t.Errorf("the program was changed")
	}
	next, err := Prepare(p, exe)
	must(t, err)
	next.Cleanup()
	if next.Path != exe {
		t.Errorf("the next call would run the helper %s", next.Path)
	}
	// The programs' own directory as the writable root could be protected
	// only by making the root read-only: refused.
	var re *result.Error
	if prep, err := Prepare(Policy{Mode: ModeWorkspaceWrite, Workspace: ws, AllowWrite: []string{bin}}, exe); !errors.As(err, &re) || re.Code != result.CodeInvalidRequest {
		if err == nil {
			prep.Cleanup()
		}
		t.Errorf("Prepare with the programs' directory writable = %v, want invalid_request", err)
	}
}

// launchFiles is Prepared.Launch for one run.Run.
func launchFiles(t *testing.T, prep *Prepared) []*os.File {
	t.Helper()
	files, started, err := prep.Launch()
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(started)
	return files
}

// TestEscapeLoaderEnvHelper: the helper runs before any confinement, as
// the caller, and it is the calling program itself when the helper's
// static program is not installed: a dynamically linked one, whose loader
// reads LD_PRELOAD, LD_AUDIT and the rest from the environment a request's
// "env" key sets, and would run the library they name as root with every
// capability. LD_DEBUG_OUTPUT shows it harmlessly: the loader writes its
// log where the variable says, outside the sandbox's writable roots,
// which only the unconfined helper can. The variables still reach the
// command (and are honoured there, inside the sandbox).
func TestEscapeLoaderEnvHelper(t *testing.T) {
	requireSandbox(t)
	exe := self(t)
	if f, err := elf.Open(exe); err != nil {
		t.Skip("not an ELF program")
	} else {
		dynamic := false
		for _, p := range f.Progs {
			dynamic = dynamic || p.Type == elf.PT_INTERP
		}
		f.Close()
		if !dynamic {
			t.Skip("the test program is statically linked: no loader reads the environment")
		}
	}
	_, ws, outside := dirs(t)
	prep, err := Prepare(Policy{Mode: ModeWorkspaceWrite, Workspace: ws}, exe)
	must(t, err)
	t.Cleanup(prep.Cleanup)
	log := filepath.Join(outside, "ld")
	w := prep.Wrap(exe, "agentsh", []string{"sh", "-c", `echo "$LD_DEBUG $LD_DEBUG_OUTPUT"`},
		append(os.Environ(), "LD_DEBUG=files", "LD_DEBUG_OUTPUT="+log))
	cmd := exec.Command(w.Path)
	cmd.Args, cmd.Env, cmd.Dir, cmd.SysProcAttr = w.Argv, w.Env, ws, w.SysProcAttr
	launch(t, prep, cmd)
	b, err := cmd.Output()
	if logs, _ := filepath.Glob(log + ".*"); len(logs) > 0 {
		t.Fatalf("the helper's loader read the request's LD_* variables (it wrote %v outside the writable roots)", logs)
	}
	if ferr := prep.Failure(); err != nil || ferr != nil {
		t.Fatalf("run: %v, helper: %v", err, ferr)
	}
	// (The command's loader cannot write the log outside and writes it to
	// the standard output instead.)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if got := lines[len(lines)-1]; got != "files "+log {
		t.Errorf("the command's environment lost the loader's variables: %q", got)
	}
}

// TestEscapeCacheRootHiddenParent: with the user's own caches writable
// (user_caches), a --deny-read file two levels below one
// (~/.cache/huggingface/token) was covered, but the directory above it,
// inside that writable root, was not pinned: only the workspace's and the
// --allow-write roots' were. The command renamed it aside (the cover goes
// with it in its own namespace), and the next run, which hides the path,
// found nothing there and read the file under the new name. Every
// writable root's directories above a hidden path are pinned (EBUSY).
func TestEscapeCacheRootHiddenParent(t *testing.T) {
	requireSandbox(t)
	for _, mode := range []string{ModeReadOnly, ModeWorkspaceWrite} {
		t.Run(mode, func(t *testing.T) {
			parent, ws, _ := dirs(t)
			home := filepath.Join(parent, "home")
			cache := filepath.Join(home, ".cache")
			secret := filepath.Join(cache, "huggingface", "token")
			must(t, os.MkdirAll(filepath.Dir(secret), 0o755))
			must(t, os.WriteFile(secret, []byte("TOPSECRET"), 0o600))
			t.Setenv("HOME", home)
			t.Setenv("XDG_CACHE_HOME", "")
			t.Setenv("GOMODCACHE", filepath.Join(home, "go", "pkg", "mod"))
			t.Setenv("GOCACHE", "")
			p := Policy{Mode: mode, Workspace: ws, UserCaches: true, DenyRead: []string{secret}}
			if mode == ModeReadOnly {
				p.Workspace = ""
			}
			res, _ := sandboxed(t, p, ws, "sh", "-c", `mv `+cache+`/huggingface `+cache+`/hf 2>/dev/null && echo renamed || echo denied; echo end`)
			if o := out(res); o != "denied\nend\n" {
				t.Errorf("a directory above a hidden path in a writable cache was renamed: %q", o)
			}
			res, _ = sandboxed(t, p, ws, "sh", "-c", `cat `+cache+`/hf/token `+secret+` 2>/dev/null; echo end`)
			if o := out(res); strings.Contains(o, "TOPSECRET") || !strings.Contains(o, "end\n") {
				t.Errorf("the next run read the hidden file: %q", o)
			}
		})
	}
}

// TestEscapeDenyReadMissingAtPrepare: a --deny-read file missing when a
// job started (the user makes ~/.aws/credentials later) was never hidden
// at the job's restarts, which record again only the paths hidden at the
// start: the restarted command read it, where a new call would have had
// it covered. A later start hides it once it is there.
func TestEscapeDenyReadMissingAtPrepare(t *testing.T) {
	requireSandbox(t)
	_, ws, outside := dirs(t)
	secret := filepath.Join(ws, "conf", "key")
	secretOut := filepath.Join(outside, "creds", "key")
	must(t, os.MkdirAll(filepath.Dir(secret), 0o755))
	prep, err := Prepare(Policy{Mode: ModeWorkspaceWrite, Workspace: ws, DenyRead: []string{secret, filepath.Dir(secretOut)}}, self(t))
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	t.Cleanup(prep.Cleanup)
	start := func(script string) string {
		t.Helper()
		files, started, err := prep.Launch()
		if err != nil {
			t.Fatalf("Launch: %v", err)
		}
		res, err := run.Run(context.Background(), run.Request{
			Argv: prep.Argv([]string{"sh", "-c", script}), Dir: ws,
			Env: append(os.Environ(), prep.Env...), Timeout: time.Minute, KillAfter: time.Second,
			Drain: 200 * time.Millisecond, MaxOutput: 64 << 10, SysProcAttr: prep.SysProcAttr, ExtraFiles: files,
		})
		started()
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if ferr := prep.Failure(); ferr != nil {
			t.Fatalf("helper failure: %v (stderr %q)", ferr, text(res.Stderr))
		}
		return out(res)
	}
	// The first run: the parent of the missing file is pinned.
	if o := start(`mv conf conf.old 2>/dev/null && echo renamed || echo denied`); o != "denied\n" {
		t.Errorf("the directory above a missing --deny-read file was renamed: %q", o)
		must(t, os.Rename(filepath.Join(ws, "conf.old"), filepath.Join(ws, "conf")))
	}
	// The user's tools make the files between the runs.
	must(t, os.WriteFile(secret, []byte("TOPSECRET"), 0o600))
	must(t, os.MkdirAll(filepath.Dir(secretOut), 0o700))
	must(t, os.WriteFile(secretOut, []byte("TOPSECRET"), 0o600))
	if o := start(`cat ` + secret + ` ` + secretOut + ` 2>/dev/null; echo end`); strings.Contains(o, "TOPSECRET") || o != "end\n" {
		t.Errorf("the restarted command read a --deny-read file made after the start: %q", o)
	}
}

// TestEscapeProgramsInUserCache: `go tool agentsh` (a tool of the
// user's module) runs agentsh from the Go build cache
// (~/.cache/go-build/…-d/agentsh), and user_caches makes that cache
// writable in both modes; the programs' directory was protected only
// inside the workspace and --allow-write roots. A command planted the
// helper's program beside it, which the next call would start as the
// caller before any confinement.
func TestEscapeProgramsInUserCache(t *testing.T) {
	requireSandbox(t)
	for _, mode := range []string{ModeReadOnly, ModeWorkspaceWrite} {
		t.Run(mode, func(t *testing.T) {
			parent, ws, _ := dirs(t)
			home := filepath.Join(parent, "home")
			t.Setenv("HOME", home)
			t.Setenv("XDG_CACHE_HOME", "")
			t.Setenv("GOMODCACHE", filepath.Join(home, "go", "pkg", "mod"))
			t.Setenv("GOCACHE", "")
			bin := filepath.Join(home, ".cache", "go-build", "d0", "d0123-d")
			must(t, os.MkdirAll(bin, 0o755))
			exe := filepath.Join(bin, "agentsh")
			data, err := os.ReadFile(self(t))
			must(t, err)
			must(t, os.WriteFile(exe, data, 0o755))
			p := Policy{Mode: mode, Workspace: ws, UserCaches: true}
			if mode == ModeReadOnly {
				p.Workspace = ""
			}
			res, _ := sandboxedAs(t, exe, p, ws, "sh", "-c", `
try() { if (eval "$1") 2>/dev/null; then echo "$2: allowed"; else echo "$2: denied"; fi; }
try 'printf "#!/bin/sh\necho forged\n" > `+bin+`/`+HelperProgram+` && chmod +x `+bin+`/`+HelperProgram+`' plant
try 'mv `+bin+` `+bin+`.old' rename
try 'echo x > `+home+`/.cache/elsewhere' ordinary
`)
			wantLines(t, out(res), "plant: denied", "rename: denied", "ordinary: allowed")
			next, err := Prepare(p, exe)
			must(t, err)
			next.Cleanup()
			if next.Path != exe {
				t.Errorf("the next call would run the helper %s", next.Path)
			}
		})
	}
}

// TestEscapeHelperSymlinkInWorkspace: the helper's program beside the
// calling program may be a symbolic link (a development build linked into
// the installed programs' directory, a stow tree) to a file inside a
// writable root. Only the directory of the link was protected: a command
// rewrote the file it leads to, which the next call starts as the caller
// before any confinement. The directory of the helper's resolved program
// is protected too.
func TestEscapeHelperSymlinkInWorkspace(t *testing.T) {
	requireSandbox(t)
	parent, ws, _ := dirs(t)
	bin := filepath.Join(parent, "bin")
	build := filepath.Join(ws, "build")
	must(t, os.MkdirAll(bin, 0o755))
	must(t, os.MkdirAll(build, 0o755))
	data, err := os.ReadFile(self(t))
	must(t, err)
	exe := filepath.Join(bin, "agentsh")
	must(t, os.WriteFile(exe, data, 0o755))
	real := filepath.Join(build, HelperProgram)
	must(t, os.WriteFile(real, data, 0o755))
	must(t, os.Symlink(real, filepath.Join(bin, HelperProgram)))
	p := Policy{Mode: ModeWorkspaceWrite, Workspace: ws}
	res, _ := sandboxedAs(t, exe, p, ws, "sh", "-c", `
try() { if (eval "$1") 2>/dev/null; then echo "$2: allowed"; else echo "$2: denied"; fi; }
try 'printf "#!/bin/sh\necho forged\n" > build/new && chmod +x build/new && mv -f build/new build/`+HelperProgram+`' replace
try 'mv build build.old' rename
try 'echo x > elsewhere' ordinary
`)
	wantLines(t, out(res), "replace: denied", "rename: denied", "ordinary: allowed")
	if b, _ := os.ReadFile(real); len(b) != len(data) {
		t.Errorf("the helper's program was changed")
	}
}

// TestEscapeLinkToProtected: a protected or hidden path named through a
// symbolic link inside a writable root (a home workspace whose ~/.config
// or ~/.ssh links into a dotfiles directory). The read-only bind and the
// cover sit on the file the link led to, but the link itself could be
// replaced: the user's next agentsh read a forged config (its
// sandbox_lock gone), and the next run hid the forged ~/.ssh/id while
// the real key, in the dotfiles, lay uncovered. The links on the way are
// bound onto themselves (EBUSY).
func TestEscapeLinkToProtected(t *testing.T) {
	requireSandbox(t)
	_, ws, _ := dirs(t)
	conf := filepath.Join(ws, "dotfiles", "config", "agentplane")
	ssh := filepath.Join(ws, "dotfiles", "ssh")
	must(t, os.MkdirAll(conf, 0o755))
	must(t, os.MkdirAll(ssh, 0o700))
	must(t, os.WriteFile(filepath.Join(conf, "config.toml"), []byte("sandbox_lock = true\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(ssh, "id"), []byte("TOPSECRET"), 0o600))
	must(t, os.Symlink(filepath.Join("dotfiles", "config"), filepath.Join(ws, ".config")))
	must(t, os.Symlink(ssh, filepath.Join(ws, ".ssh")))
	named := filepath.Join(ws, ".config", "agentplane", "config.toml")
	p := Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Protect: []string{named}, DenyRead: []string{filepath.Join(ws, ".ssh", "id")}}
	res, _ := sandboxed(t, p, ws, "sh", "-c", `
mkdir -p forged/agentplane forged/ssh && echo 'sandbox = "none"' > forged/agentplane/config.toml && echo decoy > forged/ssh/id
try() { if (eval "$1") 2>/dev/null; then echo "$2: allowed"; else echo "$2: denied"; fi; }
try 'rm .config && ln -s forged .config' config
try 'ln -s forged/ssh .ssh.new && mv -fT .ssh.new .ssh' ssh
try 'echo x > dotfiles/other' ordinary
`)
	wantLines(t, out(res), "config: denied", "ssh: denied", "ordinary: allowed")
	if b, _ := os.ReadFile(named); !strings.Contains(string(b), "sandbox_lock") {
		t.Errorf("the protected config at %s is now %q", named, b)
	}
	res, _ = sandboxed(t, p, ws, "sh", "-c", `cat dotfiles/ssh/id .ssh/id 2>/dev/null; echo end`)
	if o := out(res); strings.Contains(o, "TOPSECRET") {
		t.Errorf("the next run read the hidden key: %q", o)
	}
}

// TestProtectedMissingDirModes: a missing protected directory inside a
// writable root is made empty before the run (the command must not create
// it), private, but readable by every user when it is the system-wide
// config file's (Public), whatever the umask: a workspace of / once left a
// 0700 /etc/agentplane, and every other user's agentsh failed on its
// config.
func TestProtectedMissingDirModes(t *testing.T) {
	requireRoot(t)
	requireLandlock(t)
	_, ws, _ := dirs(t)
	sys, state := filepath.Join(ws, "etc", "agentplane"), filepath.Join(ws, "state", "agentplane")
	// Under a session server's umask (no test here runs in parallel).
	defer syscall.Umask(syscall.Umask(0o077))
	prep, err := Prepare(Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Protect: []string{sys, state}, Public: []string{sys}}, self(t))
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	t.Cleanup(prep.Cleanup)
	for dir, want := range map[string]os.FileMode{sys: 0o755, state: 0o700} {
		st, err := os.Stat(dir)
		if err != nil || !st.IsDir() || st.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want a directory of mode %o", dir, st.Mode(), err, want)
		}
	}
}
