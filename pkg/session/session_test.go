package session

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
)

// newTestServer builds a server with a live shell in dir, without the
// socket and the detached process: enough to drive the shell protocol.
func newTestServer(t testing.TB) *server {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	calls, err := newCallDir(dir, false, "")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{sdir: dir, calls: calls, busy: make(chan struct{}, 1), done: make(chan struct{}), finished: make(chan struct{}), dirty: make(chan struct{}, 1),
		spec: Spec{Shell: bash, ShellArgs: []string{"--noprofile", "--norc"}, Cwd: dir, Env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}}}
	s.bg = newBackground(filepath.Join(dir, "bg.log"), 1<<16)
	s.track = newTracker(os.Getpid())
	if err := s.startShell(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.killShell()
		proctree.KillAllDescendants(2 * time.Second)
	})
	return s
}

// runCall runs one command through the whole call path.
func runCall(t testing.TB, s *server, req CallRequest, cancel <-chan struct{}) (*result.Object, outcome) {
	t.Helper()
	if req.MaxOutput == 0 {
		req.MaxOutput = 1 << 16
	}
	if req.KillAfter == 0 {
		req.KillAfter = time.Second
	}
	s.mu.Lock()
	s.seq++
	n := s.seq
	s.mu.Unlock()
	c, err := s.prepareCall(n, req, &lineWriter{w: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer c.cleanup()
	res, out := s.execute(c, req, cancel, func() syscall.Signal { return 0 })
	obj := result.New().Set("exit_code", res.ExitCode).Set("status", res.Status).
		Set("stdout", func() string { c := res.Stdout.Snapshot(); return string(c.Head) + string(c.Tail) }()).Set("elapsed", res.Elapsed)
	return obj, out
}

func field(o *result.Object, k string) any { v, _ := o.Get(k); return v }

func TestCallsKeepState(t *testing.T) {
	s := newTestServer(t)
	steps := []struct {
		cmd    string
		stdout string
		code   int
	}{
		{"export A=1; B=2; f() { echo fn; }; alias ll=echo; cd /", "", 0},
		{"echo $A $B; f; pwd", "1 2\nfn\n/\n", 0},
		{"false", "", 1},
		{"(exit 7)", "", 7},
		{"", "", 0},
		{"echo 'unterminated", "", 2},
		{"echo after-syntax-error", "after-syntax-error\n", 0},
		{"set -e; false; echo no", "", 1},
		{"case $- in *e*) echo e-kept;; esac; set +e", "e-kept\n", 0},
		{"set -u; echo $NOPE; echo no", "", 1},
		{"set +u; PWD=/nowhere; echo $A", "1\n", 0},
	}
	for _, st := range steps {
		obj, out := runCall(t, s, CallRequest{Command: st.cmd}, nil)
		if got := field(obj, "stdout"); got != st.stdout {
			t.Errorf("%q: stdout %q, want %q", st.cmd, got, st.stdout)
		}
		if got := field(obj, "exit_code"); got != st.code {
			t.Errorf("%q: exit %v, want %d", st.cmd, got, st.code)
		}
		if out.ended || out.reset {
			t.Fatalf("%q: session ended=%v reset=%v", st.cmd, out.ended, out.reset)
		}
		if st.cmd == "set +u; PWD=/nowhere; echo $A" && out.cwd != "/" {
			t.Errorf("cwd %q, want / whatever $PWD says", out.cwd)
		}
	}
}

// Under errexit, every error bash reports itself (which makes bash exit,
// interactive or not) ends the call with its status and leaves the shell
// and its state alone, wherever it happens.
func TestErrexitErrorsEndTheCallNotTheShell(t *testing.T) {
	s := newTestServer(t)
	if _, out := runCall(t, s, CallRequest{Command: "export KEEP=yes; readonly RO=1; g() { set -eu; echo in-g; echo \"$1\"; echo no; }; cd /"}, nil); out.ended {
		t.Fatal("setup ended the shell")
	}
	cases := []struct {
		cmd    string
		stdout string
		code   int
	}{
		{"set -eu; echo $UNSET; echo no", "", 1},
		{"set -euo pipefail; echo ${UNSET}; echo no", "", 1},
		{"set -eu; g; echo no", "in-g\n", 1},
		{"set -eu; (echo $UNSET; echo no); echo no", "", 1},
		{"set -eu; v=$(echo $UNSET); echo no", "", 1},
		{"set -eu; echo $((UNSET + 1)); echo no", "", 1},
		{"set -e; echo ${UNSET:?gone}; echo no", "", 1},
		{"set -e; RO=2; echo no", "", 1},
		{"set -e; echo \"${KEEP y}\"; echo no", "", 1},
		{"set -e; if", "", 2},
		{"set -e; eval 'if'; echo no", "", 2},
		{"set -e; shopt -s failglob; echo none-*.zz; echo no", "", 1},
		{"shopt -u failglob; set -e; (false; echo no); echo no", "", 1},
		{"set -e; f() { false; echo no; }; f; echo no", "", 1},
		{"set -e; false || echo ok; if false; then :; fi; ! true; echo ok", "ok\nok\n", 0},
	}
	for _, c := range cases {
		obj, out := runCall(t, s, CallRequest{Command: c.cmd, Timeout: 20 * time.Second}, nil)
		if out.ended || out.reset {
			t.Fatalf("%q: session ended=%v reset=%v", c.cmd, out.ended, out.reset)
		}
		if got := field(obj, "stdout"); got != c.stdout {
			t.Errorf("%q: stdout %q, want %q", c.cmd, got, c.stdout)
		}
		if got := field(obj, "exit_code"); got != c.code {
			t.Errorf("%q: exit %v, want %d", c.cmd, got, c.code)
		}
		if out.cwd != "/" {
			t.Errorf("%q: cwd %q, want /", c.cmd, out.cwd)
		}
	}
	obj, _ := runCall(t, s, CallRequest{Command: "set +eu; echo $KEEP; shopt inherit_errexit"}, nil)
	if got := field(obj, "stdout"); got != "yes\ninherit_errexit\toff\n" {
		t.Errorf("state after the errors: %q", got)
	}
}

func TestTimeoutStopsTheWholeCall(t *testing.T) {
	s := newTestServer(t)
	mark := filepath.Join(t.TempDir(), "after")
	cases := []string{
		"sleep 30; touch " + mark,
		"for i in 1 2 3; do sleep 30; touch " + mark + "; done",
		"while :; do :; done; touch " + mark,
		"until [ -e /nonexistent ]; do sleep 0.05; done; touch " + mark,
		"bash -c 'trap \"exit 0\" INT; sleep 30 & wait'; touch " + mark,
		"trap '' INT; sleep 30; touch " + mark,
	}
	runCall(t, s, CallRequest{Command: "export KEEP=yes"}, nil)
	for _, cmd := range cases {
		start := time.Now()
		obj, out := runCall(t, s, CallRequest{Command: cmd, Timeout: 300 * time.Millisecond, KillAfter: 300 * time.Millisecond}, nil)
		if field(obj, "status") != "timeout" || field(obj, "exit_code") != 124 {
			t.Errorf("%q: %v %v", cmd, field(obj, "status"), field(obj, "exit_code"))
		}
		if out.reset || out.ended {
			t.Errorf("%q: reset=%v ended=%v", cmd, out.reset, out.ended)
		}
		if el := field(obj, "elapsed").(time.Duration); el < 300*time.Millisecond || el > time.Since(start) {
			t.Errorf("%q: elapsed %v not the real duration", cmd, el)
		}
		if _, err := os.Stat(mark); err == nil {
			t.Fatalf("%q: the rest of the call ran after the timeout", cmd)
		}
		runCall(t, s, CallRequest{Command: "trap - INT"}, nil)
	}
	obj, _ := runCall(t, s, CallRequest{Command: "echo $KEEP"}, nil)
	if field(obj, "stdout") != "yes\n" {
		t.Errorf("state lost: %q", field(obj, "stdout"))
	}
}

// cancelWhen returns a cancel channel closed once cond holds (polled,
// bounded: closed after a minute in any case): a cancel that waits for
// what the command does, not for a guessed time.
func cancelWhen(cond func() bool) chan struct{} {
	cancel := make(chan struct{})
	go func() {
		defer close(cancel)
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && !cond(); {
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return cancel
}

// cancelWhenRunning is cancelWhen a process below the test runs argv.
func cancelWhenRunning(argv ...string) chan struct{} {
	return cancelWhen(func() bool {
		snap, _ := proctree.Snapshot()
		for _, d := range proctree.Descendants(snap, os.Getpid()) {
			if a, _ := proctree.Argv(d.PID); slices.Equal(a, argv) {
				return true
			}
		}
		return false
	})
}

func TestCancelExits128PlusSignal(t *testing.T) {
	s := newTestServer(t)
	// The cancel comes once the command runs, not after a fixed 200 ms:
	// this is the fresh shell's first call, and a cancel before the shell
	// has run the call's line (which sets the protocol's interrupt trap)
	// finds no trap and resets the shell.
	cancel := cancelWhenRunning("sleep", "9731")
	obj, out := runCall(t, s, CallRequest{Command: "sleep 9731; echo no"}, cancel)
	if field(obj, "status") != "cancelled" || field(obj, "exit_code") != 130 || out.reset {
		t.Fatalf("%v %v reset=%v", field(obj, "status"), field(obj, "exit_code"), out.reset)
	}
}

func TestStuckShellIsReset(t *testing.T) {
	s := newTestServer(t)
	runCall(t, s, CallRequest{Command: "cd / ; export GONE=1"}, nil)
	old := s.currentShell().id
	// The interrupt comes once the shell ignores both signals, not after
	// a fixed 200 ms: one before its trap '' ran finds the shell
	// interruptible, and it is not reset. (Where the signal masks cannot
	// be read, a timeout stands in.)
	req := CallRequest{Command: "trap '' INT " + interruptSpec + "; while :; do :; done", KillAfter: 100 * time.Millisecond}
	var cancel chan struct{}
	want := "cancelled"
	if runtime.GOOS == "linux" {
		pid := s.currentShell().self.PID
		cancel = cancelWhen(func() bool { return ignores(pid, syscall.SIGINT) && ignores(pid, interruptSig) })
	} else {
		req.Timeout, want = 200*time.Millisecond, "timeout"
	}
	obj, out := runCall(t, s, req, cancel)
	if !out.reset || field(obj, "status") != want {
		t.Fatalf("want a reset, got reset=%v status=%v", out.reset, field(obj, "status"))
	}
	if s.currentShell().id == old || old.Alive() {
		t.Fatal("the stuck shell was not replaced")
	}
	obj, _ = runCall(t, s, CallRequest{Command: "echo \"[$GONE]\"; pwd"}, nil)
	if field(obj, "stdout") != "[]\n/\n" {
		t.Errorf("reset shell: %q", field(obj, "stdout"))
	}
}

func TestExitAndExecEndTheShell(t *testing.T) {
	for _, tc := range []struct {
		cmd    string
		cancel []string // cancel once this runs (the exec is done)
		code   int
		status string
	}{
		{"exit 5", nil, 5, "completed"},
		{"exec sh -c 'exit 6'", nil, 6, "completed"},
		// Cancelled once the exec is done, not timed out after 300 ms: an
		// interrupt before the fresh shell has even run the line (its
		// first) resets it, and one before the exec leaves it running.
		{"exec sleep 9732", []string{"sleep", "9732"}, 130, "cancelled"},
	} {
		s := newTestServer(t)
		var cancel chan struct{}
		if tc.cancel != nil {
			cancel = cancelWhenRunning(tc.cancel...)
		}
		obj, out := runCall(t, s, CallRequest{Command: tc.cmd, KillAfter: 200 * time.Millisecond}, cancel)
		if !out.ended || field(obj, "exit_code") != tc.code || field(obj, "status") != tc.status {
			t.Errorf("%q: ended=%v exit=%v status=%v", tc.cmd, out.ended, field(obj, "exit_code"), field(obj, "status"))
		}
		if el := field(obj, "elapsed").(time.Duration); el > 10*time.Second {
			t.Errorf("%q took %v", tc.cmd, el)
		}
	}
}

func TestBackgroundOutputGoesToTheLog(t *testing.T) {
	s := newTestServer(t)
	// The background writes only once the call has returned: a loaded
	// machine may take longer than any sleep to end a call.
	gate := filepath.Join(s.sdir, "go")
	obj, _ := runCall(t, s, CallRequest{Command: "(until [ -e " + gate + " ]; do sleep 0.01; done; echo late) & echo now"}, nil)
	if field(obj, "stdout") != "now\n" {
		t.Fatalf("stdout %q", field(obj, "stdout"))
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := readLog(s.sdir, LogsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if out.Data == "late\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("log %q", out.Data)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l := s.bg.list(); len(l) != 1 || l[0].Call != 1 {
		t.Errorf("background list %+v", l)
	}
}

func TestBgLogBoundedWithAbsoluteOffsets(t *testing.T) {
	dir := t.TempDir()
	l := &bgLog{path: filepath.Join(dir, "bg.log"), limit: 100}
	for i := 0; i < 30; i++ {
		l.write([]byte("line " + strings.Repeat("x", 4) + "\n")) // 10 bytes
	}
	st, _ := os.Stat(l.path)
	if st.Size() > 100 {
		t.Fatalf("log is %d bytes, limit 100", st.Size())
	}
	all, err := readLog(dir, LogsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if all.NextOffset != 300 || all.Offset+int64(len(all.Data)) != 300 {
		t.Fatalf("offsets %d..%d for %d bytes", all.Offset, all.NextOffset, len(all.Data))
	}
	first, _ := readLog(dir, LogsRequest{SinceLast: true})
	if first.DroppedBytes == 0 || first.NextOffset != 300 {
		t.Fatalf("first since-last %+v", first)
	}
	l.write([]byte("new\n"))
	next, _ := readLog(dir, LogsRequest{SinceLast: true})
	if next.Data != "new\n" || next.Offset != 300 || next.DroppedBytes != 0 {
		t.Fatalf("second since-last %+v", next)
	}
	tail, _ := readLog(dir, LogsRequest{Tail: 2})
	if tail.Data != "line xxxx\nnew\n" {
		t.Fatalf("tail %q", tail.Data)
	}
}

func TestCallDirRefusesPlants(t *testing.T) {
	dir := t.TempDir()
	d := &callDir{path: dir}
	target := filepath.Join(t.TempDir(), "target")
	os.WriteFile(target, []byte("keep"), 0o644)
	p := filepath.Join(dir, "planted.sh")
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	if err := d.writeFile(p, []byte("evil")); err == nil {
		t.Fatal("wrote through a planted symlink")
	}
	f := filepath.Join(dir, "planted.fifo")
	if err := os.Symlink(target, f); err != nil {
		t.Fatal(err)
	}
	if _, err := d.fifo(f); err == nil {
		t.Fatal("made a FIFO over a planted symlink")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatal("target changed")
	}
	if a, b := d.name(1, "sh"), d.name(1, "sh"); a == b {
		t.Fatal("call file names are guessable")
	}
}

func TestPeerRefusal(t *testing.T) {
	self := peerIdentity{UID: 1000, UserNS: "u", MountNS: "m", NetNS: "n"}
	cases := []struct {
		peer peerIdentity
		ok   bool
	}{
		{self, true},
		{peerIdentity{UID: 0, UserNS: "u", MountNS: "m", NetNS: "n"}, true},
		{peerIdentity{UID: 1001, UserNS: "u", MountNS: "m", NetNS: "n"}, false},
		{peerIdentity{UID: 1000, UserNS: "x", MountNS: "m", NetNS: "n"}, false},
		{peerIdentity{UID: 1000, UserNS: "u", MountNS: "x", NetNS: "n"}, false},
		{peerIdentity{UID: 1000, UserNS: "u", MountNS: "m", NetNS: "x"}, false},
		{peerIdentity{UID: 1000, UserNS: "u", MountNS: "m", NetNS: "n", NoNewPrivs: true}, false},
		// A caller under a runtime policy's guard drives only a session
		// that guard traces.
		{peerIdentity{UID: 1000, UserNS: "u", MountNS: "m", NetNS: "n", Guard: "42"}, false},
	}
	for i, c := range cases {
		if got := self.refuses(c.peer) == ""; got != c.ok {
			t.Errorf("case %d: admitted=%v, want %v", i, got, c.ok)
		}
	}
	nnp := self
	nnp.NoNewPrivs = true
	if nnp.refuses(nnp) != "" {
		t.Error("a server with no_new_privs must admit callers like itself")
	}
	traced := self
	traced.Guard = "42"
	if traced.refuses(traced) != "" {
		t.Error("a session its guard traces must admit that guard's callers")
	}
	if traced.refuses(self) != "" {
		t.Error("an untraced caller must be admitted by a traced session")
	}
}

func TestProtocolLinesQuote(t *testing.T) {
	p := callProto{marker: "M", n: 3, vars: newVars(), prev: newVars(), ctlIn: "/x/in", ctlOut: "/x/o'ut", script: "/x/it's.sh", stdin: os.DevNull, outs: []string{"/x/o", "/x/e"}}
	l := callLine(p, "N")
	if !strings.Contains(l, `\. '/x/it'\''s.sh'`) || !strings.HasSuffix(l, "\n") || strings.Count(l, "\n") != 1 {
		t.Errorf("call line %q", l)
	}
	// Every command the protocol runs is a quoted builtin (no alias), an
	// assignment or one of its own functions.
	unquoted := regexp.MustCompile(`(^|[;{|&]|\(\)|\bthen\b|\bdo\b|\)) *([a-z.:]+)( |;|$)`)
	w := p
	w.wrapTrap, w.trapFIFO, w.nofile = true, "/x/traps", [2]uint64{1024, 4096}
	texts := []string{l, probeLine(p, "N"), string(callFile(p, "true", userTraps{ret: "trap -- 'echo r' RETURN\n", errAction: "echo e", errSet: true}, "/x/traps"))}
	texts = append(texts, callLine(w, "N"), probeLine(w, "N"), string(callFile(w, "trap x ERR", userTraps{}, "/x/traps")), w.expand(trapFunc))
	for _, text := range texts {
		for _, m := range unquoted.FindAllStringSubmatch(text, -1) {
			switch m[2] {
			case "case", "esac", "while", "for", "do", "done", "in":
			default:
				t.Errorf("unquoted command %q in %q", m[2], text)
			}
		}
	}
	// The call's end and the probe line are parsed with the command's
	// aliases, which bash expands even for reserved words: they have none.
	reserved := regexp.MustCompile(`(^|[;{|&]|\)) *(case|esac|if|then|fi|for|while|until|do|done|select|function)( |;|$)`)
	for _, q := range []callProto{p, w} {
		for _, text := range []string{q.callEnd("/x/traps"), probeLine(q, "N")} {
			if m := reserved.FindString(text); m != "" {
				t.Errorf("reserved word %q in %q", m, text)
			}
		}
	}
}

// TestProbeOfAnExecdShell: once exec replaced the shell, nothing reads its
// input, so a probe's write fails, and the control channel has closed (or
// is about to). The probe must report the channel closed, so that the
// interrupt ends the session rather than reset a shell that is not stuck
// but gone, however the reaper of the process is scheduled.
func TestProbeOfAnExecdShell(t *testing.T) {
	for _, closeLater := range []bool{false, true} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Close() // exec closed the shell's saved input
		sh := &shell{stdin: w, lines: make(chan string), exited: make(chan struct{}), marker: newMarker()}
		if closeLater {
			go func() { sh.lines <- "some output"; close(sh.lines) }()
		} else {
			close(sh.lines)
		}
		if sh.probe(time.Minute) || !sh.closed {
			t.Errorf("closeLater=%v: probe of an exec'd shell: closed=%v, want true", closeLater, sh.closed)
		}
		w.Close()
	}
}

// TestErrexitAfterAnInterrupt: a call interrupted by its timeout leaves
// errexit working for the calls after it.
func TestErrexitAfterAnInterrupt(t *testing.T) {
	s := newTestServer(t)
	if obj, _ := runCall(t, s, CallRequest{Command: "sleep 6191", Timeout: 300 * time.Millisecond}, nil); field(obj, "exit_code") != 124 {
		t.Fatalf("timeout: %v", obj)
	}
	for range 2 {
		obj, out := runCall(t, s, CallRequest{Command: "(set -e; false; echo no); set -e; false; echo no", Timeout: 20 * time.Second}, nil)
		if out.reset || out.ended || field(obj, "stdout") != "" || field(obj, "exit_code") != 1 {
			b, _ := os.ReadFile(filepath.Join(s.sdir, "shell.log"))
			t.Fatalf("errexit after an interrupt: %v %+v; shell log:\n%s", obj, out, b)
		}
	}
}

// TestSavedTraps runs the call file's end in a real bash and reads what it
// wrote: the user's RETURN trap and ERR action come back exactly (quotes,
// newlines), an unset trap reads as none, the protocol's own ERR trap
// reads as "the user has none", and output without the sentinels (the end
// did not run) changes nothing.
func TestSavedTraps(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	cases := []struct {
		name, setup       string
		ret, errAction    string
		errSet, untouched bool
	}{
		{name: "none", setup: ``},
		{name: "return", setup: `trap 'echo ret' RETURN`, ret: "trap -- 'echo ret' RETURN\n"},
		{name: "err", setup: `trap 'echo "it'\''s $?"' ERR`, errAction: `echo "it's $?"`, errSet: true},
		{name: "err multi-line", setup: "trap 'echo a\necho b' ERR", errAction: "echo a\necho b", errSet: true},
		{name: "err ignored", setup: `trap '' ERR`, errAction: "", errSet: true},
		{name: "protocol's err", setup: `trap -- "$ERR" ERR`, untouched: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "traps")
			p := callProto{marker: "M", n: 1, vars: newVars(), ctlIn: os.DevNull, ctlOut: os.DevNull}
			script := p.functions() + "\nERR=" + shellQuote(p.errAction()) + "\n" + c.setup + "\n" + p.callEnd(fifo)
			if err := os.WriteFile(fifo, nil, 0o600); err != nil { // a plain file stands in for the FIFO
				t.Fatal(err)
			}
			out, err := exec.Command(bash, "--norc", "-c", script).CombinedOutput()
			if err != nil {
				t.Fatalf("bash: %v: %s", err, out)
			}
			b, err := os.ReadFile(fifo)
			if err != nil {
				t.Fatal(err)
			}
			prev := userTraps{errAction: "prev", errSet: true}
			got := prev
			if !savedTraps(b, p.errAction(), &got) {
				t.Fatalf("sentinels not found in %q", b)
			}
			want := userTraps{ret: c.ret, errAction: c.errAction, errSet: c.errSet}
			if c.untouched {
				want.errAction, want.errSet = prev.errAction, prev.errSet
			}
			if got != want {
				t.Errorf("got %+v, want %+v (from %q)", got, want, b)
			}
		})
	}
	got := userTraps{ret: "r", errAction: "e", errSet: true}
	if savedTraps([]byte("trap -- 'x' RETURN\n"), "e", &got) || got != (userTraps{ret: "r", errAction: "e", errSet: true}) {
		t.Errorf("output of an end that did not run changed the traps: %+v", got)
	}
}

// TestCallDirStock: the files made ahead are one call's, fresh (never
// another call's), taken once; a merged call gets one FIFO and the other
// goes; nothing is made or kept once the directory is removed.
func TestCallDirStock(t *testing.T) {
	d, err := newCallDir(t.TempDir(), false, "")
	if err != nil {
		t.Fatal(err)
	}
	entries := func() int {
		es, err := os.ReadDir(d.path)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	d.stock(1)
	d.stock(1) // a set is ready: no second one
	if n := entries(); n != 4 {
		t.Fatalf("%d files made ahead, want 4 (script, two output FIFOs, trap FIFO)", n)
	}
	a, err := d.files(1, []string{"stdout", "stderr"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.files(2, []string{"stdout", "stderr"}) // none ready: fresh
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range []*callFiles{a, b} {
		for _, p := range append([]string{c.script}, c.fifos[0].path, c.fifos[1].path, c.traps) {
			if seen[p] {
				t.Fatalf("%s given twice", p)
			}
			seen[p] = true
		}
		for _, p := range []string{c.fifos[0].path, c.traps} {
			if st, err := os.Lstat(p); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
				t.Fatalf("%s is not a FIFO: %v", p, err)
			}
		}
		if err := fill(c.w, c.script, []byte("echo hi\n")); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(c.script); string(got) != "echo hi\n" {
			t.Fatalf("script holds %q", got)
		}
		// What the shell writes reaches the reader made ahead.
		if _, err := c.fifos[1].w.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1)
		if _, err := c.fifos[1].r.Read(buf); err != nil || buf[0] != 'x' {
			t.Fatalf("read %q, %v", buf, err)
		}
		c.w = nil
		c.discard()
	}
	if n := entries(); n != 0 {
		t.Fatalf("%d files left after discard", n)
	}
	d.stock(3)
	m, err := d.files(3, []string{"output"})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.fifos) != 1 || entries() != 3 {
		t.Fatalf("merged call: %d FIFOs, %d files", len(m.fifos), entries())
	}
	m.discard()
	d.stock(4)
	d.remove()
	d.stock(5)
	if _, err := os.Stat(d.path); !os.IsNotExist(err) {
		t.Fatalf("directory still there after remove: %v", err)
	}
	if d.ready != nil {
		t.Fatal("files kept after remove")
	}
}
