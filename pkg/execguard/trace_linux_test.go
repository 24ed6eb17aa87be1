//go:build linux

package execguard

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/internal/faultpoint"
	"github.com/agentplane/agentplane/pkg/policy"
	"github.com/agentplane/agentplane/pkg/result"
)

// The tests run this test binary as the guard, as agentsh and agentjob run
// themselves.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Command {
		os.Exit(Main(os.Args[2:]))
	}
	if len(os.Args) > 2 && (os.Args[1] == untracedCommand || os.Args[1] == untraced3Command) {
		os.Exit(untracedChild(os.Args[1], os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == vmWriteCommand {
		os.Exit(vmWrite())
	}
	os.Exit(m.Run())
}

const rules = `
prefix_rule(pattern=["git", "push"], decision="forbidden", justification="no pushing")
prefix_rule(pattern=["touch"], decision="forbidden")
prefix_rule(pattern=["curl"], decision="prompt")
`

func loadRules(t *testing.T, src string) *policy.Policy {
	t.Helper()
	p, err := policy.LoadSource("rules.star", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// guarded runs argv under the guard in dir and returns the report, the exit
// status and the combined output.
func guarded(t *testing.T, p *policy.Policy, approved bool, dir string, argv ...string) (*Report, int, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g, err := Prepare(p, approved, self)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Cleanup()
	_, args, files := g.Wrap("", argv, nil)
	cmd := exec.Command(self, args[1:]...)
	cmd.Dir = dir
	cmd.ExtraFiles = files
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	} else if err != nil {
		t.Fatal(err)
	}
	return g.Report(), code, out.String()
}

func need(t *testing.T, progs ...string) {
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed", p)
		}
	}
}

// realPython is the interpreter itself, not a pyenv shim script.
func realPython(t *testing.T) string {
	need(t, "python3")
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Skip("python3 does not run")
	}
	return strings.TrimSpace(string(out))
}

// TestForbiddenDeepInTheTreeNeverActs runs a forbidden touch through every
// route that hides it from a string check and proves it never ran: the file
// it would create does not exist.
func TestForbiddenDeepInTheTreeNeverActs(t *testing.T) {
	need(t, "bash", "xargs", "find", "make")
	py := realPython(t)
	p := loadRules(t, rules)
	cases := map[string]string{
		"xargs":          `echo MARK | xargs touch`,
		"find -exec":     `mkdir d && find d -maxdepth 0 -exec touch MARK \;`,
		"make":           `printf 'all:\n\ttouch MARK\n' > Makefile && make -s`,
		"python system":  py + ` -c 'import os; os.system("touch MARK")'`,
		"script written": `printf '#!/bin/sh\ntouch MARK\n' > s.sh && chmod +x s.sh && ./s.sh`,
		"variable name":  `c=tou; c=${c}ch; $c MARK`,
		"eval":           `eval "$(printf 'to%sch MARK' u)"`,
		"background":     `(sleep 0.05; touch MARK) & wait`,
		"exec -a":        `exec -a ls touch MARK`,
		"symlink":        `ln -s "$(command -v touch)" harmless && ./harmless MARK`,
		"renamed copy":   `cp "$(command -v touch)" harmless && ./harmless MARK`,
		"deep nesting":   `bash -c "sh -c 'echo MARK | env nice xargs touch'"`,
	}
	// The loader run as a program maps the program itself: no exec of it.
	for _, l := range loaderPaths {
		if _, err := os.Stat(l); err == nil {
			cases["ld.so direct"] = l + ` "$(command -v touch)" MARK`
			cases["ld.so options"] = l + ` --inhibit-cache --argv0 ls "$(command -v touch)" MARK`
			cases["ld.so renamed copy"] = `cp ` + l + ` runner && ./runner "$(command -v touch)" MARK`
			cases["ld.so relative"] = `cp "$(command -v touch)" ./t && ` + l + ` ./t MARK`
			break
		}
	}
	// So does valgrind's tool, executed with valgrind's argv.
	if _, err := exec.LookPath("valgrind"); err == nil {
		cases["valgrind"] = `valgrind -q touch MARK`
		cases["valgrind options"] = `valgrind --tool=none -q --trace-children=no touch MARK`
	}
	for name, script := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			rep, code, out := guarded(t, p, false, dir, "bash", "-c", script+"; echo AFTER")
			if _, err := os.Stat(filepath.Join(dir, "MARK")); err == nil {
				t.Fatalf("the forbidden touch ran (exit %d): %s", code, out)
			}
			if rep.Killed == nil || filepath.Base(rep.Killed.Argv[0]) == "" {
				t.Fatalf("no exec was killed: %+v, exit %d, %s", rep, code, out)
			}
			if rep.Killed.Decision != policy.Forbidden || rep.Killed.Rule == "" || rep.Killed.Exe == "" {
				t.Fatalf("the report does not say what and why: %+v", rep.Killed)
			}
			if name == "xargs" && (len(rep.Killed.Chain) < 2 || rep.Killed.Chain[0][0] != "xargs") {
				t.Fatalf("the parent chain is not reported: %v", rep.Killed.Chain)
			}
			if strings.Contains(out, "AFTER") {
				t.Fatalf("the script went on after the refusal: %s", out)
			}
			if code != exitRefused {
				t.Fatalf("exit %d, want %d", code, exitRefused)
			}
			if re := result.AsError(rep.Err()); re.Code != result.CodePolicyDenied {
				t.Fatalf("error %v, want %s", re, result.CodePolicyDenied)
			}
		})
	}
}

// TestPushNeverReachesTheRemote pushes to a local bare repository through
// routes a string check cannot follow; the remote must stay empty.
func TestPushNeverReachesTheRemote(t *testing.T) {
	need(t, "git", "bash", "xargs")
	base := t.TempDir()
	remote := filepath.Join(base, "remote.git")
	work := filepath.Join(base, "work")
	gitenv := append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@t", "HOME="+base, "GIT_CONFIG_NOSYSTEM=1")
	for _, c := range [][]string{
		{"git", "init", "-q", "--bare", remote},
		{"git", "init", "-q", work},
		{"git", "-C", work, "commit", "-q", "--allow-empty", "-m", "x"},
		{"git", "-C", work, "remote", "add", "origin", remote},
	} {
		cmd := exec.Command(c[0], c[1:]...)
		cmd.Env = gitenv
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", c, err, out)
		}
	}
	t.Setenv("HOME", base)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	p := loadRules(t, rules)
	for _, script := range []string{
		`echo push | xargs git`,
		`git -C . push origin HEAD:refs/heads/main`,
		`git -c x.y=z push origin HEAD:refs/heads/main`,
		`cp "$(command -v git)" g && ./g push origin HEAD:refs/heads/main`,
		`$'git\0' push origin HEAD:refs/heads/main`,
		`g=git; $g push origin HEAD:refs/heads/main`,
	} {
		rep, code, out := guarded(t, p, false, work, "bash", "-c", script)
		refs, _ := exec.Command("git", "-C", remote, "for-each-ref").Output()
		if len(refs) > 0 {
			t.Fatalf("%s: the push reached the remote (exit %d): %s", script, code, out)
		}
		if rep.Killed == nil && !strings.Contains(script, "-C .") && !strings.Contains(script, "-c x.y") {
			t.Fatalf("%s: nothing was killed (exit %d): %s", script, code, out)
		}
	}
}

// TestPromptNeedsApproval: a prompt-level exec is killed in a call that
// was not approved, and runs (and is reported) in one that was.
func TestPromptNeedsApproval(t *testing.T) {
	need(t, "bash", "curl")
	p := loadRules(t, rules)
	rep, code, _ := guarded(t, p, false, t.TempDir(), "bash", "-c", "x=curl; $x --version >/dev/null")
	if rep.Killed == nil || rep.Killed.Decision != policy.Prompt || code != exitRefused {
		t.Fatalf("unapproved prompt exec was not stopped: %+v exit %d", rep, code)
	}
	if re := result.AsError(rep.Err()); re.Code != result.CodeApprovalRequired {
		t.Fatalf("error %v, want approval_required", re)
	}
	rep, code, out := guarded(t, p, true, t.TempDir(), "bash", "-c", "x=curl; $x --version >/dev/null")
	if rep.Killed != nil || code != 0 || len(rep.Approved) != 1 || rep.Approved[0].Argv[0] != "curl" {
		t.Fatalf("approved prompt exec: %+v exit %d %s", rep, code, out)
	}
}

// TestOrdinaryWorkBehaves: exit statuses, signals, stops and continues,
// threads, vfork and signal handlers behave as without the guard.
func TestOrdinaryWorkBehaves(t *testing.T) {
	need(t, "bash", "ps")
	py := realPython(t)
	p := loadRules(t, rules)
	cases := []struct {
		script string
		code   int
		out    string
	}{
		{`exit 7`, 7, ""},
		{`kill -TERM $$`, 128 + 15, ""},
		{`kill -SEGV $$`, 128 + 11, ""},
		// A stop and a continue take effect once the guard has seen them
		// (a traced process's signals pass through it): the states are
		// polled for, bounded, not slept for.
		{`st() { for i in $(seq 600); do s=$(ps -o stat= -p $p); [ "$s" = $1 ] && break; sleep 0.05; done; echo $s; }; sleep 60 & p=$!; kill -STOP $p; s1=$(st t); kill -CONT $p; s2=$(st S); kill $p; wait $p; echo "$s1 $s2 $?"`, 0, "t S 143\n"},
		{`trap 'echo trapped' USR1; kill -USR1 $$; echo done`, 0, "trapped\ndone\n"},
		{py + ` -c 'import threading,subprocess; ts=[threading.Thread(target=lambda: subprocess.run(["true"])) for _ in range(16)]; [t.start() for t in ts]; [t.join() for t in ts]; print("ok")'`, 0, "ok\n"},
		{py + ` -c 'import os; pid=os.fork(); os._exit(3) if pid==0 else print(os.waitstatus_to_exitcode(os.waitpid(pid,0)[1]))'`, 0, "3\n"},
		{py + ` -c 'import os; pid=os.posix_spawn("/bin/true",["true"],os.environ); print(os.waitpid(pid,0)[1])'`, 0, "0\n"},
		{`for i in $(seq 50); do /bin/true; done; echo fine`, 0, "fine\n"},
	}
	for _, c := range cases {
		rep, code, out := guarded(t, p, false, t.TempDir(), "bash", "-c", c.script)
		if code != c.code || (c.out != "" && out != c.out) || rep.Killed != nil {
			t.Errorf("%s: exit %d output %q report %+v; want exit %d output %q", c.script, code, out, rep, c.code, c.out)
		}
	}
}

// TestTracedAlreadyIsUnavailable: under strace -f the command cannot be
// traced a second time, and the guard says so instead of running it.
func TestTracedAlreadyIsUnavailable(t *testing.T) {
	need(t, "strace")
	self, _ := os.Executable()
	p := loadRules(t, rules)
	g, err := Prepare(p, false, self)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Cleanup()
	dir := t.TempDir()
	_, args, files := g.Wrap("", []string{"sh", "-c", "echo ran > " + filepath.Join(dir, "ran")}, nil)
	cmd := exec.Command("strace", append([]string{"-f", "-o", "/dev/null", self}, args[1:]...)...)
	cmd.ExtraFiles = files
	out, _ := cmd.CombinedOutput()
	rep := g.Report()
	if rep.Error == nil || rep.Error.Code != result.CodePolicyUnavailable {
		t.Fatalf("report %+v, output %s", rep, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Fatal("the command ran untraced")
	}
}

// TestToolchainsBehave runs go test, make -j2 and npm test under an
// allow-by-default policy: they pass, with the same exit status, as they
// do without the guard.
func TestToolchainsBehave(t *testing.T) {
	need(t, "go", "make", "bash")
	p := loadRules(t, rules)
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":       "module example.com/m\n\ngo 1.21\n",
		"m.go":         "package m\n\nfunc Add(a, b int) int { return a + b }\n",
		"m_test.go":    "package m\n\nimport (\"os/exec\"; \"testing\")\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 { t.Fatal(\"add\") }\n\tif err := exec.Command(\"true\").Run(); err != nil { t.Fatal(err) }\n}\n",
		"Makefile":     "all: a b c d\na b c d:\n\t@sleep 0.1; echo $@ > $@.out\nfail:\n\t@exit 3\n",
		"package.json": `{"name":"m","version":"1.0.0","scripts":{"test":"node -e \"process.exit(require('child_process').spawnSync('true').status)\""}}`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		argv []string
		code int
	}{
		{"go test", []string{"go", "test", "-count=1", "./..."}, 0},
		{"go vet", []string{"go", "vet", "./..."}, 0},
		{"make -j2", []string{"make", "-j2"}, 0},
		{"make failing", []string{"make", "fail"}, 2},
	}
	if _, err := exec.LookPath("npm"); err == nil {
		cases = append(cases, struct {
			name string
			argv []string
			code int
		}{"npm test", []string{"npm", "test", "--silent"}, 0})
	}
	for _, c := range cases {
		plain := exec.Command(c.argv[0], c.argv[1:]...)
		plain.Dir = dir
		want := 0
		if err := plain.Run(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("%s: %v", c.name, err)
			}
			want = ee.ExitCode()
		}
		if want != c.code {
			t.Fatalf("%s without the guard exited %d, want %d", c.name, want, c.code)
		}
		rep, code, out := guarded(t, p, false, dir, c.argv...)
		if code != want || rep.Killed != nil || rep.Error != nil {
			t.Errorf("%s under the guard: exit %d (without: %d), report %+v\n%s", c.name, code, want, rep, out)
		}
		if rep.Execs < 1 {
			t.Errorf("%s: the guard decided no exec", c.name)
		}
	}
	for _, f := range []string{"a", "b", "c", "d"} {
		if _, err := os.Stat(filepath.Join(dir, f+".out")); err != nil {
			t.Errorf("make -j2 did not build %s", f)
		}
	}
}

// TestReportNeverLostWhenTheCommandExitsFirst races a refused exec in the
// background against the command's own exit: whichever comes first, the
// forbidden program never runs, and a run the guard ended (exit 125, which
// sh -c 'exit 0' never is) always comes with the refusal in its report.
func TestReportNeverLostWhenTheCommandExitsFirst(t *testing.T) {
	p := loadRules(t, rules)
	refused := 0
	for i := 0; i < 20; i++ {
		dir := t.TempDir()
		rep, code, out := guarded(t, p, false, dir, "sh", "-c", `touch MARK & exit 0`)
		if _, err := os.Stat(filepath.Join(dir, "MARK")); err == nil {
			t.Fatalf("run %d: the forbidden touch ran (exit %d): %s", i, code, out)
		}
		switch code {
		case 0:
		case exitRefused:
			if rep.Killed == nil || rep.Killed.Rule == "" {
				t.Fatalf("run %d: exit %d without the refusal in the report: %+v, %s", i, code, rep, out)
			}
			refused++
		default:
			t.Fatalf("run %d: exit %d: %s", i, code, out)
		}
	}
	t.Logf("%d of 20 runs reached the refused exec before the command's exit", refused)
}

// TestGuardSeesChildrenLimitDeaths: a child killed by its file-size limit
// and reaped by its own parent (which then exits 0) is invisible to
// everyone but its parent and its tracer; the guard reports it, with no
// capability needed.
func TestGuardSeesChildrenLimitDeaths(t *testing.T) {
	p := loadRules(t, rules)
	dir := t.TempDir()
	rep, code, out := guarded(t, p, false, dir, "sh", "-c", `ulimit -f 1; sh -c 'head -c 5000 /dev/zero > big'; exit 0`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	found := false
	for _, d := range rep.Deaths {
		if d.Signal == int(syscall.SIGXFSZ) && d.Count >= 1 {
			found = true
		}
	}
	if !found {
		t.Fatalf("no SIGXFSZ death reported: %+v", rep.Deaths)
	}
}

// The attack modes of the test binary: run ARGV in a child made with
// CLONE_UNTRACED, which a tracer's fork and clone options cannot follow
// (through clone, or through clone3, which Go uses for CLONE_NEWTIME).
const (
	untracedCommand  = "__untraced"
	untraced3Command = "__untraced3"
)

func untracedChild(mode string, argv []string) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_UNTRACED}
	if mode == untraced3Command {
		cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWTIME
	}
	err := cmd.Run()
	var en syscall.Errno
	switch {
	case err == nil:
		os.Stdout.WriteString(mode + ": ran\n")
	case errors.As(err, &en):
		os.Stdout.WriteString(mode + ": " + unix.ErrnoName(en) + "\n")
	default:
		os.Stdout.WriteString(mode + ": " + err.Error() + "\n")
	}
	return 0
}

// TestNoUntracedChild: no process of the traced tree can make a child the
// guard does not trace (which could then exec a forbidden program unseen):
// clone(CLONE_UNTRACED) is refused, clone3 (flags in memory) is ENOSYS. The
// control shows the same child runs the program without the guard.
func TestNoUntracedChild(t *testing.T) {
	need(t, "touch")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := loadRules(t, rules)
	modes := []string{untracedCommand}
	if os.Geteuid() == 0 {
		modes = append(modes, untraced3Command) // CLONE_NEWTIME needs privilege
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			rep, code, out := guarded(t, p, false, dir, self, mode, "touch", "MARK")
			if _, err := os.Stat(filepath.Join(dir, "MARK")); err == nil {
				t.Fatalf("the forbidden touch ran in an untraced child (exit %d): %s %+v", code, out, rep)
			}
			want := map[string]string{untracedCommand: "EPERM", untraced3Command: "ENOSYS"}[mode]
			if !strings.Contains(out, mode+": "+want) {
				t.Errorf("output %q, want %s: %s", out, mode, want)
			}
			ctl := exec.Command(self, mode, "touch", "MARK")
			ctl.Dir = dir
			if b, err := ctl.CombinedOutput(); err != nil || !strings.Contains(string(b), mode+": ran") {
				t.Fatalf("control: %v %s", err, b)
			}
			if _, err := os.Stat(filepath.Join(dir, "MARK")); err != nil {
				t.Fatalf("control: the untraced child did not run: %v", err)
			}
		})
	}
}

// TestModifiedCopyOfAForbiddenProgram is the attack the guard cannot stop:
// a copy of a forbidden program with one byte appended (a file, or a memfd
// run by fexecve) is neither the program's inode nor its content, and the
// rules decide programs by name. Open: identity by file cannot name it;
// what such a copy does is the sandbox's to contain (README, "What neither
// layer sees").
func TestModifiedCopyOfAForbiddenProgram(t *testing.T) {
	t.Skip("open defect: a modified copy of a forbidden program (one byte appended) is not identified as that program")
	need(t, "bash", "touch")
	dir := t.TempDir()
	rep, code, out := guarded(t, loadRules(t, rules), false, dir, "bash", "-c",
		`cp "$(command -v touch)" harmless && printf '\0' >> harmless && ./harmless MARK`)
	if _, err := os.Stat(filepath.Join(dir, "MARK")); err == nil || rep.Killed == nil {
		t.Fatalf("the modified copy ran (exit %d): %s", code, out)
	}
}

// vmWriteCommand is the test binary's mode that writes its own memory
// with process_vm_writev, the call by which a process of the tree could
// rewrite another's argv between the guard's decision and the moment the
// program reads it (an exec of `git xush` decided, then its "x" made a
// "p"): it prints the errno, or "wrote".
const vmWriteCommand = "__vmwrite"

// vmTarget is what vmWrite overwrites (in static memory: a heap or stack
// address may be refused with EFAULT).
var vmTarget = [4]byte{'x', 'u', 's', 'h'}

func vmWrite() int {
	src, dst := []byte("push"), vmTarget[:]
	local := []unix.Iovec{{Base: &src[0]}}
	local[0].SetLen(len(src))
	remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&vmTarget[0])), Len: len(vmTarget)}}
	_, err := unix.ProcessVMWritev(os.Getpid(), local, remote, 0)
	var en syscall.Errno
	switch {
	case err == nil:
		os.Stdout.WriteString(vmWriteCommand + ": wrote " + string(dst) + "\n")
	case errors.As(err, &en):
		os.Stdout.WriteString(vmWriteCommand + ": " + unix.ErrnoName(en) + "\n")
	default:
		os.Stdout.WriteString(vmWriteCommand + ": " + err.Error() + "\n")
	}
	return 0
}

// TestNoMemoryRewriteOfATracee: no process of the traced tree can write
// another's memory with process_vm_writev (the guard decides an image on
// the argv in its memory, which another process could otherwise change
// after the decision); the control shows the call works without the guard.
func TestNoMemoryRewriteOfATracee(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_, _, out := guarded(t, loadRules(t, rules), false, t.TempDir(), self, vmWriteCommand)
	if !strings.Contains(out, vmWriteCommand+": EPERM") {
		t.Fatalf("process_vm_writev under the guard: %q, want EPERM", out)
	}
	b, err := exec.Command(self, vmWriteCommand).CombinedOutput()
	if err != nil || !strings.Contains(string(b), vmWriteCommand+": wrote push") {
		t.Fatalf("control: %v %s", err, b)
	}
}

// TestChainIsWhatWasExecuted: the parent chain of a refused exec is the
// argv each parent was decided on, not what it later wrote over its own
// command line (perl's $0), so the report cannot be made to blame an
// innocent command.
func TestChainIsWhatWasExecuted(t *testing.T) {
	need(t, "perl", "touch")
	dir := t.TempDir()
	rep, code, out := guarded(t, loadRules(t, rules), false, dir, "perl", "-e", `$0 = "make test"; system("touch", "MARK")`)
	if rep.Killed == nil {
		t.Fatalf("nothing was killed (exit %d): %s", code, out)
	}
	if len(rep.Killed.Chain) == 0 || rep.Killed.Chain[0][0] != "perl" {
		t.Fatalf("chain %q, want the perl command that ran", rep.Killed.Chain)
	}
}

// TestScriptIsDecidedAsItself: an exec of a #! script runs its
// interpreter with the script's path where argv[0] was, so the program the
// caller executed (a script named git, run as git push) is decided as that
// script with its arguments, also through #!/usr/bin/env and from a
// program that executes it by PATH.
func TestScriptIsDecidedAsItself(t *testing.T) {
	py := realPython(t)
	need(t, "env")
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, shebang := range map[string]string{"git": "#!/bin/sh", "curl": "#!/usr/bin/env sh"} {
		script := shebang + "\n: > \"$(dirname \"$0\")/../RAN-" + name + "\"\n"
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := loadRules(t, rules)
	for _, tc := range []struct{ name, code, code2 string }{
		{"git", `os.execv("bin/git", ["git", "push"])`, policy.Forbidden},
		{"curl", `os.execv("bin/curl", ["curl", "x"])`, policy.Prompt},
	} {
		rep, code, out := guarded(t, p, false, dir, py, "-c", "import os; "+tc.code)
		if _, err := os.Stat(filepath.Join(dir, "RAN-"+tc.name)); err == nil {
			t.Fatalf("%s: the script ran (exit %d): %s %+v", tc.name, code, out, rep)
		}
		if rep.Killed == nil || rep.Killed.Decision != tc.code2 {
			t.Fatalf("%s: killed %+v, want a %s exec", tc.name, rep.Killed, tc.code2)
		}
	}
	// A renamed copy of a script a rule names (found on PATH) is that
	// script.
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	b, err := os.ReadFile(filepath.Join(bin, "git"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "harmless"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	rep, code, out := guarded(t, loadRules(t, rules), false, dir, py, "-c", `import os; os.execv("bin/harmless", ["harmless", "push"])`)
	if _, err := os.Stat(filepath.Join(dir, "RAN-git")); err == nil || rep.Killed == nil || rep.Killed.Decision != policy.Forbidden {
		t.Fatalf("a renamed copy of the git script ran (exit %d): %s %+v", code, out, rep.Killed)
	}
	// A script nobody's rule names runs.
	if err := os.WriteFile(filepath.Join(bin, "ok"), []byte("#!/bin/sh\n: > \"$(dirname \"$0\")/../RAN-ok\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if rep, code, out := guarded(t, p, false, dir, py, "-c", `import os; os.execv("bin/ok", ["ok", "push"])`); code != 0 || rep.Killed != nil {
		t.Fatalf("an ordinary script was refused (exit %d): %s %+v", code, out, rep.Killed)
	}
	if _, err := os.Stat(filepath.Join(dir, "RAN-ok")); err != nil {
		t.Fatal(err)
	}
}

// TestChainWhenTheChildRunsFirst: the kernel may report a new child's
// exec before the fork event of the parent that made it (a loaded
// machine, the parent preempted in fork). The fault point holds every
// fork event back until its child has executed, so that order is
// certain: the refused touch's parent is still the script that ran it,
// not the shell that forked the script.
func TestChainWhenTheChildRunsFirst(t *testing.T) {
	need(t, "sh", "touch")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "s.sh"), []byte("#!/bin/sh\ntouch MARK\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(faultpoint.Env, "execguard.fork=late")
	rep, code, out := guarded(t, loadRules(t, rules), false, dir, "sh", "-c", "./s.sh; true")
	if rep.Killed == nil {
		t.Fatalf("nothing was killed (exit %d): %s", code, out)
	}
	if c := rep.Killed.Chain; len(c) == 0 || len(c[0]) < 2 || c[0][1] != "./s.sh" {
		t.Fatalf("chain %q, want the script first", c)
	}
	if _, err := os.Stat(filepath.Join(dir, "MARK")); err == nil {
		t.Fatal("touch ran")
	}
}
