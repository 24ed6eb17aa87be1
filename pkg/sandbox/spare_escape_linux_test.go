package sandbox

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/internal/faultpoint"
	"github.com/agentplane/agentplane/pkg/run"
)

// claimCommand is a hidden mode of the test binary: it claims a private
// directory in the area named by its argument and prints its path.
const claimCommand = "__claim"

func claimMain(args []string) int {
	if args[0] == "-names" {
		fmt.Println(randHex(8), privateName(randHex(3)), randHex(4))
		return 0
	}
	dir, err := claimPrivate(args[0])
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println(dir)
	return 0
}

// A --user run leaves a spare whose tmp/ its target owns until the next
// run claims it. A process of that uid holding the directory (by
// /proc/PID/cwd of the command, which it may read, being the same user)
// must not get anything into the next run's TMPDIR, which may be the
// caller's own or another user's: a hard link to a file it keeps reading,
// a symlink, a FIFO. The claim is stopped right after it checked the
// spare (faultpoint spare.checked), where the former owner adds its
// entries; the run must then not get them.
func TestEscapeSpareFormerOwner(t *testing.T) {
	requireRoot(t)
	area := privateArea(t)
	spare := filepath.Join(area, sparePrefix+"user")
	tmp := filepath.Join(spare, "tmp")
	must(t, os.MkdirAll(tmp, 0o700))
	must(t, os.Chmod(spare, 0o711))
	must(t, os.Chown(tmp, 65534, 65534))
	// Its owner may also have given itself an ACL entry, which outlives
	// the chown (the chmod to 0700 masks it).
	must(t, unix.Setxattr(tmp, "system.posix_acl_access", posixACL(65534), 0))
	held, err := os.Open(tmp)
	must(t, err)
	defer held.Close()

	claim := exec.Command(self(t), claimCommand, area)
	claim.Env = append(os.Environ(), faultpoint.Env+"=spare.checked=stop")
	var stdout strings.Builder
	claim.Stdout = &stdout
	must(t, claim.Start())
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(claim.Process.Pid, &ws, syscall.WUNTRACED, nil); err != nil || !ws.Stopped() {
		_ = claim.Process.Kill()
		_ = claim.Wait()
		t.Fatalf("the claim did not stop at spare.checked: %v %v", ws, err)
	}
	// The former owner, as itself, through the directory it holds.
	plant := func() string {
		sh := exec.Command("/bin/sh", "-c", `d=/proc/self/fd/3; echo planted > $d/file; ln -s /etc/passwd $d/link; mkfifo $d/fifo; ls -A $d`)
		sh.ExtraFiles = []*os.File{held}
		sh.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, _ := sh.CombinedOutput()
		return string(out)
	}
	planted := plant()
	// And later, once the run has it.
	defer func() {
		late := plant()
		if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
			t.Errorf("the former owner writes in the claimed TMPDIR later: %q", late)
		}
	}()
	must(t, claim.Process.Signal(syscall.SIGCONT))
	must(t, claim.Wait())
	dir := strings.TrimSpace(stdout.String())
	if !strings.HasPrefix(dir, area+"/") {
		t.Fatalf("claim: %q", dir)
	}
	defer releasePrivate(dir)
	tmp = filepath.Join(dir, "tmp")
	got, err := os.ReadDir(filepath.Join(dir, "tmp"))
	must(t, err)
	if len(got) != 0 {
		var names []string
		for _, e := range got {
			names = append(names, e.Name())
		}
		t.Errorf("the next run's TMPDIR holds what the spare's former owner put there after the check: %v (the owner saw %q)", names, planted)
	}
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(dir, "tmp"), &st))
	if int(st.Uid) != os.Geteuid() || st.Mode&0o7777 != 0o700 {
		t.Errorf("claimed TMPDIR: uid %d mode %o", st.Uid, st.Mode&0o7777)
	}
}

// posixACL is a system.posix_acl_access value: rwx for the owner and for
// uid, nothing for the group and others, mask rwx.
func posixACL(uid uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2) // POSIX_ACL_XATTR_VERSION
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{1, 7, ^uint32(0)}, {2, 7, uid}, {4, 0, ^uint32(0)}, {0x10, 7, ^uint32(0)}, {0x20, 0, ^uint32(0)}} {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// A path the model chooses that holds the spec's separator cannot add a
// record of its own (a writable "/"): the call is refused, before the
// helper starts or by it, never run.
func TestEscapeSpecInjectionPolicy(t *testing.T) {
	requireSandbox(t)
	_, ws, outside := dirs(t)
	inject := outside + "\x00writable\x00/"
	for name, p := range map[string]Policy{
		"workspace":   {Mode: ModeWorkspaceWrite, Workspace: inject},
		"allow-write": {Mode: ModeWorkspaceWrite, Workspace: ws, AllowWrite: []string{inject}},
		"write-file":  {Mode: ModeWorkspaceWrite, Workspace: ws, WriteFiles: []string{inject}},
		"deny-read":   {Mode: ModeReadOnly, DenyRead: []string{inject}},
		"user":        {Mode: ModeReadOnly, User: "nobody\x00writable\x00/"},
	} {
		prep, err := Prepare(p, self(t))
		if err != nil {
			continue // refused by the runner
		}
		files, started, err := prep.Launch()
		if err != nil {
			prep.Cleanup()
			continue // refused at the spec's encoding
		}
		cmd := exec.Command(self(t))
		cmd.Args = prep.Argv([]string{"sh", "-c", "echo pwned > /injected-" + name + "; echo ran"})
		cmd.ExtraFiles = files
		cmd.Env = append(os.Environ(), prep.Env...)
		cmd.Dir = ws
		cmd.SysProcAttr = prep.SysProcAttr
		b, _ := cmd.Output()
		started()
		prep.Cleanup()
		if strings.Contains(string(b), "ran") {
			t.Errorf("%s: a path with NUL bytes ran the command: %q", name, b)
		}
		if _, err := os.Stat("/injected-" + name); err == nil {
			_ = os.Remove("/injected-" + name)
			t.Errorf("%s: the injected record made / writable", name)
		}
	}
}

// The private directories' and cgroups' names come from math/rand/v2's
// generator, which the runtime seeds from the kernel in every process:
// no setting of the caller's (GODEBUG's randautoseed and randseednop
// act on math/rand's old generator only) makes two runners draw the same
// names, which a local user could then predict.
func TestEscapePredictNames(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 4; i++ {
		cmd := exec.Command(self(t), claimCommand, "-names")
		cmd.Env = append(os.Environ(), "GODEBUG=randautoseed=0,randseednop=0")
		b, err := cmd.Output()
		must(t, err)
		for _, name := range strings.Fields(string(b)) {
			if seen[name] {
				t.Errorf("two runners drew the name %s", name)
			}
			seen[name] = true
		}
	}
	if len(seen) != 12 {
		t.Errorf("names: %v", seen)
	}
}

// What stands where the run's status file should be, planted by whoever
// could reach the private directory (a command whose writable roots hold
// another temp dir's area): a second name of another file, a symlink to
// one, a FIFO. The helper must neither empty nor write the other file, the
// runner must neither read it as the helper's word (a forged signal death,
// a secret in the failure's message) nor wait on the FIFO.
func TestEscapePlantedStatus(t *testing.T) {
	requireSandbox(t)
	privateArea(t)
	secret := `{"signal":9,"deaths":[{"signal":9}]} TOPSECRET`
	for _, kind := range []string{"hardlink", "symlink", "fifo"} {
		t.Run(kind, func(t *testing.T) {
			victim := filepath.Join(t.TempDir(), "victim")
			must(t, os.WriteFile(victim, []byte(secret), 0o600))
			prep, err := Prepare(Policy{Mode: ModeReadOnly}, self(t))
			must(t, err)
			t.Cleanup(prep.Cleanup)
			status := filepath.Join(filepath.Dir(prep.TempDir), statusFile)
			_ = os.Remove(status)
			switch kind {
			case "hardlink":
				must(t, os.Link(victim, status))
			case "symlink":
				must(t, os.Symlink(victim, status))
			case "fifo":
				must(t, unix.Mkfifo(status, 0o600))
			}
			files, started, err := prep.Launch()
			must(t, err)
			done := make(chan *run.Result, 1)
			go func() {
				res, err := run.Run(context.Background(), run.Request{
					Argv: prep.Argv([]string{"true"}), Dir: "/", Env: append(os.Environ(), prep.Env...),
					Timeout: time.Minute, SysProcAttr: prep.SysProcAttr, ExtraFiles: files,
				})
				if err != nil {
					t.Error(err)
				}
				done <- res
			}()
			var res *run.Result
			select {
			case res = <-done:
			case <-time.After(2 * time.Minute):
				t.Fatal("the helper waits on the planted status file")
			}
			started()
			ferr := make(chan error, 1)
			go func() { ferr <- prep.Failure() }()
			var failure error
			select {
			case failure = <-ferr:
			case <-time.After(2 * time.Minute):
				t.Fatal("the runner waits on the planted status file")
			}
			if b, _ := os.ReadFile(victim); string(b) != secret {
				t.Errorf("the file the status named was changed: %q", b)
			}
			if failure != nil && strings.Contains(failure.Error(), "TOPSECRET") {
				t.Errorf("the runner read the other file as the status: %v", failure)
			}
			if code, sig := prep.ExitStatus(res.ExitCode, res.Signal); sig != "" {
				t.Errorf("a forged signal death: exit %d %s", code, sig)
			}
			if failure == nil && res.ExitCode == 0 {
				t.Logf("ran with the plant in place (exit 0, no failure)")
			}
		})
	}
}

// Runs of one caller with different temp dirs (TMPDIR) have their private
// directories in different areas: a command of one must neither read a
// concurrent run's TMPDIR in the other (read access reaches everywhere)
// nor plant a status file or a spare there from a writable root holding
// it.
func TestEscapeOtherTempDirArea(t *testing.T) {
	requireSandbox(t)
	t1, t2 := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", t1)
	other, err := Prepare(Policy{Mode: ModeReadOnly}, self(t))
	must(t, err)
	defer other.Cleanup()
	must(t, os.WriteFile(filepath.Join(other.TempDir, "secret"), []byte("TOPSECRET"), 0o600))
	area := filepath.Dir(filepath.Dir(other.TempDir))
	t.Setenv("TMPDIR", t2)
	res, _ := sandboxed(t, Policy{Mode: ModeWorkspaceWrite, Workspace: t1}, t1, "sh", "-c",
		`cat `+other.TempDir+`/secret; ls -A `+area+`; ln -s /etc/passwd `+filepath.Dir(other.TempDir)+`/planted && echo planted; echo end`)
	o := out(res)
	if strings.Contains(o, "TOPSECRET") || strings.Contains(o, "planted") || strings.Contains(o, runPrefix) {
		t.Errorf("a run in another temp dir reached this one's private directory: %q", o)
	}
	if !strings.Contains(o, "end\n") {
		t.Fatalf("output %q", o)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(other.TempDir), "planted")); err == nil {
		t.Error("planted")
	}
}

// Concurrent runs take and give back the spares (and the empty status
// files in them) while their commands die of signals or exit with codes
// of their own: no run sees another's TMPDIR content, and no run's status
// (a signal death) reaches another, as a wrong exit status or signal.
func TestEscapeSpareConcurrentReuse(t *testing.T) {
	requireSandbox(t)
	privateArea(t)
	_, ws, _ := dirs(t)
	helper := self(t)
	const workers, rounds = 4, 6
	errs := make(chan error, workers*rounds)
	for w := 0; w < workers; w++ {
		go func(w int) {
			for r := 0; r < rounds; r++ {
				code, sig := 10+w*rounds+r, ""
				script := fmt.Sprintf(`ls -A "$TMPDIR"; echo %d > "$TMPDIR/mine"; exit %d`, code, code)
				if r%2 == 1 {
					code, sig = 143, "SIGTERM"
					script = fmt.Sprintf(`ls -A "$TMPDIR"; echo %d > "$TMPDIR/mine"; kill -TERM $$`, w)
				}
				errs <- concurrentRun(helper, Policy{Mode: ModeWorkspaceWrite, Workspace: ws}, ws, script, code, sig)
			}
		}(w)
	}
	for i := 0; i < workers*rounds; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// concurrentRun runs script sandboxed (helper: self) and checks its
// TMPDIR was empty and its exit status is code and sig.
func concurrentRun(helper string, p Policy, dir, script string, code int, sig string) error {
	prep, err := Prepare(p, helper)
	if err != nil {
		return err
	}
	defer prep.Cleanup()
	files, started, err := prep.Launch()
	if err != nil {
		return err
	}
	res, err := run.Run(context.Background(), run.Request{
		Argv: prep.Argv([]string{"sh", "-c", script}), Dir: dir, Env: append(os.Environ(), prep.Env...),
		Timeout: 5 * time.Minute, KillAfter: time.Second, Drain: 200 * time.Millisecond, MaxOutput: 64 << 10,
		SysProcAttr: prep.SysProcAttr, ExtraFiles: files, Ended: prep.Ended,
	})
	started()
	if err != nil {
		return err
	}
	if f := prep.Failure(); f != nil {
		return fmt.Errorf("run %d: failure %v", code, f)
	}
	gotCode, gotSig := prep.ExitStatus(res.ExitCode, res.Signal)
	if gotCode != code || gotSig != sig {
		return fmt.Errorf("exit %d %q, want %d %q", gotCode, gotSig, code, sig)
	}
	if o := text(res.Stdout); o != "" {
		return fmt.Errorf("run %d saw another run's TMPDIR: %q", code, o)
	}
	return nil
}

// A command learns its TMPDIR's path, and so the private directory of a
// concurrent run (which its command tells): a call whose workspace,
// --allow-write or write file the model chose to be that directory (or
// the temp area holding it) must not get to write there, where it would
// plant the other run's status (a forged signal death) or files in its
// TMPDIR.
func TestEscapeAllowWriteTempArea(t *testing.T) {
	requireSandbox(t)
	area := privateArea(t)
	other, err := Prepare(Policy{Mode: ModeReadOnly}, self(t))
	must(t, err)
	defer other.Cleanup()
	base := filepath.Dir(other.TempDir)
	must(t, os.WriteFile(filepath.Join(base, statusFile), nil, 0o600)) // as its helper opens it
	_, ws, _ := dirs(t)
	forged := `{"signal":9}`
	for name, p := range map[string]Policy{
		"allow-write base":   {Mode: ModeWorkspaceWrite, Workspace: ws, AllowWrite: []string{base}},
		"allow-write tmp":    {Mode: ModeWorkspaceWrite, Workspace: ws, AllowWrite: []string{other.TempDir}},
		"workspace base":     {Mode: ModeWorkspaceWrite, Workspace: base},
		"allow-write area":   {Mode: ModeWorkspaceWrite, Workspace: ws, AllowWrite: []string{area}},
		"write-file status":  {Mode: ModeWorkspaceWrite, Workspace: ws, WriteFiles: []string{filepath.Join(base, statusFile)}},
		"allow-write parent": {Mode: ModeWorkspaceWrite, Workspace: ws, AllowWrite: []string{filepath.Dir(area)}},
	} {
		must(t, os.WriteFile(filepath.Join(base, statusFile), nil, 0o600))
		prep, err := Prepare(p, self(t))
		if err != nil {
			continue // refused
		}
		prep.Cleanup()
		attack := `s=` + filepath.Join(base, statusFile) + `; rm -f $s; printf '%s' '` + forged + `' > $s; echo x > ` + other.TempDir + `/planted`
		if err := concurrentRun(self(t), p, ws, attack+"; exit 3", 3, ""); err != nil {
			t.Logf("%s: %v", name, err)
		}
		if _, err := os.Stat(filepath.Join(other.TempDir, "planted")); err == nil {
			t.Errorf("%s: planted a file in another run's TMPDIR", name)
			_ = os.Remove(filepath.Join(other.TempDir, "planted"))
		}
		if _, sig := other.ExitStatus(0, ""); sig != "" {
			t.Errorf("%s: forged the other run's status: %s", name, sig)
		}
	}
}

// TestEscapeTempAreaParentRenamed: a run's temp area inside another run's
// writable root (TMPDIR in a directory of the workspace) is covered there,
// but the directories above it were not pinned: the command renamed the
// temp dir aside (the cover goes with it in its own namespace), and every
// later run, which looks for the area where the list says it is, found
// nothing to cover and read (or planted into) the concurrent run's TMPDIR
// under the new name. The directories from the writable root down to each
// temp area are pinned (EBUSY), as those above a protected path.
func TestEscapeTempAreaParentRenamed(t *testing.T) {
	requireSandbox(t)
	_, ws, _ := dirs(t)
	inner := filepath.Join(ws, "build", "tmp")
	must(t, os.MkdirAll(inner, 0o755))
	tmp := os.TempDir()
	t.Setenv("TMPDIR", inner)
	other, err := Prepare(Policy{Mode: ModeReadOnly}, self(t))
	must(t, err)
	defer other.Cleanup()
	must(t, os.WriteFile(filepath.Join(other.TempDir, "secret"), []byte("TOPSECRET"), 0o600))
	moved := strings.Replace(other.TempDir, filepath.Join(ws, "build"), filepath.Join(ws, "build.old"), 1)
	t.Setenv("TMPDIR", tmp)
	p := Policy{Mode: ModeWorkspaceWrite, Workspace: ws}
	res, _ := sandboxed(t, p, ws, "sh", "-c", `mv build build.old 2>/dev/null && echo renamed || echo denied; mv build/tmp build/tmp2 2>/dev/null && echo renamed || echo denied`)
	if o := out(res); o != "denied\ndenied\n" {
		// Put it back, so that the second run shows what it reaches.
		t.Errorf("a directory above a concurrent run's temp area was renamed: %q", o)
	}
	res, _ = sandboxed(t, p, ws, "sh", "-c", `cat `+moved+`/secret `+other.TempDir+`/secret 2>/dev/null; echo end`)
	if o := out(res); strings.Contains(o, "TOPSECRET") || !strings.Contains(o, "end\n") {
		t.Errorf("the next run read the concurrent run's TMPDIR: %q", o)
	}
}
