package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/capture"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/run"
)

// The test binary is its own helper: Prepare gets os.Executable as self.
// netProbeCommand is a second hidden mode used by the network test, so it
// needs neither python nor any external host.
const netProbeCommand = "__net-probe"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case HelperCommand:
			os.Exit(HelperMain(os.Args[2:]))
		case netProbeCommand:
			os.Exit(netProbe())
		case proxyProbeCommand:
			os.Exit(proxyProbe(os.Args[2:]))
		case attackCommand:
			os.Exit(attack(os.Args[2:]))
		case holdCommand:
			os.Exit(hold(os.Args[2:]))
		case sockCommand:
			os.Exit(sockMain(os.Args[2:]))
		case claimCommand:
			os.Exit(claimMain(os.Args[2:]))
		}
	}
	os.Exit(m.Run())
}

// netProbe serves and dials on 127.0.0.1, then dials a non-loopback
// address, and prints one line per step.
func netProbe() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("listen:", err)
		return 1
	}
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = c.Write([]byte("pong"))
			c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		fmt.Println("loopback:", err)
		return 1
	}
	buf := make([]byte, 4)
	n, _ := c.Read(buf)
	c.Close()
	fmt.Printf("loopback: %s\n", buf[:n])
	ifaces, _ := net.Interfaces()
	var names []string
	for _, i := range ifaces {
		names = append(names, i.Name)
	}
	fmt.Printf("interfaces: %s\n", strings.Join(names, ","))
	start := time.Now()
	_, err = net.DialTimeout("tcp", "10.255.255.1:9", 3*time.Second)
	fmt.Printf("external: unreachable=%v fast=%v err=%v\n", errors.Is(err, syscall.ENETUNREACH), time.Since(start) < time.Second, err)
	return 0
}

func self(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: cgroups, --user and the setuid proof need it (CI runs these tests as root)")
	}
}

func requireLandlock(t testing.TB) {
	t.Helper()
	if abi := Probe().LandlockABI; abi < minLandlockABI {
		t.Skipf("kernel has %s; the filesystem sandbox needs Landlock ABI %d", abiText(abi), minLandlockABI)
	}
}

// launch gives cmd the helper's descriptors for one start
// (Prepared.Launch).
func launch(t *testing.T, prep *Prepared, cmd *exec.Cmd) {
	t.Helper()
	files, started, err := prep.Launch()
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(started)
	cmd.ExtraFiles = append(cmd.ExtraFiles, files...)
}

// sandboxed prepares p and runs argv with pkg/run in dir.
func sandboxed(t *testing.T, p Policy, dir string, argv ...string) (*run.Result, *Prepared) {
	t.Helper()
	return sandboxedAs(t, self(t), p, dir, argv...)
}

// sandboxedAs is sandboxed with exe as the calling program (a copy of the
// test binary placed where an attack needs agentplane's programs to be).
func sandboxedAs(t *testing.T, exe string, p Policy, dir string, argv ...string) (*run.Result, *Prepared) {
	t.Helper()
	prep, err := Prepare(p, exe)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	t.Cleanup(prep.Cleanup)
	env := append(os.Environ(), prep.Env...)
	files, started, err := prep.Launch() // --net proxy's handover
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	res, err := run.Run(context.Background(), run.Request{
		Argv:        prep.Argv(argv),
		Dir:         dir,
		Env:         env,
		Timeout:     5 * time.Minute, // a cold toolchain cache on a loaded machine
		KillAfter:   time.Second,
		Drain:       200 * time.Millisecond,
		MaxOutput:   64 << 10,
		SysProcAttr: prep.SysProcAttr,
		ExtraFiles:  files,
	})
	started()
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if err := prep.Failure(); err != nil {
		t.Fatalf("sandbox helper failed: %v (stderr %q)", err, text(res.Stderr))
	}
	res.ExitCode, res.Signal = prep.ExitStatus(res.ExitCode, res.Signal)
	return res, prep
}

func out(r *run.Result) string { return text(r.Stdout) }

func text(h *capture.HeadTail) string {
	c := h.Snapshot()
	return string(c.Head) + string(c.Tail)
}

// dirs makes a parent with a workspace and a sibling outside it.
func dirs(t *testing.T) (parent, ws, outside string) {
	parent = t.TempDir()
	ws = filepath.Join(parent, "ws")
	outside = filepath.Join(parent, "outside")
	for _, d := range []string{ws, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return parent, ws, outside
}

func TestWorkspaceWrite(t *testing.T) {
	requireLandlock(t)
	parent, ws, outside := dirs(t)
	if err := os.Symlink(parent, filepath.Join(ws, "up")); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(outside, "target")
	if err := os.WriteFile(target, []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(ws, "link-to-file")); err != nil {
		t.Fatal(err)
	}
	p := Policy{Mode: ModeWorkspaceWrite, Workspace: ws}
	script := `
try() { if (eval "$1") 2>/dev/null; then echo "$2: allowed"; else echo "$2: denied"; fi; }
try 'echo x > inside' inside
try 'mkdir -p sub/deep && mv inside sub/deep/moved' rename-within
try 'echo x > "$OUTSIDE/f"' outside
try 'echo x > ../escape-dotdot' dotdot
try 'echo x > up/escape-symlink' symlink-dir
try 'echo x > link-to-file' symlink-file
try 'echo x > "$TMPDIR/t"' tmpdir
try 'echo x > /dev/null' devnull
try 'truncate -s 0 "$OUTSIDE/target"' truncate-outside
`
	res, prep := sandboxed(t, p, ws, "sh", "-c", "OUTSIDE="+outside+"\n"+script)
	want := []string{
		"inside: allowed", "rename-within: allowed", "outside: denied", "dotdot: denied",
		"symlink-dir: denied", "symlink-file: denied", "tmpdir: allowed", "devnull: allowed",
		"truncate-outside: denied",
	}
	got := strings.Split(strings.TrimSpace(out(res)), "\n")
	if !slices.Equal(got, want) {
		t.Fatalf("got\n%s\nwant\n%s\nstderr %s", strings.Join(got, "\n"), strings.Join(want, "\n"), text(res.Stderr))
	}
	for _, p := range []string{filepath.Join(outside, "f"), filepath.Join(parent, "escape-dotdot"), filepath.Join(parent, "escape-symlink")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was created outside the workspace", p)
		}
	}
	if data, _ := os.ReadFile(target); string(data) != "original" {
		t.Errorf("file outside the workspace changed to %q", data)
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "sub/deep/moved")); string(data) != "x\n" {
		t.Errorf("write inside the workspace: got %q", data)
	}
	if prep.Report["filesystem"] != "landlock" || prep.Report["no_new_privs"] != true {
		t.Errorf("report %v", prep.Report)
	}

	// The same script unsandboxed escapes: the test can tell the difference.
	cmd := exec.Command("sh", "-c", "OUTSIDE="+outside+"\n"+script)
	cmd.Dir = ws
	b, _ := cmd.Output()
	if !strings.Contains(string(b), "outside: allowed") {
		t.Fatalf("control run without sandbox could not write outside: %s", b)
	}
}

func TestReadOnly(t *testing.T) {
	requireLandlock(t)
	_, ws, _ := dirs(t)
	res, prep := sandboxed(t, Policy{Mode: ModeReadOnly}, ws, "sh", "-c", `
if (echo x > here) 2>/dev/null; then echo cwd: allowed; else echo cwd: denied; fi
echo tmp > "$TMPDIR/t" && cat "$TMPDIR/t"
cat /etc/hostname >/dev/null && echo read: ok
echo "tmpdir=$TMPDIR"`)
	o := out(res)
	for _, w := range []string{"cwd: denied", "tmp\n", "read: ok", "tmpdir=" + prep.TempDir} {
		if !strings.Contains(o, w) {
			t.Errorf("missing %q in %q (stderr %q)", w, o, text(res.Stderr))
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "here")); err == nil {
		t.Error("read-only mode wrote to the cwd")
	}
	if !strings.HasPrefix(prep.TempDir, os.TempDir()) || prep.TempDir == os.TempDir() {
		t.Errorf("private tmp %q", prep.TempDir)
	}
	prep.Cleanup()
	if _, err := os.Stat(prep.TempDir); err == nil {
		t.Error("Cleanup left the private temp dir")
	}
}

func TestDenyRead(t *testing.T) {
	if c := Probe(); !c.MountNS || !(c.Root || c.UserNS) {
		t.Skip("no mount namespaces for this user")
	}
	_, ws, outside := dirs(t)
	secretDir := filepath.Join(outside, "ssh")
	if err := os.Mkdir(secretDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secretDir, "id_ed25519"), []byte("PRIVATE KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(ws, ".env")
	if err := os.WriteFile(secretFile, []byte("TOKEN=hunter2"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A symlink to the secret is resolved, so the cover lands on the target.
	if err := os.Symlink(secretDir, filepath.Join(outside, "ssh-link")); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{ModeNone, ModeWorkspaceWrite} {
		t.Run(mode, func(t *testing.T) {
			if mode != ModeNone {
				requireLandlock(t)
			}
			p := Policy{Mode: mode, Workspace: ws, DenyRead: []string{filepath.Join(outside, "ssh-link"), secretFile, filepath.Join(outside, "missing")}}
			res, prep := sandboxed(t, p, ws, "sh", "-c", `
echo "file=[$(cat .env 2>&1)]"
echo "indir=[$(cat `+secretDir+`/id_ed25519 2>/dev/null)]"
echo "ls=[$(ls -A `+secretDir+`)]"
if umount `+secretDir+` 2>/dev/null; then echo umount: allowed; else echo umount: denied; fi
echo "after=[$(cat `+secretDir+`/id_ed25519 2>/dev/null)]"
echo "viaproc=[$(cat /proc/$PPID/root`+secretDir+`/id_ed25519 2>/dev/null)]"
echo "viaproc1=[$(cat /proc/1/root`+secretDir+`/id_ed25519 2>/dev/null)]"`)
			o := out(res)
			for _, w := range []string{"file=[]", "indir=[]", "ls=[]", "umount: denied", "after=[]", "viaproc=[]", "viaproc1=[]"} {
				if !strings.Contains(o, w) {
					t.Errorf("missing %q in %q (stderr %q)", w, o, text(res.Stderr))
				}
			}
			if strings.Contains(o, "PRIVATE") || strings.Contains(o, "hunter2") {
				t.Fatalf("secret leaked: %s", o)
			}
			if got := prep.Report["deny_read_missing"]; !slices.Equal(got.([]string), []string{filepath.Join(outside, "missing")}) {
				t.Errorf("deny_read_missing %v", got)
			}
		})
	}
	// Nothing leaked out of the mount namespace.
	if data, _ := os.ReadFile(filepath.Join(secretDir, "id_ed25519")); string(data) != "PRIVATE KEY" {
		t.Errorf("secret changed outside: %q", data)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), secretDir) || strings.Contains(string(mi), secretFile) {
		t.Error("a deny-read mount propagated to the parent's namespace")
	}
}

func TestNetNone(t *testing.T) {
	if c := Probe(); !c.NetNS || !(c.Root || c.UserNS) {
		t.Skip("no network namespaces for this user")
	}
	res, prep := sandboxed(t, Policy{Net: NetNone}, "", self(t), netProbeCommand)
	o := out(res)
	for _, w := range []string{"loopback: pong", "interfaces: lo\n", "external: unreachable=true fast=true"} {
		if !strings.Contains(o, w) {
			t.Errorf("missing %q in %q (stderr %q)", w, o, text(res.Stderr))
		}
	}
	if prep.Report["network"] != "namespace" {
		t.Errorf("report %v", prep.Report)
	}
}

func TestSetuidClimb(t *testing.T) {
	requireRoot(t)
	// Our own directory: t.TempDir's parents are 0700 and nobody could not
	// reach the binary.
	dir, err := os.MkdirTemp("", "agentplane-setuid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	id, err := exec.LookPath("id")
	if err != nil {
		t.Skip("no id(1)")
	}
	data, err := os.ReadFile(id)
	if err != nil {
		t.Fatal(err)
	}
	suid := filepath.Join(dir, "id")
	if err := os.WriteFile(suid, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(suid, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}

	// Control: without the sandbox the setuid bit works on this mount.
	cmd := exec.Command(suid, "-u")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	b, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(b)) != "0" {
		t.Skipf("setuid binaries do not work under %s (nosuid?): control printed %q", dir, b)
	}

	for _, mode := range []string{ModeNone, ModeReadOnly} {
		t.Run(mode, func(t *testing.T) {
			if mode != ModeNone {
				requireLandlock(t)
			}
			res, prep := sandboxed(t, Policy{Mode: mode, User: "nobody"}, "/", suid, "-u")
			if got := strings.TrimSpace(out(res)); got != "65534" {
				t.Fatalf("euid inside the sandbox = %q, want 65534 (stderr %q)", got, text(res.Stderr))
			}
			if u, _ := prep.Report["user"].(map[string]any); u["uid"] != 65534 {
				t.Errorf("report user %v", prep.Report["user"])
			}
		})
	}
}

func TestRootLosesCapabilities(t *testing.T) {
	requireRoot(t)
	res, _ := sandboxed(t, Policy{Net: NetNone}, "/", "sh", "-c", "grep -E '^Cap(Eff|Bnd)|^NoNewPrivs' /proc/self/status")
	o := out(res)
	// keptCaps: chown, dac_override, fowner, fsetid, kill, setgid, setuid, net_bind_service.
	for _, w := range []string{"CapEff:\t00000000000004fb", "CapBnd:\t00000000000004fb", "NoNewPrivs:\t1"} {
		if !strings.Contains(o, w) {
			t.Errorf("missing %q in %q", w, o)
		}
	}
}

func TestForkBomb(t *testing.T) {
	requireRoot(t)
	if Probe().CgroupV1Pids == "" {
		t.Skip("no writable cgroup v1 pids controller")
	}
	// Bounded: it stops at 1000 children or at the first failed fork.
	start := time.Now()
	res, prep := sandboxed(t, Policy{Pids: 64}, "/", "sh", "-c",
		`n=0; while [ $n -lt 1000 ]; do sleep 30 & n=$((n+1)); done; echo spawned $n`)
	if res.TimedOut || time.Since(start) > 30*time.Second {
		t.Fatalf("fork bomb not contained: %+v", res)
	}
	if strings.Contains(out(res), "spawned 1000") {
		t.Fatalf("all 1000 processes started under pids 64")
	}
	if got := prep.Classify(res.ExitCode, res.Signal); got != result.CodePidsLimit {
		t.Errorf("Classify = %q, want %s (exit %d, stderr %q)", got, result.CodePidsLimit, res.ExitCode, text(res.Stderr))
	}
	if prep.Report["pids"] != "cgroup_v1" {
		t.Errorf("report %v", prep.Report)
	}
}

func TestMemoryHog(t *testing.T) {
	requireRoot(t)
	if Probe().CgroupV1Memory == "" {
		t.Skip("no writable cgroup v1 memory controller")
	}
	// tail keeps the last "line" of input that has no newline: 512 MiB.
	res, prep := sandboxed(t, Policy{Memory: 64 << 20}, "/", "sh", "-c", "head -c 512M /dev/zero | tail")
	if res.ExitCode != 128+int(syscall.SIGKILL) {
		t.Errorf("exit %d, want 137 (stderr %q)", res.ExitCode, text(res.Stderr))
	}
	if got := prep.Classify(res.ExitCode, res.Signal); got != result.CodeMemoryLimit {
		t.Errorf("Classify = %q, want %s", got, result.CodeMemoryLimit)
	}
	if prep.Report["memory"] != "cgroup_v1" {
		t.Errorf("report %v", prep.Report)
	}
	// A run that stays under the limit is not blamed on it.
	res, prep = sandboxed(t, Policy{Memory: 64 << 20}, "/", "sh", "-c", "head -c 1M /dev/zero | tail | wc -c")
	if res.ExitCode != 0 || prep.Classify(res.ExitCode, res.Signal) != "" {
		t.Errorf("small run: exit %d classify %q", res.ExitCode, prep.Classify(res.ExitCode, res.Signal))
	}
}

func TestFileSize(t *testing.T) {
	_, ws, _ := dirs(t)
	big := filepath.Join(ws, "big")
	res, prep := sandboxed(t, Policy{FileSize: 1 << 20}, ws, "dd", "if=/dev/zero", "of="+big, "bs=64k", "count=160")
	if res.Signal != "SIGXFSZ" || res.ExitCode != 153 {
		t.Errorf("signal %q exit %d, want SIGXFSZ 153", res.Signal, res.ExitCode)
	}
	if got := prep.Classify(res.ExitCode, res.Signal); got != result.CodeFileSizeLimit {
		t.Errorf("Classify = %q", got)
	}
	if st, err := os.Stat(big); err != nil || st.Size() > 1<<20 {
		t.Errorf("file %v %v", st, err)
	}
}

func TestCPUTime(t *testing.T) {
	start := time.Now()
	res, prep := sandboxed(t, Policy{CPUTime: time.Second}, "/", "sh", "-c", "while :; do :; done")
	if res.TimedOut || time.Since(start) > 30*time.Second {
		t.Fatalf("busy loop not stopped by the CPU limit")
	}
	if res.Signal != "SIGXCPU" && res.Signal != "SIGKILL" {
		t.Errorf("signal %q exit %d", res.Signal, res.ExitCode)
	}
	if got := prep.Classify(res.ExitCode, res.Signal); got != result.CodeCPULimit {
		t.Errorf("Classify = %q", got)
	}
}

func TestNofile(t *testing.T) {
	res, _ := sandboxed(t, Policy{Nofile: 32}, "/", "sh", "-c", "ulimit -n")
	if got := strings.TrimSpace(out(res)); got != "32" {
		t.Errorf("ulimit -n = %q", got)
	}
}

func TestHelperFailure(t *testing.T) {
	res, prep := func() (*run.Result, *Prepared) {
		prep, err := Prepare(Policy{Nofile: 64}, self(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(prep.Cleanup)
		files, started, err := prep.Launch()
		if err != nil {
			t.Fatal(err)
		}
		res, err := run.Run(context.Background(), run.Request{
			Argv: prep.Argv([]string{"no-such-command-xyz"}), Env: append(os.Environ(), prep.Env...),
			Timeout: 30 * time.Second, SysProcAttr: prep.SysProcAttr, ExtraFiles: files,
		})
		started()
		if err != nil {
			t.Fatal(err)
		}
		return res, prep
	}()
	if res.ExitCode != 127 {
		t.Errorf("exit %d", res.ExitCode)
	}
	e := result.AsError(prep.Failure())
	if e == nil || e.Code != result.CodeCommandNotFound {
		t.Fatalf("Failure = %v", e)
	}
	if prep.Classify(res.ExitCode, res.Signal) != result.CodeCommandNotFound {
		t.Error("Classify ignores the helper failure")
	}
}

func TestCleanupRemovesCgroups(t *testing.T) {
	requireRoot(t)
	c := Probe()
	if c.CgroupV1Memory == "" || c.CgroupV1Pids == "" {
		t.Skip("no writable cgroup v1 memory and pids controllers")
	}
	prep, err := Prepare(Policy{Memory: 64 << 20, Pids: 10}, self(t))
	if err != nil {
		t.Fatal(err)
	}
	// This process's own cgroups only: other runs on the machine have
	// theirs, named after their owners.
	own := cgroupPrefix + ownerID() + ".*"
	var cgs []string
	for _, root := range []string{c.CgroupV1Memory, c.CgroupV1Pids} {
		m, _ := filepath.Glob(filepath.Join(root, "*", own))
		m2, _ := filepath.Glob(filepath.Join(root, own))
		m3, _ := filepath.Glob(filepath.Join(root, "*", "*", own))
		cgs = append(cgs, append(append(m, m2...), m3...)...)
	}
	if len(cgs) < 2 {
		t.Fatalf("cgroups not found: %v", cgs)
	}
	prep.Cleanup()
	prep.Cleanup()
	for _, d := range cgs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s left behind", d)
		}
	}
}

func TestPrepareRefuses(t *testing.T) {
	_, ws, _ := dirs(t)
	full := Capabilities{Root: true, LandlockABI: 7, UserNS: true, NetNS: true, MountNS: true, CgroupV1Pids: "", CgroupV1Memory: "",
		PidNS: true, IPCNS: true, CgroupNS: true, MountAPI: true, Seccomp: true, SeccompNotify: true}
	without := func(f func(*Capabilities)) Capabilities { c := full; f(&c); return c }
	cases := []struct {
		name string
		p    Policy
		caps Capabilities
		code string
	}{
		{"no landlock", Policy{Mode: ModeWorkspaceWrite, Workspace: ws}, Capabilities{Root: true}, result.CodeSandboxUnavailable},
		{"landlock too old", Policy{Mode: ModeReadOnly}, Capabilities{Root: true, LandlockABI: 2}, result.CodeSandboxUnavailable},
		{"no netns", Policy{Net: NetNone}, Capabilities{Root: true, LandlockABI: 7}, result.CodeSandboxUnavailable},
		{"no userns unprivileged", Policy{Net: NetNone}, Capabilities{NetNS: true, LandlockABI: 7}, result.CodeSandboxUnavailable},
		{"deny-read no mountns", Policy{DenyRead: []string{ws}}, Capabilities{Root: true}, result.CodeSandboxUnavailable},
		{"pids as root without cgroup", Policy{Pids: 10}, full, result.CodeSandboxUnavailable},
		{"no pid namespace", Policy{Mode: ModeReadOnly}, without(func(c *Capabilities) { c.PidNS = false }), result.CodeSandboxUnavailable},
		{"no ipc namespace", Policy{Nofile: 10}, without(func(c *Capabilities) { c.IPCNS = false }), result.CodeSandboxUnavailable},
		{"no mount API", Policy{Mode: ModeReadOnly}, without(func(c *Capabilities) { c.MountAPI = false }), result.CodeSandboxUnavailable},
		{"no seccomp", Policy{Net: NetNone}, without(func(c *Capabilities) { c.Seccomp = false }), result.CodeSandboxUnavailable},
		{"no seccomp listener", Policy{Net: NetNone}, without(func(c *Capabilities) { c.SeccompNotify = false }), result.CodeSandboxUnavailable},
		{"no seccomp listener, proxy", Policy{Net: NetProxy}, without(func(c *Capabilities) { c.SeccompNotify = false }), result.CodeSandboxUnavailable},
		{"user without root", Policy{User: "nobody"}, Capabilities{}, result.CodeSandboxUnavailable},
		{"bad mode", Policy{Mode: "strict"}, full, result.CodeInvalidRequest},
		{"bad net", Policy{Net: "lan"}, full, result.CodeInvalidRequest},
		{"no workspace", Policy{Mode: ModeWorkspaceWrite}, full, result.CodeInvalidRequest},
		{"missing workspace", Policy{Mode: ModeWorkspaceWrite, Workspace: filepath.Join(ws, "nope")}, full, result.CodeInvalidRequest},
		{"allow-write read-only", Policy{Mode: ModeReadOnly, AllowWrite: []string{ws}}, full, result.CodeInvalidRequest},
		{"negative memory", Policy{Memory: -1}, full, result.CodeInvalidRequest},
		{"cpu below 1s", Policy{CPUTime: time.Millisecond}, full, result.CodeInvalidRequest},
		{"deny /", Policy{DenyRead: []string{"/"}}, full, result.CodeInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prep, err := PrepareWith(tc.p, "/nonexistent", tc.caps)
			if err == nil {
				prep.Cleanup()
				t.Fatalf("Prepare accepted %+v", tc.p)
			}
			var e *result.Error
			if !errors.As(err, &e) || e.Code != tc.code {
				t.Fatalf("error %v, want code %s", err, tc.code)
			}
		})
	}
}

func TestEmptyPolicy(t *testing.T) {
	if !(Policy{}).Empty() || !(Policy{Mode: ModeNone, Net: NetHost, Workspace: "/x"}).Empty() {
		t.Error("zero policy not empty")
	}
	if (Policy{Memory: 1}).Empty() || (Policy{Net: NetNone}).Empty() {
		t.Error("non-empty policy reported empty")
	}
	prep, err := Prepare(Policy{}, "/nonexistent")
	if err != nil {
		t.Fatal(err)
	}
	if got := prep.Argv([]string{"true"}); !slices.Equal(got, []string{"true"}) {
		t.Errorf("argv %v", got)
	}
}

func TestCheck(t *testing.T) {
	c := Check()
	if c["root"] != (os.Geteuid() == 0) {
		t.Errorf("root %v", c["root"])
	}
	abi, _ := c["landlock_abi"].(int)
	if abi < 0 || abi > 64 {
		t.Errorf("landlock_abi %v", c["landlock_abi"])
	}
	if _, err := result.Marshal(c); err != nil {
		t.Fatal(err)
	}
	en, _ := c["enforceable"].(map[string]any)
	if en == nil || en[ModeReadOnly] != (abi >= minLandlockABI) {
		t.Errorf("enforceable %v", en)
	}
	if os.Geteuid() == 0 && Probe().CgroupV1Memory != "" && en["memory"] != "cgroup_v1" {
		t.Errorf("memory %v", en["memory"])
	}
}

// BenchmarkTrue measures `true` run through pkg/run bare and under
// workspace-write with --net none; the ratio is the sandbox's cost.
func BenchmarkTrue(b *testing.B) {
	ws := b.TempDir()
	for _, bc := range []struct {
		name string
		p    Policy
	}{
		{"plain", Policy{}},
		{"workspace-write-net-none", Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Net: NetNone}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if !bc.p.Empty() && Probe().LandlockABI < minLandlockABI {
				b.Skip("no Landlock")
			}
			for b.Loop() {
				if err := runTrue(bc.p, self(b)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// runTrue is one sandboxed `true`: Prepare, the helper, exec, Cleanup.
func runTrue(p Policy, self string) error {
	prep, err := Prepare(p, self)
	if err != nil {
		return err
	}
	defer prep.Cleanup()
	cmd := exec.Command(prep.Argv([]string{"true"})[0], prep.Argv([]string{"true"})[1:]...)
	cmd.Env = append(os.Environ(), prep.Env...)
	cmd.SysProcAttr = prep.SysProcAttr
	files, started, err := prep.Launch()
	if err != nil {
		return err
	}
	cmd.ExtraFiles = files
	err = cmd.Run()
	started()
	if err != nil {
		if f := prep.Failure(); f != nil {
			return f
		}
		return err
	}
	return nil
}

// TestUnprivileged reruns the suite that needs no root as nobody, which
// takes the user-namespace path (CLONE_NEWUSER, ambient capabilities for the
// helper) that root never does.
func TestUnprivileged(t *testing.T) {
	requireRoot(t)
	if c := Probe(); !c.UserNS {
		t.Skip("unprivileged user namespaces are disabled")
	}
	if os.Getenv("AGENTPLANE_SANDBOX_UNPRIVILEGED") != "" {
		t.Skip("already unprivileged")
	}
	dir, err := os.MkdirTemp("", "agentplane-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self(t))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandbox.test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.v", "-test.count=1",
		"-test.run", "^(TestWorkspaceWrite|TestReadOnly|TestDenyRead|TestNetNone|TestNetProxy|TestFileSize|TestNofile|TestHelperFailure|TestEndReportHelperKilled|TestEscapeForgeEndReport)$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AGENTPLANE_SANDBOX_UNPRIVILEGED=1", "TMPDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as nobody: %v\n%s", err, b)
	}
	if n := strings.Count(string(b), "--- PASS"); n < 10 || strings.Contains(string(b), "--- SKIP") {
		t.Fatalf("as nobody, expected 10 passing tests:\n%s", b)
	}
}

// BenchmarkPrepare is the parent's share of the cost: probing the machine,
// the private directory, and Cleanup.
func BenchmarkPrepare(b *testing.B) {
	ws := b.TempDir()
	p := Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Net: NetNone}
	for b.Loop() {
		prep, err := Prepare(p, "/nonexistent")
		if err != nil {
			b.Fatal(err)
		}
		prep.Cleanup()
	}
}

// Prepare probes the cgroup hierarchies only for the limits that use them,
// and then finds what the full probe finds.
func TestProbeFor(t *testing.T) {
	full := Probe()
	if c := probeFor(Policy{Mode: ModeReadOnly, Net: NetNone}); c.CgroupV1Memory != "" || c.CgroupV1Pids != "" || c.CgroupV2 != "" {
		t.Errorf("a policy without limits probed the cgroups: %+v", c)
	}
	for _, p := range []Policy{{Memory: 1 << 30}, {Pids: 10}} {
		c := probeFor(p)
		if c.CgroupV1Memory != full.CgroupV1Memory || c.memoryParent != full.memoryParent ||
			c.CgroupV1Pids != full.CgroupV1Pids || c.pidsParent != full.pidsParent {
			t.Errorf("%+v: cgroups %+v, the full probe found %+v", p, c, full)
		}
	}
	// Process accounting only for the limits it serves.
	for _, p := range []Policy{{CPUTime: time.Second}, {FileSize: 1000}} {
		if c := probeFor(p); c.ProcessAcct != full.ProcessAcct {
			t.Errorf("%+v: process accounting %v, the full probe found %v", p, c.ProcessAcct, full.ProcessAcct)
		}
	}
	c := probeFor(Policy{Mode: ModeReadOnly})
	if c.ProcessAcct {
		t.Error("a policy without --cpu-time or --file-size probed process accounting")
	}
	c.UserNS, full.UserNS = false, false
	c.ProcessAcct = full.ProcessAcct
	c.CgroupV1Memory, c.CgroupV1Pids, c.CgroupV2, c.CgroupV2Controllers, c.memoryParent, c.pidsParent = full.CgroupV1Memory, full.CgroupV1Pids, full.CgroupV2, full.CgroupV2Controllers, full.memoryParent, full.pidsParent
	if !reflect.DeepEqual(c, full) {
		t.Errorf("the rest differs: %+v, full %+v", c, full)
	}
}

// The probe's system calls (SECCOMP_GET_ACTION_AVAIL, one listing of
// /proc/self/ns) tell what the files they replace tell.
func TestProbeAgreesWithProc(t *testing.T) {
	c := Probe()
	avail, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	actions := strings.Fields(string(avail))
	if c.Seccomp != (err == nil && slices.Contains(actions, "kill_process")) {
		t.Errorf("Seccomp %v, actions_avail %q (%v)", c.Seccomp, avail, err)
	}
	if c.SeccompNotify != slices.Contains(actions, "user_notif") {
		t.Errorf("SeccompNotify %v, actions_avail %q", c.SeccompNotify, avail)
	}
	for name, got := range map[string]bool{"net": c.NetNS, "mnt": c.MountNS, "pid": c.PidNS, "ipc": c.IPCNS, "cgroup": c.CgroupNS} {
		_, err := os.Stat("/proc/self/ns/" + name)
		if got != (err == nil) {
			t.Errorf("namespace %s: probe %v, stat %v", name, got, err)
		}
	}
}
