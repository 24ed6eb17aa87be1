package session

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/pkg/execguard"
	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
)

// The shell protocol.
//
// The shell is bash started interactive (-i, no line editing, no startup
// files), reading its commands from a pipe, because an interactive bash is
// what handles an interrupt the way a person at a terminal expects: SIGINT
// abandons the whole command line (the rest of a list, the remaining
// iterations of a loop) and the shell returns to its prompt with all of its
// state. Its stdout and stderr are the control channel: the only thing the
// server reads from it is the prompt, and the prompt carries the bookkeeping.
//
// Each call is one line:
//
//	__agentsh_n=N; __agentsh_s=0; PS1=$'\n'"MARK N "'$?'$'\n'; __agentsh_p=${POSIXLY_CORRECT+x}; POSIXLY_CORRECT=y \:; \. 'CALL' <'IN' >'OUT' 2>'ERR' || __agentsh_s=$?; PS1=$'\n'"MARK N $__agentsh_s"$'\n'; PROMPT_COMMAND=()
//
// The first prompt is for a line bash abandons whole, as it does for some
// errors it reports (an unbound variable in arithmetic under set -u): the
// prompt then still ends the call, with the status bash left.
//
// Nothing on it can be shadowed by what a command defines: assignments are
// syntax, and "." is a special builtin that posix mode (switched on by the
// assignment to POSIXLY_CORRECT) finds before any function; the backslash
// stops alias expansion. The assignment is made in front of ":", a special
// builtin, so that it lasts and bash keeps the options posix mode changes
// (inherit_errexit) to put them back when the mode is switched off; a plain
// assignment would leave inherit_errexit on. The call file's first line puts the user's posix
// mode back before the user's text runs. The exit status and the fact that
// the call is over reach the server through the prompt the shell prints
// after the line, so no command (printf, echo, builtin) is involved; the
// working directory is read from the kernel (proctree.Cwd), so $PWD cannot lie to it.
//
// Interrupting a call (timeout, cancellation): the shell is stopped
// (SIGSTOP) so that it cannot start the next command of the list, the
// call's processes get SIGINT and, after the grace, SIGKILL, and the shell
// gets SIGUSR2 and SIGCONT. Its USR2 trap raises SIGINT in the shell itself,
// at a moment it is not waiting for a child, which bash honours by
// abandoning the line however the child died (a child that catches SIGINT
// and exits 0 would otherwise let bash go on with the list). A probe line
// then proves the shell is back at its prompt.
//
// set -e and set -u: bash exits, interactive or not, on any error it
// reports itself (an unbound variable, a bad substitution, ${x:?}, a
// readonly assignment, a syntax error) while errexit is in force, before
// any trap can act. So errexit is never in force in the session's shell
// during a call: the call file is sourced as the left side of ||, and bash
// runs a source whose status is tested with errexit suspended, for the
// whole file, while "set -e" inside it still sets the option ($-, $SHELLOPTS,
// set -o report it). The ERR trap, which bash runs under exactly the
// conditions errexit acts on, carries errexit out instead: in the
// session's shell it turns errexit off, records that it did, and
// interrupts the line as above (the next call's file turns errexit back
// on); in a subshell it exits with the failing status. The call ends with
// that status; the session survives. An error bash reports (set -u) abandons
// the complete command it occurs in, as at an interactive prompt, and the
// call's status is 1 when that command was its last. An explicit exit
// still ends the session. bash takes the ERR trap away while such a source
// runs and puts the one from before back when it returns, so the call
// file's first line sets it again. A command's own ERR trap lasts for its
// call; "! cmd" under set -e does not suspend errexit inside cmd (a list
// or function), since bash does that only when errexit is in force.

const (
	// probeEvery is how often a probe line is repeated while the server
	// waits for an interrupted shell to come back: a probe the shell read
	// while it was handling the interrupt is discarded with the line.
	probeEvery = 300 * time.Millisecond
	// recoverWait bounds the wait for an interrupted shell to answer a
	// probe; a shell that does not by then is replaced.
	recoverWait = 2 * time.Second
)

// shellInit is the first input of every shell: no prompt noise, no
// history, no mail checks, errtrace, and the two traps of the protocol.
func shellInit(marker string) string {
	// USR2: keep the user's INT trap aside (the probe restores it), then
	// raise SIGINT at ourselves. "builtin" is made safe first: a function
	// of that name would shadow it even when quoted.
	usr2 := `__agentsh_q=${POSIXLY_CORRECT+x}; POSIXLY_CORRECT=y \:; __agentsh_int=$(\trap -p INT); \trap - INT; \unset -f builtin; ` +
		`case $__agentsh_q in "") \unset POSIXLY_CORRECT;; esac; \builtin kill -INT "$BASHPID"`
	return `PS1=; PS2=; PS4='+ '; HISTFILE=; MAILCHECK=; PROMPT_COMMAND=(); set +H +o history -E; ` +
		`__agentsh_err=` + shellQuote(errTrap(marker)) + `; trap ` + shellQuote(usr2) + ` USR2; trap -- "$__agentsh_err" ERR` + "\n"
}

// errTrap is the ERR trap that carries out errexit (see the protocol
// above): in the session's own shell it ends the call with the failing
// status; in a subshell it exits, as errexit would. The prompt is set here
// because the interrupt discards the rest of the call line, where it would
// be set otherwise.
func errTrap(marker string) string {
	return `__agentsh_t=$?; case $BASHPID:$SHELLOPTS in ` +
		`"$$":*errexit*) ` +
		`__agentsh_q=${POSIXLY_CORRECT+x}; POSIXLY_CORRECT=y \:; \set +e; __agentsh_e=1; PROMPT_COMMAND=(); ` +
		`PS1=$'\n'"` + marker + ` ${__agentsh_n-0} $__agentsh_t"$'\n'; \unset -f builtin; ` +
		`case $__agentsh_q in "") \unset POSIXLY_CORRECT;; esac; \builtin kill -INT "$BASHPID";; ` +
		`*:*errexit*) POSIXLY_CORRECT=y \:; \exit "$__agentsh_t";; esac`
}

// callPrefix is the call file's first line: the ERR trap back (see the
// protocol above), errexit back on if the ERR trap turned it off, the user's posix mode back, and a status of 0 for an
// empty command. It runs in posix mode, so set and unset are the builtins.
const callPrefix = `\trap -- "$__agentsh_err" ERR; case ${__agentsh_e-} in 1) \set -e; __agentsh_e=;; esac; case $__agentsh_p in "") \unset POSIXLY_CORRECT;; esac; __agentsh_p=r` + "\n"

// callLine is the line that runs call n.
func callLine(marker string, n int, script, stdin string, outs []string) string {
	redir := fmt.Sprintf(">%s 2>&1", shellQuote(outs[0]))
	if len(outs) == 2 {
		redir = fmt.Sprintf(">%s 2>%s", shellQuote(outs[0]), shellQuote(outs[1]))
	}
	return fmt.Sprintf(`__agentsh_n=%d; __agentsh_s=0; PS1=$'\n'"%s %d "'$?'$'\n'; __agentsh_p=${POSIXLY_CORRECT+x}; POSIXLY_CORRECT=y \:; \. %s <%s %s || __agentsh_s=$?; PS1=$'\n'"%s %d $__agentsh_s"$'\n'; PROMPT_COMMAND=()`+"\n",
		n, marker, n, shellQuote(script), shellQuote(stdin), redir, marker, n)
}

// probeLine asks an interrupted shell to show it is back at its prompt. It
// restores what the interrupt set aside: the user's INT trap, and the
// user's posix mode if the call file never got to restore it.
func probeLine(marker, tag string) string {
	return `__agentsh_q=${POSIXLY_CORRECT+x}; POSIXLY_CORRECT=y \:; \eval "${__agentsh_int-}"; __agentsh_int=; ` +
		`case ${__agentsh_p-r} in r) ;; *) __agentsh_q=$__agentsh_p;; esac; __agentsh_p=r; ` +
		`case $__agentsh_q in "") \unset POSIXLY_CORRECT;; esac; ` +
		fmt.Sprintf(`PS1=$'\n'"%s %s 0"$'\n'; PROMPT_COMMAND=()`, marker, tag) + "\n"
}

// shell is one running shell process and its control channel.
type shell struct {
	cmd *exec.Cmd
	// id is the process the server started and waits for: the shell, or
	// the sandbox helper (PID 1 of the sandbox's PID namespace) or the
	// policy guard's traced first process that the shell runs under. Its
	// death is the shell's end, and killing its group kills everything.
	id proctree.ID
	// self is the shell itself, which the interrupt stops and signals
	// and whose working directory is the session's: id, or the helper's
	// only child in a sandbox (the helper ignores signals and stays where
	// it started).
	self   proctree.ID
	stdin  io.WriteCloser
	lines  chan string   // the control channel, line by line; closed at EOF
	exited chan struct{} // closed once the process is reaped
	status *os.ProcessState
	marker string
	closed bool // the control channel closed during an interrupt
}

// startShell starts a fresh shell in cwd and waits until it answers.
func (s *server) startShell(cwd string) error {
	// Interactive, for its handling of SIGINT (see above); no line editing:
	// the input is a pipe.
	argv := append(append([]string{s.spec.Shell}, s.spec.ShellArgs...), "--noediting", "-i")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = cwd
	cmd.Env = s.spec.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if s.sandbox != nil {
		// The shell starts inside the sandbox helper (its own program
		// or this executable), so every command of the session inherits the confinement.
		exe, _ := os.Executable()
		w := s.sandbox.Wrap(exe, "agentsh", argv, s.spec.Env)
		cmd.Path, cmd.Args, cmd.Env, cmd.SysProcAttr = w.Path, w.Argv, w.Env, w.SysProcAttr
	}
	// Under a policy the shell runs traced by the policy guard (this
	// executable again), which decides each exec with the call's policy.
	var guardFiles []*os.File
	if s.spec.PolicyGuard {
		exe, _ := os.Executable()
		g, files, err := execguard.PrepareSession(exe)
		if err != nil {
			return err
		}
		if s.policy != nil {
			s.policy.Close()
		}
		s.policy, guardFiles = g, files
		if s.sandbox != nil {
			g.Guard().TrustFirst()
		}
		cmd.Args = g.Guard().Argv(cmd.Path, cmd.Args)
		cmd.Path = exe
		cmd.ExtraFiles = files
	}
	// A session of its own: no controlling terminal, and a process group
	// whose id is the shell's pid, for the final kill.
	cmd.SysProcAttr.Setsid = true
	if s.guard != nil {
		s.guard.Apply(cmd.SysProcAttr)
		cmd.Env = s.guard.Env(cmd.Env)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return result.Errorf(result.CodeSessionStartFailed, "pipe: %v", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return result.Errorf(result.CodeSessionStartFailed, "pipe: %v", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if s.sandbox != nil {
		// --net proxy: the shell's namespace hands its proxy listener over.
		files, started, err := s.sandbox.Launch()
		if err != nil {
			pr.Close()
			pw.Close()
			return err
		}
		defer started()
		cmd.ExtraFiles = files
	}
	err = cmd.Start()
	pw.Close()
	for _, f := range guardFiles {
		f.Close()
	}
	if err != nil {
		pr.Close()
		return result.Errorf(result.CodeSessionStartFailed, "cannot start the shell %s: %v", s.spec.Shell, err).Wrap(err)
	}
	sh := &shell{cmd: cmd, stdin: in, lines: make(chan string, 64), exited: make(chan struct{}), marker: newMarker()}
	shellPID := cmd.Process.Pid
	if s.policy != nil {
		// The shell is the guard's child: signals, the cwd and the
		// shell's identity are its own, not the guard's.
		if shellPID, err = s.policy.Started(30 * time.Second); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			pr.Close()
			if rerr := s.policy.Guard().Report().Err(); rerr != nil {
				return rerr
			}
			return err
		}
	}
	sh.id, _ = proctree.Identify(shellPID)
	sh.self = sh.id
	if s.guard != nil {
		s.guard.Watch(sh.id)
	}
	log, _ := os.OpenFile(filepath.Join(s.sdir, "shell.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	go sh.readControl(pr, log)
	go func() {
		_ = cmd.Wait()
		sh.status = cmd.ProcessState
		close(sh.exited)
	}()
	s.mu.Lock()
	s.sh = sh
	s.rec.ShellPID, s.rec.ShellStart, s.rec.Cwd = sh.id.PID, sh.id.Start, cwd
	s.mu.Unlock()

	if _, err := io.WriteString(in, shellInit(sh.marker)+probeLine(sh.marker, "init")); err != nil {
		return result.Errorf(result.CodeSessionStartFailed, "the shell did not accept input: %v", err)
	}
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	if _, why := sh.await("init", t.C, nil); why != gotMarker {
		s.killShell()
		if s.sandbox != nil {
			if err := s.sandbox.Failure(); err != nil {
				return err
			}
		}
		return result.Errorf(result.CodeSessionStartFailed, "the shell %s did not start (see %s)", s.spec.Shell, filepath.Join(s.sdir, "shell.log"))
	}
	if s.sandbox != nil {
		// The shell answered, so it runs: it is the helper's child, and
		// nothing else runs in the sandbox yet.
		self, err := onlyChild(sh.id)
		if err != nil {
			s.killShell()
			return result.Errorf(result.CodeSessionStartFailed, "cannot find the shell inside the sandbox: %v", err)
		}
		sh.self = self
	}
	return nil
}

// onlyChild is the one live child of parent.
func onlyChild(parent proctree.ID) (proctree.ID, error) {
	snap, err := proctree.Snapshot()
	if err != nil {
		return proctree.ID{}, err
	}
	var found []proctree.Stat
	for _, p := range snap {
		if p.PPID == parent.PID && !p.Dead() {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		return proctree.ID{}, fmt.Errorf("process %d has %d children, want 1", parent.PID, len(found))
	}
	return proctree.ID{PID: found[0].PID, Start: found[0].StartTime}, nil
}

// readControl splits the control channel into lines. Marker lines go to
// the server; everything else (startup warnings, a top-level trap's
// output) goes to the shell log, bounded.
func (sh *shell) readControl(r io.ReadCloser, log *os.File) {
	defer r.Close()
	if log != nil {
		defer log.Close()
	}
	logged := 0
	br := bufio.NewReaderSize(r, 16<<10)
	for {
		l, err := br.ReadString('\n')
		if l != "" {
			l = strings.TrimSuffix(l, "\n")
			if strings.HasPrefix(l, sh.marker+" ") {
				sh.lines <- l
			} else if log != nil && logged < 1<<20 {
				n, _ := log.WriteString(l + "\n")
				logged += n
			}
		}
		if err != nil {
			close(sh.lines)
			return
		}
	}
}

// Why await returned.
const (
	gotMarker = iota
	gotEOF    // the control channel closed: the shell exited or exec'd
	gotTimer
	gotStop
)

// await reads the control channel until the marker line tagged tag and
// returns the status it carries, or why it stopped waiting. Marker lines of
// other tags (an abandoned call, an earlier probe) are skipped.
func (sh *shell) await(tag string, t <-chan time.Time, stop <-chan struct{}) (int, int) {
	for {
		select {
		case l, open := <-sh.lines:
			if !open {
				return 0, gotEOF
			}
			f := strings.Fields(l)
			if len(f) != 3 || f[1] != tag {
				continue
			}
			code, err := strconv.Atoi(f[2])
			if err != nil {
				// The prompt set before the call ran, unexpanded (the
				// command turned promptvars off): the line was abandoned.
				code = 1
			}
			return code, gotMarker
		case <-t:
			return 0, gotTimer
		case <-stop:
			return 0, gotStop
		}
	}
}

func (sh *shell) gone() bool {
	select {
	case <-sh.exited:
		return true
	default:
		return false
	}
}

// cwd is the shell's real working directory, whatever $PWD says.
func (sh *shell) cwd() string {
	p, err := proctree.Cwd(sh.self.PID)
	if err != nil {
		return ""
	}
	return p
}

// interrupt brings a shell that is running a call back to its prompt, as
// Ctrl-C at a terminal does, and reports whether it answered. spare tells
// the processes that were there before the call (background jobs of earlier
// calls), which are left alone. The first signal to the call's processes is
// SIGINT; what still lives after grace gets SIGKILL.
func (sh *shell) interrupt(grace time.Duration, spare func(proctree.Stat) bool) (killed bool, ok bool) {
	pid := sh.self.PID
	if sh.gone() {
		return false, false
	}
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	tree := proctree.Tree{Root: os.Getpid(), Spare: spare}
	had := tree.Signal(syscall.SIGINT) > 0
	if had {
		// A call process that is stopped (SIGTSTP, or frozen by the
		// policy guard at a refused exec) would hold the SIGINT until
		// the grace ran out: wake it to take it.
		tree.Signal(syscall.SIGCONT)
		if !waitQuiet(tree, grace) {
			tree.Signal(syscall.SIGKILL)
			killed = true
			waitQuiet(tree, time.Second)
		}
	}
	_ = syscall.Kill(pid, syscall.SIGUSR2)
	_ = syscall.Kill(pid, syscall.SIGCONT)
	if sh.probe(recoverWait) {
		return killed, true
	}
	if sh.closed || !treeAlive(tree) {
		return killed, false // nothing of the call holds it: the shell is stuck
	}
	// Something the call started meanwhile still holds the shell: kill it
	// and ask once more.
	tree.Signal(syscall.SIGKILL)
	killed = true
	_ = syscall.Kill(pid, syscall.SIGUSR2)
	return killed, sh.probe(recoverWait)
}

// probe sends probe lines until one is answered, within limit. It fails
// as soon as the control channel closes (the shell exited, or exec
// replaced it): sh.closed then says so.
func (sh *shell) probe(limit time.Duration) bool {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for k := 1; ; k++ {
		tag := "p" + strconv.Itoa(k)
		var every *time.Timer // nil: no further probe
		if _, err := io.WriteString(sh.stdin, probeLine(sh.marker, tag)); err == nil {
			every = time.NewTimer(probeEvery * time.Duration(k))
		}
		// A write that fails says nothing reads the shell's input any
		// more: the shell exited, or exec replaced it (which closes its
		// saved input and control channel). That is not yet a verdict:
		// the control channel's end is, and it follows.
		var next <-chan time.Time
		if every != nil {
			next = every.C
		}
		_, why := sh.awaitAny(tag, next, deadline.C)
		if every != nil {
			every.Stop()
		}
		switch why {
		case gotMarker:
			return true
		case gotEOF:
			sh.closed = true
			return false
		case gotStop:
			return false
		}
	}
}

// awaitAny is await for a probe: any probe tag up to tag counts, since an
// earlier probe answering late proves the same thing.
func (sh *shell) awaitAny(tag string, t <-chan time.Time, stop <-chan time.Time) (int, int) {
	last, _ := strconv.Atoi(tag[1:])
	for {
		select {
		case l, open := <-sh.lines:
			if !open {
				return 0, gotEOF
			}
			f := strings.Fields(l)
			if len(f) != 3 || !strings.HasPrefix(f[1], "p") {
				continue
			}
			if k, err := strconv.Atoi(f[1][1:]); err == nil && k >= 1 && k <= last {
				return 0, gotMarker
			}
		case <-t:
			return 0, gotTimer
		case <-stop:
			return 0, gotStop
		}
	}
}

// waitQuiet waits up to d for every process of the tree to be gone
// (zombies count as gone: a stopped shell cannot reap its children).
func waitQuiet(tree proctree.Tree, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		if !treeAlive(tree) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func treeAlive(tree proctree.Tree) bool {
	snap, err := proctree.Snapshot()
	if err != nil {
		return false
	}
	for _, p := range proctree.Descendants(snap, tree.Root) {
		if !p.Dead() && (tree.Spare == nil || !tree.Spare(p)) {
			return true
		}
	}
	return false
}

// shellQuote quotes s for the shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
