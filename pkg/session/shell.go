package session

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
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
// Each call is one line (NONCE is fresh random for every call):
//
//	{ __agentsh_y=$-; __agentsh_p=${POSIXLY_CORRECT+x}; POSIXLY_CORRECT=y \:; \set +x; } 2>/dev/null; ...; __agentsh_a=$'\n'"MARK aN 0"$'\n'; PS1=$__agentsh_a; __agentsh_n=N; ...; { \. 'CALL' <'IN' >'OUT' 2>'ERR' || __agentsh_s=$?; ...; \set +x; } 2>/dev/null; ...; \trap - DEBUG; ...; PS0=; PS1=$'\n'"MARK cNONCE $__agentsh_s"$'\n'; PROMPT_COMMAND=()
//
// followed at once by a probe line (see below).
//
// The prompt that ends a call carries NONCE, which exists only in the
// line the server writes and which bash has read whole (to parse it)
// before the call file runs: no command can print it, so none can end its
// call early or forge its status, not through PS0, a DEBUG trap (taken
// away before the nonce is reached: a DEBUG trap and PS0 last for their
// call) nor a write to the shell's saved descriptors. MARK, the prefix of
// every protocol line, is no secret. The first prompt ("aN", public) is
// the one bash shows when it abandons the line: an interrupt, errexit
// carried out (see below), a SIGINT the command sent its own process group
// or the shell, an error bash abandons the whole line for (an unbound
// variable in arithmetic under set -u). On it the server sends a probe
// line with a fresh nonce, which bash reads only when it is back at its
// prompt, and which reports the status the line ended with: errexit's
// (__agentsh_f), else bash's own ($?, 130 for a SIGINT). A command that
// prints "aN" itself only makes the probe wait in the pipe until its call
// really ends. A prompt with any other tag means the protocol's own
// assignments failed or were skipped (a readonly PS1, extdebug with a DEBUG
// trap that fails): the call's status is unknown, and the shell is
// replaced (session_reset).
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
// then proves the shell is back at its prompt. bash runs traps only between
// commands, so a shell busy inside one builtin (read or mapfile from an
// endless source such as /dev/zero) does not run the USR2 trap; those
// builtins check bash's interrupt flag at every byte, so when the USR2
// trap did not bring the shell back and nothing of the call holds it, the
// shell gets SIGINT itself, which sets that flag (Ctrl-C at a terminal).
// Loops of commands (while :; do :; done, (( )) and for (( )) loops) run
// the USR2 trap between their commands; a command substitution or pipe is
// stopped by the SIGINT to its processes. Only a builtin that never returns
// while the user's INT trap (which bash too runs only after the builtin) or
// an ignored SIGINT stands in the way keeps the shell from coming back: it
// is replaced, with session_reset and the call's real elapsed_ms.
//
// What the user sets that bash itself runs or expands never fires for the
// protocol's lines:
//   - xtrace: every protocol step starts with { ...; set +x; } 2>/dev/null
//     (the set +x is traced into /dev/null) and remembers whether it was on
//     (__agentsh_x); the call file's group turns it back on as its first
//     command, so the user's commands are traced into the call's stderr and
//     no protocol command is traced anywhere: PS4 is expanded for the user's
//     commands only (twice more, into /dev/null, when the protocol takes
//     xtrace away). A user's BASH_XTRACEFD still gets those two lines.
//   - PS0, PROMPT_COMMAND, PS1: the line's end, the probe, and the paths
//     that abandon a line (errexit, the interrupt) set them to the
//     protocol's; a probe goes with every call line, so a line bash abandons
//     behind the user's own PS1 still ends (its status is the probe's). A
//     line bash abandons on its own (the command's own SIGINT, an error under
//     set -u) right after the command set PS0 or PROMPT_COMMAND runs those
//     once. PS2 is never shown: every protocol line is complete.
//   - RETURN: bash runs it when a sourced file returns, the call file too;
//     the call file's end (callEnd) writes the user's RETURN trap to a
//     per-call FIFO and removes it, and the next call's file sets it again,
//     so it fires for the user's own sourced files and (under functrace)
//     functions only. A return at the call's top level skips that end: the
//     trap then fires once, as bash would for any sourced file.
//   - DEBUG lasts for its call (callEnd, the probe and the USR2 trap take it
//     away); it runs for the protocol's commands inside the ERR trap (bash
//     runs DEBUG inside traps), into the call's output.
//   - EXIT: the session's end hangs the shell up (SIGHUP) before killing it,
//     so the user's EXIT trap runs once, when the session really ends, into
//     the shell log; an explicit exit runs it into that call's output.
//   - INT: the USR2 trap sets the user's INT trap aside while it interrupts
//     (the probe puts it back), so neither a handler nor trap '' INT keeps
//     a timeout from stopping the call; children of trap '' INT inherit the
//     ignored SIGINT and get SIGKILL after the grace.
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
// the rest of the call, whose text is one brace group (callFile), and the
// call's status is 1. An explicit exit
// still ends the session. bash takes the ERR trap away while such a source
// runs and puts the one from before back when it returns, so the call
// file's first line sets it again, and errtrace with it (set -E: the ERR
// trap must reach functions and subshells for errexit to; a set +E inside a
// call leaves errexit to the top level for the rest of that call). The
// user's ERR trap replaces the protocol's for the rest of the call that
// sets it (bash has one ERR trap, and a function wrapping the trap builtin
// would break RETURN and DEBUG traps set through it: bash runs a RETURN
// trap set in a function when that function returns, and puts a DEBUG
// trap from before back). The call's end (callEnd) hands the user's ERR
// action to the server, and from the next call on the protocol's ERR trap
// runs it first, with $? the failing status, wherever it runs (so as under
// set -E), then carries errexit out. "! cmd" under set -e does not
// suspend errexit inside cmd (a list or function), since bash does that
// only when errexit is in force.

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
func shellInit() string {
	// USR2: keep the user's INT trap aside (the probe restores it), then
	// raise SIGINT at ourselves. "builtin" is made safe first: a function
	// of that name would shadow it even when quoted.
	usr2 := `{ __agentsh_y=$-; __agentsh_q=${POSIXLY_CORRECT+x}; POSIXLY_CORRECT=y \:; \set +x; \trap - DEBUG; } >/dev/null 2>&1; ` + keepXtrace +
		`__agentsh_int=$(\trap -p INT); \trap - INT; \unset -f builtin; ` + promptsOff +
		`case $__agentsh_q in "") \unset POSIXLY_CORRECT;; esac; \builtin kill -INT "$BASHPID"`
	return `PS1=; PS2=; PS4='+ '; HISTFILE=; MAILCHECK=; PROMPT_COMMAND=(); unset TMOUT; set +H +o history -E; ` +
		`__agentsh_err=` + shellQuote(errTrap) + `; trap ` + shellQuote(usr2) + ` USR2; trap -- "$__agentsh_err" ERR` + "\n"
}

// errTrap is the ERR trap that carries out errexit (see the protocol
// above): in the session's own shell it ends the call with the failing
// status, kept for the probe that follows the abandoned line; in a
// subshell it exits, as errexit would.
const errTrap = `{ __agentsh_t=$?; __agentsh_y=$-; __agentsh_q=${POSIXLY_CORRECT+x}; POSIXLY_CORRECT=y \:; \set +x; } 2>/dev/null; ` +
	// The user's ERR trap (see callEnd) first, in the user's posix mode
	// and with $? the failing status.
	`case ${__agentsh_uerr:+x} in x) case $__agentsh_q in "") \unset POSIXLY_CORRECT;; esac; (\exit "$__agentsh_t"); \eval "$__agentsh_uerr"; POSIXLY_CORRECT=y \:;; esac; ` +
	`case $BASHPID:$SHELLOPTS in ` +
	`"$$":*errexit*) ` + keepXtrace + `\set +e; __agentsh_e=1; __agentsh_f=$__agentsh_t; ` + promptsOff +
	`\unset -f builtin; ` +
	`case $__agentsh_q in "") \unset POSIXLY_CORRECT;; esac; \builtin kill -INT "$BASHPID";; ` +
	`*:*errexit*) \exit "$__agentsh_t";; ` +
	`*) case $__agentsh_q in "") \unset POSIXLY_CORRECT;; esac; case $__agentsh_y in *x*) \set -x;; esac;; esac`

// keepXtrace remembers, after the protocol switched xtrace off (silently:
// the set +x is traced into /dev/null), that the user had it on; the call
// file turns it back on just before the user's text, so that no protocol
// command is ever traced: neither into the user's stderr nor, with PS4
// expanded, onto the control channel.
const keepXtrace = `case $__agentsh_y in *x*) __agentsh_x=x;; esac; `

// promptsOff takes away what the user may have set that bash expands or
// runs whenever it shows a prompt or reads a line (PS1, PROMPT_COMMAND,
// PS0), on the paths that abandon a call's line: what bash shows next is
// the pending prompt, at once.
const promptsOff = `PS0=; PS1=${__agentsh_a-}; PROMPT_COMMAND=(); `

// callPrefix is the call file's first line: the ERR trap back (see the
// protocol above), errexit back on if the ERR trap turned it off, the user's posix mode back, and a status of 0 for an
// empty command. It runs in posix mode, so set and unset are the builtins.
const callPrefix = `\trap -- "$__agentsh_err" ERR; \set -E; case ${__agentsh_e-} in 1) \set -e; __agentsh_e=;; esac; case $__agentsh_p in "") \unset POSIXLY_CORRECT;; esac; __agentsh_p=r` + "\n"

// callStart opens the group of the user's text: xtrace back on if the user
// had it (case is a valid body for an empty command, status 0, and is
// not traced, since xtrace is off until its set -x).
const callStart = `{ case ${__agentsh_x-} in x) __agentsh_x=; \set -x;; esac` + "\n"

// callEnd follows the group: the group's status kept, xtrace off
// silently, and the user's RETURN trap written to the call's trap FIFO
// and taken away, so that the "." of the call file, which returns right
// after, does not fire it (the next call's file sets it again). The
// call's DEBUG trap ends here too (it lasts for its call), so that it runs
// for none of the protocol's commands after this one. Its output and what
// a DEBUG trap prints for these go to /dev/null; nothing here can fail
// into the ERR trap (the || :).
func callEnd(trapFIFO string) string {
	return `{ __agentsh_g=$?; __agentsh_y=$-; __agentsh_q=${POSIXLY_CORRECT+x}; POSIXLY_CORRECT=y \:; \set +x; ` +
		`{ \trap -p RETURN; \trap -- ` + shellQuote(trapSentinelAction) + ` RETURN; \trap -p RETURN; \trap -p ERR; \trap -p RETURN; } >` + shellQuote(trapFIFO) +
		`; \trap - RETURN DEBUG; ` + keepXtrace + `case $__agentsh_q in "") \unset POSIXLY_CORRECT;; esac; } >/dev/null 2>&1 || :` + "\n"
}

// trapSentinelAction is a RETURN trap the call's end sets for a moment and
// prints after the user's RETURN trap and after the ERR trap, so that what
// it wrote is RETURN + sentinel + ERR + sentinel: the server tells "no
// such trap" from "the end did not run" (a return at the call's top level,
// an abandoned line), where the shell still has whatever it had.
const (
	trapSentinelAction = "__agentsh_rt"
	trapSentinel       = "trap -- '" + trapSentinelAction + "' RETURN\n"
)

// userTraps are the user's traps the protocol keeps across calls.
type userTraps struct {
	// ret is the user's RETURN trap as trap -p prints it ("" for none),
	// set again by the next call's file.
	ret string
	// errAction is the user's ERR action; errSet says there is one.
	errAction string
	errSet    bool
}

// savedTraps reads what a call's end wrote to its trap FIFO into t; ok is
// false when the end did not run. The protocol's own ERR trap there means
// the user set none.
func savedTraps(out []byte, t *userTraps) (ok bool) {
	ret, rest, ok := strings.Cut(string(out), trapSentinel)
	if !ok {
		return false
	}
	errLine, ok := strings.CutSuffix(rest, trapSentinel)
	if !ok {
		return false
	}
	// bash prints a trap asked for by name that is not set as "trap -- - SIG".
	if ret == "trap -- - RETURN\n" {
		ret = ""
	}
	t.ret = ret
	switch action, isTrap := trapAction(errLine, "ERR"); {
	case errLine == "" || errLine == "trap -- - ERR\n":
		t.errAction, t.errSet = "", false
	case isTrap && action == errTrap:
	case isTrap:
		t.errAction, t.errSet = action, true
	}
	return true
}

// trapAction parses one line of trap -p output for sig: "trap -- 'A' SIG",
// A in bash's single quotes ('\” for a quote).
func trapAction(line, sig string) (string, bool) {
	q, ok := strings.CutPrefix(line, "trap -- ")
	if !ok {
		return "", false
	}
	if q, ok = strings.CutSuffix(q, " "+sig+"\n"); !ok || len(q) < 2 || q[0] != '\'' || q[len(q)-1] != '\'' {
		return "", false
	}
	parts := strings.Split(q[1:len(q)-1], `'\''`)
	for _, p := range parts {
		if strings.Contains(p, "'") {
			return "", false
		}
	}
	return strings.Join(parts, "'"), true
}

// restoreTraps is the call file's line that puts the user's traps back.
func (t userTraps) restore() string {
	var b strings.Builder
	if t.ret != "" {
		b.WriteString(`\eval ` + shellQuote(t.ret) + "; ")
	}
	if t.errSet {
		b.WriteString(`__agentsh_uerr=` + shellQuote(t.errAction) + "; ")
	} else {
		b.WriteString(`\unset __agentsh_uerr; `)
	}
	return b.String() + "\n"
}

// Tags of the prompts. A call line shows tagPending+N while it runs (the
// prompt bash prints when the line is abandoned: an interrupt, errexit,
// a SIGINT the command sent its own group) and tagDone+nonce when it ran
// to its end; a probe line shows tagProbe+nonce. Nonces are fresh for
// every line and appear nowhere but in the line itself, so no command can
// print a prompt that ends its call or forges its status.
const (
	tagPending = "a"
	tagDone    = "c"
	tagProbe   = "p"
)

// newNonce is a fresh random tag suffix.
func newNonce() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// callFile is the text of a call's file: the prefix, then the command as
// one brace group. The group makes the whole command one complete command
// to bash, so that an error bash reports itself (an unbound variable under
// set -u, a bad substitution) abandons all of it, as it would end a bash -c:
// sourced line by line, bash would go on with the next line (set -eu; cd
// $UNSET; rm -r build would run the rm in the wrong directory). The price is
// bash's for any one complete command: it is parsed before it runs, so an
// alias the call defines, or a shopt that changes the syntax (extglob),
// takes effect from the next call on.
func callFile(command string, traps userTraps, trapFIFO string) []byte {
	return []byte(callPrefix + traps.restore() + callStart + command + "\n}\n" + callEnd(trapFIFO))
}

// callLine is the line that runs call n; the prompt after it is tagged
// tagDone+nonce. After the call file returns, before the nonce appears
// on the line, the line takes away what would see it or print before the
// prompt: a DEBUG trap and PS0; and TMOUT, which would end the shell
// idle at its prompt (the session's --idle-timeout is that bound).
//
// Before the call file, the builtins the protocol runs are enabled again
// (enable -n . would otherwise fail every later call with 127).
func callLine(marker string, n int, nonce, script, stdin string, outs []string) string {
	redir := fmt.Sprintf(">%s 2>&1", shellQuote(outs[0]))
	if len(outs) == 2 {
		redir = fmt.Sprintf(">%s 2>%s", shellQuote(outs[0]), shellQuote(outs[1]))
	}
	return fmt.Sprintf(`{ __agentsh_y=$-; __agentsh_p=${POSIXLY_CORRECT+x}; POSIXLY_CORRECT=y \:; \set +x; } 2>/dev/null; `+keepXtrace+
		`__agentsh_a=$'\n'"%s %s%d 0"$'\n'; PS1=$__agentsh_a; __agentsh_n=%d; __agentsh_s=0; __agentsh_f=; __agentsh_g=; \unset -f enable; \enable . : unset set trap eval kill builtin; `+
		`{ \. %s <%s %s || __agentsh_s=$?; __agentsh_y=$-; __agentsh_q=${POSIXLY_CORRECT+x}; POSIXLY_CORRECT=y \:; \set +x; } 2>/dev/null; `+keepXtrace+
		`__agentsh_s=${__agentsh_g:-$__agentsh_s}; \trap - DEBUG; \unset TMOUT; case $__agentsh_q in "") \unset POSIXLY_CORRECT;; esac; PS0=; PS1=$'\n'"%s %s%s $__agentsh_s"$'\n'; PROMPT_COMMAND=()`+"\n",
		marker, tagPending, n, n, shellQuote(script), shellQuote(stdin), redir, marker, tagDone, nonce)
}

// probeLine asks a shell whose line was abandoned to show it is back at
// its prompt, and reports the status the line ended with (errexit's, or
// bash's own 130 for a SIGINT). It restores what the interrupt set aside:
// the user's INT trap, and the user's posix mode if the call file never
// got to restore it.
func probeLine(marker, nonce string) string {
	return `{ __agentsh_r=${__agentsh_f:-$?}; __agentsh_y=$-; __agentsh_q=${POSIXLY_CORRECT+x}; POSIXLY_CORRECT=y \:; \set +x; \trap - DEBUG; } >/dev/null 2>&1; ` + keepXtrace +
		`__agentsh_f=; \eval "${__agentsh_int-}"; __agentsh_int=; PS0=; ` +
		`case ${__agentsh_p-r} in r) ;; *) __agentsh_q=$__agentsh_p;; esac; __agentsh_p=r; ` +
		`case $__agentsh_q in "") \unset POSIXLY_CORRECT;; esac; ` +
		fmt.Sprintf(`PS1=$'\n'"%s %s%s $__agentsh_r"$'\n'; PROMPT_COMMAND=()`, marker, tagProbe, nonce) + "\n"
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
	marker string // the prefix of every protocol line (not a secret: nonces are)
	closed bool   // the control channel closed during an interrupt
	exe    string // the shell's executable, to tell an exec
	// owed are the tags of probes sent during earlier calls whose
	// answers are still to come (the call's own prompt came first).
	owed map[string]bool
	// traps are the user's RETURN and ERR traps as the last call's end
	// saved them, for the next call's file.
	traps userTraps
}

// startShell starts a fresh shell in cwd and waits until it answers.
func (s *server) startShell(cwd string) error {
	// Interactive, for its handling of SIGINT (see above); no line editing:
	// the input is a pipe.
	argv := append(append([]string{s.spec.Shell}, s.spec.ShellArgs...), "--noediting", "-i")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = cwd
	cmd.Env = proctree.WithoutTokens(s.spec.Env) // the shell outlives its starter's guard
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
		// Under a policy the guard's own descriptors come first (its
		// fds 3 to 5); the sandbox's follow.
		cmd.ExtraFiles = append(cmd.ExtraFiles, files...)
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
	sh := &shell{cmd: cmd, stdin: in, lines: make(chan string, 64), exited: make(chan struct{}), marker: newMarker(), owed: map[string]bool{}}
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
		if s.sandbox != nil {
			// The sandbox's namespaces are the guard's (it is PID 1 of
			// the PID namespace), so the pid it reports is the helper's
			// in there; out here the helper is the guard's only child.
			guardID, _ := proctree.Identify(cmd.Process.Pid)
			helper, err := onlyChild(guardID)
			if err != nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				pr.Close()
				return result.Errorf(result.CodeSessionStartFailed, "cannot find the sandbox helper below the policy guard: %v", err)
			}
			shellPID = helper.PID
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

	if _, err := io.WriteString(in, shellInit()); err != nil {
		return result.Errorf(result.CodeSessionStartFailed, "the shell did not accept input: %v", err)
	}
	if !sh.probe(30 * time.Second) {
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
	sh.exe = exePath(sh.self.PID)
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
	// gotBroken: the shell printed a prompt its line did not set (the
	// command made the protocol's own assignments fail or be skipped:
	// a readonly PS1, a DEBUG trap that skips every command, ...).
	gotBroken
)

// marked splits a marker line into its tag and status.
func marked(l string) (tag string, code int, ok bool) {
	f := strings.Fields(l)
	if len(f) != 3 {
		return "", 0, false
	}
	code, err := strconv.Atoi(f[2])
	return f[1], code, err == nil
}

// awaitCall reads the control channel until call n's line ends, and
// returns the status it ended with, or why it stopped waiting. The line
// ran to its end when the prompt carries its nonce. When the prompt says
// the line was abandoned (errexit, a SIGINT the command sent itself, or a
// command printing that public prompt), a probe with a fresh nonce, read
// by the shell only once it is really back at its prompt, tells the
// status; the first of the two that answers ends the call. Any other
// marker line means the shell no longer runs the protocol's lines as
// written.
func (sh *shell) awaitCall(n int, nonce, pre string, t <-chan time.Time, stop <-chan struct{}) (int, int) {
	pending := tagPending + strconv.Itoa(n)
	probes := map[string]bool{pre: true}
	for {
		select {
		case l, open := <-sh.lines:
			if !open {
				return 0, gotEOF
			}
			tag, code, ok := marked(l)
			switch {
			case !ok:
			case tag == tagDone+nonce:
				for p := range probes {
					sh.owed[p] = true
				}
				return code, gotMarker
			case probes[tag]:
				for p := range probes {
					if p != tag {
						sh.owed[p] = true
					}
				}
				return code, gotMarker
			case sh.owed[tag]:
				delete(sh.owed, tag)
			case tag == pending && len(probes) < maxProbes+1:
				// Each abandoned-line prompt gets a probe: a shell whose
				// probe lines are skipped shows this prompt again for each.
				p := newNonce()
				probes[tagProbe+p] = true
				if _, err := io.WriteString(sh.stdin, probeLine(sh.marker, p)); err != nil {
					return 0, gotEOF
				}
			default:
				return 0, gotBroken
			}
		case <-t:
			return 0, gotTimer
		case <-stop:
			return 0, gotStop
		}
	}
}

// maxProbes bounds the probes one call's abandoned-line prompts get; a
// further such prompt means the shell does not run the probes.
const maxProbes = 4

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
	if caught, known := catches(pid, syscall.SIGUSR2); known && !caught {
		if sh.exe != "" && exePath(pid) != sh.exe {
			// exec replaced the shell: what runs is the call's.
			sh.closed = true
			return killed, false
		}
		// The command took the protocol's USR2 trap away (trap '' USR2):
		// nothing would stop the shell from running the rest of the line
		// once it goes on, so it must not go on. It is replaced.
		return killed, false
	}
	_ = syscall.Kill(pid, syscall.SIGUSR2)
	_ = syscall.Kill(pid, syscall.SIGCONT)
	if sh.probe(recoverWait) {
		return killed, true
	}
	if sh.closed {
		return killed, false
	}
	if treeAlive(tree) {
		// Something the call started meanwhile still holds the shell:
		// kill it and ask once more.
		tree.Signal(syscall.SIGKILL)
		killed = true
		_ = syscall.Kill(pid, syscall.SIGUSR2)
		if sh.probe(recoverWait) {
			return killed, true
		}
		if sh.closed {
			return killed, false
		}
	}
	// Nothing of the call holds the shell: it is busy itself, inside a
	// builtin that runs no trap until it returns (read or mapfile from an
	// endless source: bash runs pending traps between commands, not
	// between the bytes a builtin reads). Such builtins check bash's
	// interrupt flag at every byte, which SIGINT sets, as Ctrl-C at a
	// terminal would. A shell where the user's INT trap or ignore stands
	// in the way does not come back, and is replaced.
	_ = syscall.Kill(pid, syscall.SIGINT)
	return killed, sh.probe(recoverWait)
}

// probe sends probe lines until one is answered, within limit, then
// waits for the answers to those sent after it (the shell is at its
// prompt by then, so they come at once; those sent before it were
// discarded with the interrupted line, or answered), so that none is left
// to arrive during the next call. It fails as soon as the control channel
// closes (the shell exited, or exec replaced it): sh.closed then says so.
func (sh *shell) probe(limit time.Duration) bool {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	var sent []string // tags, in the order written
	answered := false
	for k := 1; ; k++ {
		var next <-chan time.Time // nil: no further probe
		var every *time.Timer
		if !answered {
			nonce := newNonce()
			// A write that fails says nothing reads the shell's input
			// any more: the shell exited, or exec replaced it (which
			// closes its saved input and control channel). That is not
			// yet a verdict: the control channel's end is, and it follows.
			if _, err := io.WriteString(sh.stdin, probeLine(sh.marker, nonce)); err == nil {
				sent = append(sent, tagProbe+nonce)
				every = time.NewTimer(probeEvery * time.Duration(k))
				next = every.C
			}
		}
		var why int
		why, sent = sh.awaitProbe(sent, next, deadline.C)
		if every != nil {
			every.Stop()
		}
		switch why {
		case gotMarker:
			answered = true
			if len(sent) == 0 {
				return true
			}
		case gotEOF:
			sh.closed = true
			return false
		case gotStop:
			return answered
		}
	}
}

// awaitProbe waits for the answer to one of the probes sent, and returns
// the probes that can still answer: those sent after it.
func (sh *shell) awaitProbe(sent []string, t <-chan time.Time, stop <-chan time.Time) (int, []string) {
	for {
		select {
		case l, open := <-sh.lines:
			if !open {
				return gotEOF, sent
			}
			tag, _, ok := marked(l)
			if ok && sh.owed[tag] {
				delete(sh.owed, tag)
				continue
			}
			for i, p := range sent {
				if ok && p == tag {
					return gotMarker, sent[i+1:]
				}
			}
		case <-t:
			return gotTimer, sent
		case <-stop:
			return gotStop, sent
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
