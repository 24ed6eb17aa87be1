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
	"slices"
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
// files), reading its commands from a FIFO, because an interactive bash is
// what handles an interrupt the way a person at a terminal expects: SIGINT
// abandons the whole command line (the rest of a list, the remaining
// iterations of a loop) and the shell returns to its prompt with all of its
// state. Its stdin, stdout and stderr are the control channel (two FIFOs in
// the calls directory): the only thing the server reads from it is the
// prompt, and the prompt carries the bookkeeping.
//
// No descriptor of the control channel is open in the shell while a call
// runs: the call line makes the shell's stdin, stdout and stderr the
// call's own with exec (and closes bash's 255) before the call file runs,
// and after it the shell reopens the FIFOs by path, on the line or, when
// the line was abandoned, in PROMPT_COMMAND. So a command that closes or
// replaces descriptors (exec 12>&-, exec {fd}>&-, a loop over every fd,
// exec 0</dev/null, exec >/dev/null 2>&1) only changes its own call, and
// nothing it starts, in the background or not, inherits the channel (cat
// <&12 & has nothing to read). The server marks every descriptor it
// inherited close-on-exec at start, so a call sees fds 0, 1 and 2 and no
// others. What a same-user process can still do is open the FIFOs by the
// path PROMPT_COMMAND names (read the next call's line, write a forged
// prompt): a forged prompt is defeated by the nonce, a stolen line leaves
// the call waiting until its timeout, as kill -STOP of the shell would.
// A probe line (which carries the nonce its answer must show) is written
// only while the shell itself is blocked reading its next line from the
// FIFO and no other process of the session holds it (mayProbe), so a
// command that prints the public pending prompt and waits to read the
// probe gets none. A process an earlier call left running (or one such a
// process started since) that holds the FIFO when the next call's line is
// to be written would compete with the shell for that line and its nonce:
// it is killed first (evictReaders). What stays open: a process outside
// the session's tree, or one that opens the FIFO in the microseconds
// between that look and the write, and a command that reads the shell's
// memory (ptrace, /proc/PID/mem), which can forge anything.
//
// Each call is one line (NONCE is fresh random for every call, V the
// prefix of the call's variables and functions; see callLine):
//
//	V_p=...; <posix mode on, builtins enabled, aliases off>; V_n=N; PS1=$'\n'"MARK a${V_n} 0"$'\n'; [V_usr2() {...}; V_err() {...}; V_probe() {...}; \readonly -f ...;] \trap -- '{ \V_on; } 2>/dev/null; \V_usr2' RTMAX-2; PROMPT_COMMAND=([999999]='\exec 0<CTLIN 1>CTLOUT 2>&1'); \exec 0<IN 1>OUT 2>ERR 255>&-; { \. CALL; V_s=$?; <options kept>; \exec 0<CTLIN 1>CTLOUT 2>&1; ...; <the next slot scrubbed>; PS1=$'\n'"MARK c${V_d+NONCE}${V_c:+g} $V_s"$'\n'; <V_ variables forgotten, posix mode back, aliases off>; } || \:
//
// The functions that carry out an interrupt, errexit and a probe (and
// their helpers) are most of the protocol's text, and parsing, copying
// and freeing them in every line was a third of the shell's time per
// call. So they are defined once per shell, on two slots (V is the
// generation's prefix and the slot's digit: a call takes the slot the
// previous one did not, so that its variables never meet the option
// stash the previous call left), both slots by the generation's first
// line, before any command of the generation runs or could learn their
// names (and define functions of those names first), and made readonly
// there: no command can redefine or remove them, and
// every call site in text bash parses with the command's aliases (a
// trap, the probe line, the prompt hook, the call file) quotes the name,
// so that no alias stands in. The variables they use are the slot's, the
// same for every call on it: a command can learn them (declare -F shows
// the functions) and set one, or give it an attribute, for a later call.
// So each call's end, and each probe, unsets every variable of the slot
// the next call runs on (scrubNext: unset -n for a nameref, unset -v for
// the rest), after whatever the command did; one the command made
// readonly cannot be unset, the prompt says so (dirtyMark), and the next
// call runs on a new generation (newGen), its names unknown to the
// command until then. The line unsets its own slot's once more before it
// uses them, against a readonly PROMPT_COMMAND or PS0 of the command's
// that sets them between calls. A call whose text wraps trap (wrapTrap) still gets
// functions of its own under fresh names, defined by its line and
// removed at its end, as every call did before.
//
// The prompt that ends a call carries NONCE, which exists only in the
// line the server writes and which bash has read whole (to parse it)
// before the call file runs: no command can print it, so none can end its
// call early or forge its status, not through PS0, a DEBUG trap (taken
// away before the nonce is reached: a DEBUG trap and PS0 last for their
// call), history or set -v (off between calls) nor a write to the control
// channel. MARK, the prefix of every protocol line, is no secret. The
// first prompt ("aN", public) is the one bash shows when it abandons the
// line: an interrupt, errexit carried out (see below), a SIGINT the
// command sent its own process group or the shell, an error bash abandons
// the whole line for (an unbound variable in arithmetic under set -u). On
// it the server sends a probe line with a fresh nonce, which bash reads
// only when it is back at its prompt, and which reports the status the
// line ended with: errexit's (V_f), else bash's own ($?, 130 for a
// SIGINT). A command that prints "aN" itself only makes the probe wait in
// the FIFO until its call really ends. A prompt with any other tag means
// the protocol's own assignments failed or were skipped (a readonly PS1,
// the call file never ran because "." is gone for good): the call's
// status is unknown, and the shell is replaced (session_reset).
//
// Nothing on it depends on a name a command can have changed: every
// variable and function of the protocol is named with V, and its
// variables are unset for the call before it runs (so none can be
// readonly, an integer or a nameref beforehand; one a call finds and
// breaks on purpose, during that call, costs that call a reset), and an
// assignment to a shell variable a command may have made readonly (PS0,
// PROMPT_COMMAND, POSIXLY_CORRECT) is made only if it is not, since an
// assignment error abandons the line. Builtins are quoted (no alias) and
// found before any function: "." and the other special builtins because
// posix mode is on (switched on by an assignment to POSIXLY_CORRECT in
// front of ":", a special builtin, so that bash keeps the options posix
// mode changes, inherit_errexit, expand_aliases, to put them back when the
// mode is switched off), the regular ones because they run through
// builtin, whose function is removed; enable -n of any of them is undone.
// Between calls the shell has errexit, nounset, xtrace, verbose, history
// and alias expansion off (the command's settings are kept in V_o and put
// back by the next call file), so no protocol line is parsed with the
// command's aliases (bash expands an alias even for case or {), traced,
// echoed or made to exit the shell. The call file's first line puts the
// user's posix mode back before the user's text runs. The exit status and
// the fact that the call is over reach the server through the prompt the
// shell prints after the line, so no command (printf, echo) is involved;
// the working directory is read from the kernel (proctree.Cwd), so $PWD
// cannot lie to it.
//
// What is left to a command that sets out to break the shell: a readonly
// PS1, "." or kill disabled for good (enable -n enable ., enable -n
// enable kill) cost a reset; a function named enable with builtin and
// unset disabled leaves the shell without its channel, and it ends;
// extdebug with a DEBUG trap that fails (which skips the protocol's
// commands too), a PROMPT_COMMAND replaced whole or readonly with a line
// the command abandons itself, a hard descriptor limit below 11 that
// cannot be raised again (see reopen) or a soft one below 5 in the call
// (too few for the line's own redirections) leave it unable to reopen its
// channel or keep its state: the server sees that (tagLost, tagUnrun, a
// done prompt without its status, its own prompt at the end of the call's
// output: lostPrompt) and replaces the shell, and the call says so.
// Two things the protocol cannot take back, as it cannot a write to the
// shell's memory: under extdebug, a DEBUG trap that fails only for the
// protocol's own commands (trap - DEBUG, shopt -u extdebug) keeps itself
// in place for the calls after, where it sees each command before it runs,
// the nonce in the line's tail included, and can forge their status; and a
// command's own trap on the interrupt signal (trap : RTMAX-2) in the call
// that a timeout or cancellation interrupts runs in place of the USR2
// trap, so that, when the call's child caught SIGINT and exited, the rest
// of that call's line runs (bash lets a child that handled SIGINT decide).
// The next call's line sets the protocol's trap again.
//
// Interrupting a call (timeout, cancellation): the shell is stopped
// (SIGSTOP) so that it cannot start the next command of the list, the
// call's processes get SIGINT (and SIGTERM those that ignore it, as bash
// starts & processes) and, after the grace, SIGKILL, and the shell
// gets the interrupt signal (interruptSig: SIGRTMAX-2, which commands
// leave alone, unlike USR1 and USR2, whose traps are the command's own)
// and SIGCONT. Its trap (the "USR2 trap" below) raises SIGINT in the shell itself,
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
// an ignored SIGINT stands in the way, or kill disabled for good (the USR2
// trap then spins with SIGINT ignored), keeps the shell from coming back:
// it is replaced, with session_reset and the call's real elapsed_ms.
//
// What the user sets that bash itself runs or expands never fires for the
// protocol's lines:
//   - xtrace is one of the options kept aside between calls (varsO, see
//     stashOpts); the call file's group turns it back on as its first
//     command, and the protocol steps that run during a call (the ERR
//     trap's action, the call's end) keep the options first with their
//     stderr thrown away, so that no protocol command is traced anywhere.
//   - PS0, PROMPT_COMMAND, PS1: the line's tail, the probe, and the paths
//     that abandon a line (errexit, the interrupt) set them to the
//     protocol's, and while a call runs the prompt hook sets the pending
//     prompt, so a line bash abandons on its own (the command's own
//     SIGINT, an error under set -u) behind the user's own PS1 still ends.
//     Right after the command set PS0, such a line runs it once; the
//     command's PROMPT_COMMAND=x runs once too, before the protocol's
//     hook (kept in a high element, hookIndex); only after a command
//     replaced or unset the whole array is the channel not reopened, and
//     the session ends. PS2 is never shown: every protocol line is complete.
//   - RETURN: bash runs it when a sourced file returns, the call file too;
//     the call file's end (callEnd) writes the user's RETURN trap to a
//     per-call FIFO and removes it, and the next call's file sets it again,
//     so it fires for the user's own sourced files and (under functrace)
//     functions only. A return at the call's top level skips that end: the
//     trap then fires once, as bash would for any sourced file.
//   - DEBUG lasts for its call (callEnd, the line's tail, the probe line
//     and, under functrace, the USR2 trap take it away); it runs for the protocol's commands inside the ERR trap (bash
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
// call leaves errexit to the top level for the rest of that call). bash
// has one ERR trap, so a user's set by the builtin would replace the
// protocol's and silence set -e for the rest of that call: a call whose
// text names trap and ERR defines a function named trap (trapFunc, with
// the trace attribute so that RETURN and DEBUG traps set or removed
// through it are bash's), which keeps the user's ERR action aside for the
// protocol's trap to run (varsUerr); one set by the builtin itself
// (builtin trap, or trap in posix mode, where the builtin is found first)
// replaces the protocol's, and the call's DEBUG trap puts the protocol's
// back before the next command, keeping the user's action the same way
// (repairErr). Only where posix mode cannot be switched on (a readonly
// POSIXLY_CORRECT without a value: one with a value keeps posix mode on),
// or after a DEBUG trap of the command's own, does the user's trap still
// replace the protocol's in that call.
// The call's end (callEnd) hands the user's ERR action to the server (the
// errexit path too, for one set through the function), and from the next
// call on the protocol's ERR trap runs it first, with $? the failing status, wherever it runs (so as under
// set -E), then carries errexit out (judged on the options at the trap,
// kept in varsY before the trap's prefix turns them off: $- and
// $SHELLOPTS, errexit read from the latter by its name, since under the
// command's nocasematch a pattern for e in $- matches errtrace's E too,
// which is always on in a call). "! cmd" under set -e does not
// suspend errexit inside cmd (a list or function), since bash does that
// only when errexit is in force.

const (
	// probeEvery is how often a probe line is repeated while the server
	// waits for an interrupted shell to come back: a probe the shell read
	// while it was handling the interrupt is discarded with the line.
	probeEvery = 300 * time.Millisecond
	// DefaultRecoverWait bounds the wait for an interrupted shell to
	// answer a probe (Spec.RecoverWait); a shell that does not by then is
	// replaced. An interrupt waits it out where the shell cannot come back
	// at a step (a builtin that runs no trap until it returns, a user's
	// trap in the way), so it is what a loaded machine needs, no more.
	DefaultRecoverWait = 2 * time.Second
)

// recoverWait is the session's bound on an interrupted shell's answer.
func (sh *shell) recoverWait() time.Duration {
	if sh.recoverBound > 0 {
		return sh.recoverBound
	}
	return DefaultRecoverWait
}

// shellInit is the first input of every shell: no prompt noise, no
// history, no mail checks, errtrace. Everything else the protocol needs
// (its traps, its prompt hook) each call line sets afresh.
func shellInit() string {
	return `PS1=; PS2=; PS4='+ '; HISTFILE=; MAILCHECK=; PROMPT_COMMAND=(); unset TMOUT; set +H +o history -E; history -c` + "\n"
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
// false when the end did not run. The protocol's own ERR trap there
// (errTrap, the call's varsErr) means the user set none.
func savedTraps(out []byte, errTrap string, t *userTraps) (ok bool) {
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

// restore is the part of the call file's prefix that puts the user's
// traps back: the RETURN trap as trap -p printed it (evaluated in posix
// mode, so trap is the builtin), the ERR action in the call's varsUerr,
// which varsErr runs first.
func (t userTraps) restore() string {
	var b strings.Builder
	if t.ret != "" {
		b.WriteString(`\eval ` + shellQuote(t.ret) + "; ⟨V⟩rt=1; ")
	}
	if t.errSet {
		b.WriteString(`⟨V⟩uerr=` + shellQuote(t.errAction) + "; ")
	}
	return b.String()
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
	// tagLost: the shell could not reopen its control channel (reopen).
	// No nonce: a command that prints it only costs itself a reset.
	tagLost = "l"
	// tagUnrun: the call's own descriptors could not be put in place;
	// the call did not run.
	tagUnrun = "u"
)

// newNonce is a fresh random tag suffix.
func newNonce() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newVars is a fresh prefix for the shell variables of one call's
// protocol (see callProto), or, with a slot digit and "_" appended, for
// those of a shell's persistent protocol functions (slotVars). It is
// short: the line that runs a call names its variables about a hundred
// times, and bash's time to parse it grows with its length.
func newVars() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return varsPrefix + hex.EncodeToString(b) + "_"
}

// varsPrefix starts the name of every variable and function of the
// protocol.
const varsPrefix = "_ap"

// newGen is a fresh generation of a shell's persistent protocol
// functions: slotVars(gen, 0) and slotVars(gen, 1) are their prefixes.
func newGen() string {
	return strings.TrimSuffix(newVars(), "_")
}

// slotVars is the prefix of slot k of generation gen.
func slotVars(gen string, k int) string {
	return gen + strconv.Itoa(k) + "_"
}

// slotNames are the variables of a call that runs on a slot's persistent
// functions: what the call's end and the probe scrub from the next call's
// slot (scrubNext).
const slotNames = "a c d e f g h int l n na nb nd nf nk o p q r rt s t uerr uset w x y z"

// dirtyMark follows the nonce of a call's end or a probe's prompt when
// the slot the next call runs on could not be scrubbed (a command made
// one of its variables readonly): that call gets a new generation. A
// nonce is hex, so the mark cannot be part of it.
const dirtyMark = "g"

// stuckMark follows the nonce (and dirtyMark) of a call's end or a
// probe's prompt when posix mode can no longer be switched on: a
// POSIXLY_CORRECT that is readonly and unset, which bash can neither
// assign nor unset. The protocol's special builtins (".", exec, unset,
// eval, trap) are then found after the command's functions, so a
// function of one of their names would run in their place; the shell
// is replaced after the call (session_reset).
const stuckMark = "x"

// posixStuck runs then when posix mode cannot be switched on (see
// stuckMark). It is syntax and expansions only, so no function of the
// command's stands in for it, and it reads ${X@a} only where nounset is
// off.
func posixStuck(then string) string {
	return `case ${POSIXLY_CORRECT+x}${POSIXLY_CORRECT@a} in x*) ;; *r*) ` + then + `;; esac; `
}

// marks splits the marks off a prompt's tag.
func marks(tag string) (base string, dirty, stuck bool) {
	base, stuck = strings.CutSuffix(tag, stuckMark)
	base, dirty = strings.CutSuffix(base, dirtyMark)
	return base, dirty, stuck
}

// callProto is what the protocol text of one call is made of.
//
// Its shell variables all start with vars, fresh for every call, so no
// command can have made one of them readonly, integer, an array or a
// nameref beforehand: each assignment the protocol makes to a name a
// command may have touched (PS0, PROMPT_COMMAND, POSIXLY_CORRECT) is
// made only when that name is not readonly, since an assignment to a
// readonly name abandons the line (and, under errexit, exits the shell).
// The one value that outlives a call is its option stash (varsO, see
// stashOpts), which the next call's file reads (prev) and its line
// removes.
type callProto struct {
	marker string
	n      int
	vars   string // this call's variable prefix
	prev   string // the previous call's prefix ("" when this shell had none)
	ctlIn  string // the control FIFOs the shell reopens after each call
	ctlOut string
	script string
	stdin  string
	outs   []string // the call's stdout and stderr FIFOs, or one for both
	// trapFIFO is the call's trap FIFO (callEnd), which the errexit
	// path writes too when the command set an ERR trap through the
	// call's trap function (wrapTrap).
	trapFIFO string
	// wrapTrap: the command's text names trap and ERR, so the call
	// defines its trap function (trapFunc).
	wrapTrap bool
	// nofile is the shell's descriptor limit when it started (soft,
	// hard; 0 when unknown), which reopen puts back when the command
	// left too few descriptors for the protocol.
	nofile [2]uint64
	// persist: vars is a slot of the shell's generation (slotVars), whose
	// functions stay defined, readonly, from one call on that slot to the
	// next; define says this call's line defines them, for both slots
	// (the generation's first call). Both at once: the names of the other
	// slot are in this slot's functions (the probe's scrub), which a
	// command can read and define functions of those names first.
	// Otherwise (a call whose text wraps trap) vars is fresh and the line
	// defines the call's functions and the line's end removes them.
	persist, define bool
	slot            int // persist: which slot
	// next is the slot the shell's next call on persistent functions
	// runs on, which this call's end (or its probe) scrubs (scrubNext).
	next string
	// fresh (persist) is a name fresh for the call, which keeps the
	// command's posix mode while the line's start scrubs the call's slot.
	fresh string
}

// reopen points the shell's descriptors back at the control channel. No
// control descriptor is open in the shell while a call runs (callLine),
// so none can be closed, replaced or inherited by what the call starts:
// the channel is reopened by path after each call, by the line, or by
// PROMPT_COMMAND when the line was abandoned.
//
// bash needs a descriptor above 9 to move its own input aside when fd 0
// is redirected, so a descriptor limit below 11 (ulimit -n 6) makes the
// reopen fail: stdout and stderr are reopened first, on their own (bash
// undoes the whole of an exec that fails; the errors of fd 0 then go to
// the shell log), and when fd 0 fails the soft limit is raised to the
// hard one, then both back to what the shell started with (nofile: which
// only root can do once the hard limit went down), and the reopen is
// tried again. The command's lower limit does not come back: the next
// calls run with the raised one (ulimit -n shows it). Should it fail
// still, the shell says its channel is lost (tagLost, on whatever its
// stdout is then) and the server replaces it.
func (p callProto) reopen() string {
	return p.withFds(p.reopenPlain(), tagLost)
}

// reopenPlain is the reopen without the descriptor limit's fallback: the
// prompt hook between calls, where the call's functions are gone (the
// line's tail has reopened the channel, raising the limit if need be).
func (p callProto) reopenPlain() string {
	return `{ \exec 1>` + shellQuote(p.ctlOut) + ` 2>&1 && \exec 0<` + shellQuote(p.ctlIn) + `; }`
}

// withFds runs r, an exec that redirects the shell's own descriptors
// (the control channel's, or the call's), and when it fails has varsFds
// raise the descriptor limit and try again (see reopen); when it still
// fails, that prints lost (tagLost, tagUnrun) and fails.
func (p callProto) withFds(r, lost string) string {
	return p.expand(`{ ` + r + ` || \⟨V⟩fds ` + shellQuote(r) + ` ` + lost + `; }`)
}

// fdsFunc is varsFds (see withFds): once per call line, so that the
// fallback is not repeated at every reopen. An exec in a function changes
// the shell's descriptors for good.
func (p callProto) fdsFunc() string {
	t := `⟨V⟩fds() { \builtin ulimit -S -n hard; \builtin eval "$1" && \builtin return; `
	if p.nofile[0] > 0 {
		t += `\builtin ulimit -H -n ` + strconv.FormatUint(p.nofile[1], 10) + `; \builtin ulimit -S -n ` + strconv.FormatUint(p.nofile[0], 10) + `; \builtin eval "$1" && \builtin return; `
	}
	return p.expand(t + `\builtin printf '\n%s %s 0\n' ` + shellQuote(p.marker) + ` "$2"; \builtin false; }; `)
}

// redirs are the call's own descriptors.
func (p callProto) redirs() string {
	out := ">" + shellQuote(p.outs[0]) + " 2>&1"
	if len(p.outs) == 2 {
		out = ">" + shellQuote(p.outs[0]) + " 2>" + shellQuote(p.outs[1])
	}
	return "0<" + shellQuote(p.stdin) + " " + out
}

// expand fills the placeholders of a piece of the protocol's text: ⟨V⟩
// the call's variable prefix, ⟨Q⟩ the previous call's, ⟨M⟩ the marker,
// ⟨N⟩ the call's number. It is a scan, not a strings.Replacer: building
// one for each of the line's pieces was a tenth of a millisecond of the
// server's time per call.
func (p callProto) expand(t string) string {
	var b strings.Builder
	b.Grow(len(t) + 8*len(p.vars))
	for {
		i := strings.Index(t, "⟨")
		if i < 0 {
			b.WriteString(t)
			return b.String()
		}
		b.WriteString(t[:i])
		t = t[i:]
		ph := len("⟨V⟩")
		if len(t) < ph || t[ph-len("⟩"):ph] != "⟩" {
			b.WriteString("⟨")
			t = t[len("⟨"):]
			continue
		}
		switch t[len("⟨")] {
		case 'V':
			b.WriteString(p.vars)
		case 'Q':
			b.WriteString(p.prev)
		case 'M':
			b.WriteString(p.marker)
		case 'N':
			b.WriteString(strconv.Itoa(p.n))
		default:
			b.WriteString(t[:ph])
		}
		t = t[ph:]
	}
}

// Pieces of the protocol's text. bash expands an alias even for a
// reserved word (alias case=...), and posix mode switches alias expansion
// on, so between calls the shell has expand_aliases off (the command's
// setting is kept in varsO and put back by the next call file), and each
// piece is parsed with it off: the call line as a whole, before any of it
// runs; the traps and the probe's work as functions the line defines
// (varsUsr2, varsErr, varsProbe); the call file's prefix one command at a
// time, its last word free of reserved words. A trap's text and a probe
// line, parsed only when they run, with the command's aliases, are only
// a function's name (fresh for every call), assignments and quoted
// builtins. Builtins are quoted (no alias) and found before any
// function: the special ones (".", ":", eval, exec, set, trap, unset)
// because posix mode is on (posixOn), the others because they run through
// builtin, whose function enableBuiltins removes.
const (
	// stashOpts keeps the command's errexit, nounset, verbose and
	// xtrace in varsO and turns them off, and history; then its
	// expand_aliases (A), turned off by aliasesOff once posix mode is
	// back. Between calls the shell has none of them, so an error bash
	// reports cannot make it exit, and the protocol's lines (and so
	// their nonces) are neither echoed, traced nor recorded, nor parsed
	// with aliases. Once kept, varsO stays.
	stashOpts = `⟨V⟩o=${⟨V⟩o-${-//[^euvx]/}}; \set +euvx +o history; case :$BASHOPTS: in *:expand_aliases:*) ⟨V⟩o=${⟨V⟩o}A;; esac; `
	// posixOn keeps the command's posix mode in varsQ (unless kept
	// already: a trap in the tail keeps the tail's) and switches it on, by an assignment (syntax, which nothing can shadow) in front
	// of ":", so that bash puts back the options posix mode changes when
	// it is switched off; not when POSIXLY_CORRECT is readonly.
	posixOn = `⟨V⟩q=${⟨V⟩q-${POSIXLY_CORRECT+x}}; case ${POSIXLY_CORRECT+x}${POSIXLY_CORRECT@a} in "") POSIXLY_CORRECT=y \:;; esac; `
	// enableBuiltins undoes what a command can do to the builtins the
	// protocol runs: enable -n, and a function named builtin, through
	// which the protocol runs the regular ones (kill, shopt, printf), so
	// that a function of their names is left alone.
	enableBuiltins = `\unset -f builtin; \builtin enable builtin 2>/dev/null || \enable builtin; \builtin enable . : eval exec exit set trap unset readonly return shift declare local kill shopt printf ulimit false; `
	// posixBack puts the command's posix mode back (varsQ; unset: the
	// tail already did), and with it the expand_aliases it had.
	posixBack = `\unset ${⟨V⟩q+"${⟨V⟩q:+⟨V⟩a}${⟨V⟩q:-POSIXLY_CORRECT}"}; `
	// aliasesOff: no aliases between calls (stashOpts kept the setting).
	aliasesOff = `\builtin shopt -u expand_aliases; `
	// bracesOff removes aliases named { and }: bash expands an alias
	// even for a reserved word, and the call's group, its end and the
	// ERR trap are parsed with the command's aliases. It runs in posix
	// mode with the builtins enabled, between calls: an alias the
	// command defines reaches only the rest of its own call (the ERR
	// trap's text, parsed when it runs). Its failure (no such alias) is
	// no errexit (|| \:).
	bracesOff = `{ \builtin unalias -- '{' '}'; } 2>/dev/null || \:; `
	// plainPrompts takes away the attributes a command can give the
	// prompt variables that would change what is assigned (declare -u
	// PS1 would upcase the marker, -i evaluate it): case, integer,
	// nameref.
	plainPrompts = `\builtin declare -g +ilun PS1 PS0 PROMPT_COMMAND; `
	// raiseINT interrupts the line from a trap: SIGINT to the shell
	// itself, which bash honours by abandoning the line (a kill program
	// would not do: bash goes on when its child exits 0).
	// It runs only in the session's own shell, whose pid is $$ (BASHPID
	// is a variable a command can unset or assign).
	raiseINT = `\builtin kill -INT "$$" 2>/dev/null; `
	// funcnestOff lifts the command's FUNCNEST (0: no limit) while the
	// protocol runs its functions, which errexit, an interrupt and the
	// probe call one or two levels below the command's own: bash
	// abandons the line at a call beyond the limit (FUNCNEST=1 made
	// every errexit and timeout a reset). varsNk says it did, varsNf
	// keeps the value; a stash from before (the trap's, for the probe
	// after it) is kept while FUNCNEST is still its 0 (not when the
	// abandoned line took a function's local FUNCNEST away). It is text
	// a trap and the probe line run, parsed with the command's aliases
	// and under its nounset: assignments only, the choices made by
	// arithmetic, whose unevaluated branch assigns nothing. Only a value
	// of digits is lifted (another is no limit, or not one arithmetic
	// could put back), and not a readonly one: bash abandons the line at
	// an assignment to it (that stays a reset). The assignment keeps the
	// variable's attributes (export).
	funcnestOff = `⟨V⟩na=${FUNCNEST:+${FUNCNEST@a}}; ⟨V⟩na=${⟨V⟩na//[!r]/}${FUNCNEST:+${FUNCNEST//[0-9]/}}; ⟨V⟩nb=${FUNCNEST:-u}; ⟨V⟩nb=${⟨V⟩nb/#0/}; ⟨V⟩nd=${FUNCNEST:+${FUNCNEST//[!0-9]/}}; ` +
		`⟨V⟩nb=$(( ${⟨V⟩nk:-0} && !${#⟨V⟩nb} )); ⟨V⟩nf=$(( ⟨V⟩nb ? 10#0${⟨V⟩nf-} : 10#0${⟨V⟩nd} )); ⟨V⟩nk=$(( ⟨V⟩nb || (${FUNCNEST:+1}0 && !${#⟨V⟩na}) )); ⟨V⟩na=$(( ⟨V⟩nk ?(FUNCNEST=0):0 )); `
	// funcnestBack puts the command's FUNCNEST back where the ERR trap
	// returns to the command, at the line's tail (when a trap lifted it)
	// and at the probe's end: only where FUNCNEST is still the 0 funcnestOff set, not
	// readonly (the user's ERR action may have made it so), so that a
	// function's local FUNCNEST, gone with the abandoned line, does not
	// become the global one.
	funcnestBack = `⟨V⟩na=${FUNCNEST:+${FUNCNEST@a}}; ⟨V⟩na=${⟨V⟩na//[!r]/}${FUNCNEST:-u}; ⟨V⟩na=${⟨V⟩na/#0/}; ⟨V⟩na=$(( ${⟨V⟩nk:-0} && !${#⟨V⟩na} ?(FUNCNEST=10#0${⟨V⟩nf-}):0 )); \unset ⟨V⟩na ⟨V⟩nb ⟨V⟩nd ⟨V⟩nk ⟨V⟩nf; `
)

// usr2Action is the interrupt's trap (see interrupt): varsUsr2, which
// xtrace does not trace: the options are kept and turned off first, with
// what they trace thrown away, as the ERR trap does.
const usr2Action = `{ ` + funcnestOff + `\⟨V⟩on; } 2>/dev/null; \⟨V⟩usr2`

// inShell sets varsA to $$ in the session's own shell and to anything
// else in a subshell (the ERR trap exits there, as errexit would). Not by
// BASHPID, a variable a command can unset or assign (unset BASHPID made
// every errexit of the shell look like a subshell's, and end the
// session): where the kernel shows it, by whether /proc/self is the
// shell's own /proc/$$ (a sandbox has a /proc of its own PID namespace).
const inShell = `⟨V⟩a=$BASHPID; [[ -e /proc/self ]] && ⟨V⟩a=; [[ /proc/self -ef /proc/$$ ]] && ⟨V⟩a=$$; `

// unlessReadonly assigns value to name when name is not readonly.
func unlessReadonly(name, value string) string {
	return `case ${` + name + `@a} in *r*) ;; *) ` + name + `=` + value + `;; esac; `
}

// hookIndex is the element of PROMPT_COMMAND (an array) the protocol's
// hook is kept in. bash runs the elements in the order of their indexes,
// and a command's PROMPT_COMMAND=x (or +=, declare, export) assigns
// element 0: the command's own hook runs first, with the call's
// descriptors, and the protocol's still runs after it, so a line
// abandoned right after such an assignment still reopens the control
// channel instead of reading the call's stdin to its end (which made the
// shell exit). Only a command that replaces or unsets the whole array
// (PROMPT_COMMAND=(x), unset PROMPT_COMMAND) and then abandons its line
// takes the hook away: the session then ends, and the call says so.
const hookIndex = "999999"

// setHook makes hook the protocol's PROMPT_COMMAND, unless the command
// made PROMPT_COMMAND readonly (an assignment error abandons the line);
// an associative PROMPT_COMMAND, which bash does not run, is replaced.
// The command's own elements go: between calls the prompt is the
// protocol's.
func setHook(hook string) string {
	return `case ${PROMPT_COMMAND@a} in *r*) ;; *) case ${PROMPT_COMMAND@a} in *A*) \unset PROMPT_COMMAND;; esac; PROMPT_COMMAND=([` + hookIndex + `]=` + shellQuote(hook) + `);; esac; `
}

// promptHook is PROMPT_COMMAND between calls: nothing. Whatever sets it
// (the line's tail, the probe) has reopened the control channel first,
// and a command in it would run in the command's own posix mode, where a
// function named exec (or :) is found before the builtin: it ran with the
// control channel, at every prompt, where it could read the next line.
func (p callProto) promptHook() string {
	return setHook("")
}

// pending is the prompt of a line that is abandoned (tagPending). The
// call's number is in varsN, set by its line: a slot's functions, which
// set this prompt, serve every call on the slot.
func (p callProto) pending() string {
	return p.expand(`$'\n'"⟨M⟩ ` + tagPending + `${⟨V⟩n} 0"$'\n'`)
}

// abandonHook is PROMPT_COMMAND while the call runs: the hook's reopen,
// and the pending prompt, so that a line bash abandons on its own (the
// command's SIGINT to the shell, an error under set -u) right after the
// command set PS1 still shows the prompt the server answers with a
// probe. The line's tail and the probe set promptHook back. The pending
// prompt is set only while this call's varsH is (forget removes it): a
// command that made PROMPT_COMMAND readonly keeps this hook for good, and
// it must not turn later calls' prompts into pending ones.
//
// A line bash abandons on its own runs the hook in the command's posix
// mode, where the command's functions (exec, builtin) are found before
// the builtins the reopen runs, and under the command's options (set -u,
// set -x): while the call runs (varsH), the hook first keeps the options
// and switches posix mode on (varsOn, untraced: its test too), as the probe that follows
// does anyway, and puts back.
func (p callProto) abandonHook() string {
	return setHook(p.expand(`{ case ${⟨V⟩h+x} in x) \⟨V⟩on;; esac; } 2>/dev/null; `) + p.reopen() + p.expand("; case ${⟨V⟩h+x} in x) PS1=") + p.pending() + ";; esac")
}

// promptsOff takes away, on the paths that abandon a line (the USR2 and
// ERR traps), what the command may have set that bash expands or runs
// whenever it shows a prompt or reads a line (PS1, PROMPT_COMMAND, PS0):
// what bash shows next is the pending prompt, at once.
func (p callProto) promptsOff() string {
	return plainPrompts + unlessReadonly("PS0", "") + unlessReadonly("PS1", p.pending()) + p.abandonHook()
}

// functions defines the call's protocol functions. varsUsr2 is the USR2
// trap (see the protocol above): keep the command's options and INT trap
// aside (the probe restores the trap), the control channel back, then
// raise SIGINT at ourselves. varsErr is the ERR trap that carries out
// errexit: in the session's own shell it ends the call with the failing
// status, kept for the probe that follows the abandoned line (errexit is
// kept with the other options, for the next call); in a subshell it
// exits, as errexit would. Both keep the command's INT trap aside (the
// probe restores it): one that ignores SIGINT would let the line go on.
// varsProbe is the probe's work: the options
// kept (unless a trap did), the command's INT trap back, posix mode on,
// the channel reopened; the probe line itself reports.
func (p callProto) functions() string {
	// Should the kill builtin be gone for good (enable -n enable kill),
	// nothing may run on: the interrupt spins until the server replaces
	// the shell, errexit exits as it would have. In the USR2 trap the kill
	// comes last: bash takes that SIGINT only at the next command, and
	// abandoning the line from inside the trap function leaves errexit
	// ignored for good.
	back := p.reopen() + "; " + p.promptsOff() + p.expand(posixBack+aliasesOff)
	return p.expand(`⟨V⟩on() { `+stashOpts+posixOn+enableBuiltins+`}; `) + p.fdsFunc() +
		p.expand(`⟨V⟩usr2() { ⟨V⟩on; \trap - DEBUG; `) + p.abandonTraps() + p.expand(`⟨V⟩int=$(\trap -p INT); \trap - INT; `) + back +
		p.expand(`\builtin kill -0 "$$" 2>/dev/null || { \trap '' INT; while \:; do \:; done; }; `+raiseINT+`}; `) +
		p.expand(`⟨V⟩err() { case ${⟨V⟩uerr:+x} in x) \unset "${⟨V⟩q:+⟨V⟩a}${⟨V⟩q:-POSIXLY_CORRECT}" 2>/dev/null; (\exit "$⟨V⟩t"); \eval "$⟨V⟩uerr"; case $⟨V⟩q${POSIXLY_CORRECT@a} in "") POSIXLY_CORRECT=y \:;; esac;; esac; `+
			inShell+`case $⟨V⟩a:$⟨V⟩y in "$$":*:errexit:*) ⟨V⟩f=$⟨V⟩t; `) + p.abandonTraps() + p.expand(`⟨V⟩int=$(\trap -p INT); \trap - INT; `) + back +
		p.expand(raiseINT+`\exit "$⟨V⟩t";; *:errexit:*) \exit "$⟨V⟩t";; `+
			`*) `+funcnestBack+`⟨V⟩a=${⟨V⟩y%%:*}; ⟨V⟩a=${⟨V⟩a//[!uvx]/}; { \set "-$⟨V⟩a"; \unset "${⟨V⟩q:+⟨V⟩a}${⟨V⟩q:-POSIXLY_CORRECT}" "${⟨V⟩w:+⟨V⟩a}${⟨V⟩w:-⟨V⟩o}" "${⟨V⟩z:+⟨V⟩a}${⟨V⟩z:-⟨V⟩q}" ⟨V⟩a ⟨V⟩y ⟨V⟩w ⟨V⟩z; } 2>/dev/null;; esac; }; `) +
		// A call's ERR trap lasts for its call: bash puts back the one
		// from before only when the source returns. The posix mode to
		// put back is the one varsOn kept (the call's own, or the
		// tail's), unless the call file never ran: the one before the
		// line.
		p.trapFuncs() +
		p.expand(`⟨V⟩probe() { ⟨V⟩on; \trap - ERR; `+bracesOff+`case ${⟨V⟩d+d} in "") ⟨V⟩q=${⟨V⟩p-$⟨V⟩q};; esac; `+plainPrompts+`\eval "${⟨V⟩int-}"; `) +
		p.reopen() + "; " + p.promptHook() + p.scrubNext() + p.expand(posixStuck(`⟨V⟩x=1`)) + "}; " + p.keepFunctions()
}

// keepFunctions makes a slot's functions readonly, once defined: no
// command can redefine or remove them (a function of the same name is
// refused, unset -f fails), so they serve every later call on the slot
// as written. Every place that calls one from text parsed with the
// command's aliases (a trap, the probe line, the prompt hook, the call
// file) quotes its name, so that no alias takes its place either. It
// runs in posix mode, where readonly, a special builtin, is found
// before any function.
func (p callProto) keepFunctions() string {
	if !p.persist {
		return ""
	}
	return p.expand(`\readonly -f ⟨V⟩on ⟨V⟩fds ⟨V⟩usr2 ⟨V⟩err ⟨V⟩probe; `)
}

// scrubNext unsets every variable of the slot the next call runs on
// (p.next): a command that learnt the slot's names (declare -F shows the
// readonly functions) may have set one, or given it an attribute
// (integer, nameref, case), for that call. unset -n takes namerefs away
// (plain unset would unset what they name), then unset -v the rest, set
// or only declared. Only readonly stays, and unset then fails: varsC
// records it, the prompt carries dirtyMark, and the server gives the next
// call a new generation (unset's complaint goes to the shell log: a
// redirection could fail under a descriptor limit the command lowered).
// It runs in posix mode (unset is the builtin) after the call's command,
// so what the command did is undone before the next call, whose line
// only the protocol's prompt hook (and PS0) precede; the line unsets its
// own slot's once more at its start, for a readonly hook or PS0 of the
// command's.
func (p callProto) scrubNext() string {
	if p.next == "" {
		return ""
	}
	return p.scrub(p.next)
}

// scrub unsets every variable of the slot with prefix slot (see
// scrubNext); varsC records a readonly one.
func (p callProto) scrub(slot string) string {
	var b strings.Builder
	b.WriteString(p.expand(`⟨V⟩l=(`))
	for i, n := range strings.Fields(slotNames) {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(slot + n)
	}
	b.WriteString(p.expand(`); { \unset -n "${⟨V⟩l[@]}" && \unset -v "${⟨V⟩l[@]}" ⟨V⟩l; } || ⟨V⟩c=` + dirtyMark + `; `))
	return b.String()
}

// callPrefix is the call file's first line: it says the file ran (varsD),
// sets the ERR trap (bash takes it away while a source whose status is
// tested runs) and errtrace (so that errexit reaches functions and
// subshells though a previous call ran set +E), the user's traps the
// previous call's end saved (userTraps), puts back the options the previous call kept (its
// varsO), the command's posix mode and, last, its aliases. It starts in
// posix mode, with the options kept and aliases off. A failure in it is
// no errexit (|| \:): the options are back by then.
func (p callProto) callPrefix(traps userTraps) string {
	t := `⟨V⟩d=1; \trap -- ` + shellQuote(p.errAction()) + ` ERR; \set -E; ` + traps.restore()
	if p.wrapTrap {
		// Whether POSIXLY_CORRECT is readonly ("r"), read while nounset
		// is still off (${X@a} of an unset X is an error under set -u).
		// "r" when it is also unset: posix mode is then off for good
		// (bash cannot assign it). A readonly one with a value keeps
		// posix mode on, which is what the repair needs.
		t += `⟨V⟩ro=; ` + posixStuck("⟨V⟩ro=r")
	}
	if p.prev != "" {
		// "set -" alone changes nothing here: -x and -v are off.
		t += `\set "-${⟨Q⟩o//[!euv]/}"; `
	}
	t += `\unset "${⟨V⟩p:+⟨V⟩a}${⟨V⟩p:-POSIXLY_CORRECT}" 2>/dev/null || \:`
	if p.wrapTrap {
		// The call's trap function, unless posix mode (which finds
		// the trap builtin first, and refuses a function of its name)
		// is on or cannot be switched on (the protocol's own \trap
		// would find the function), or the command has its own. It is
		// defined by eval: this line is parsed in posix mode, which
		// takes a function named trap for a syntax error.
		t += `; case ${POSIXLY_CORRECT+x}$⟨V⟩ro in "") case :$SHELLOPTS: in *:posix:*) ;; *) \builtin declare -F trap >/dev/null 2>&1 || { \builtin eval ` + shellQuote(p.expand(trapFunc)) + `; \builtin declare -ft trap; ⟨V⟩tw=1; };; esac;; esac`
		// The ERR trap's repair (repairErr), unless posix mode cannot be
		// switched on (varsFix runs the special builtins).
		t += `; case $⟨V⟩ro in *r*) ;; *) \builtin trap -- ` + shellQuote(p.expand(dbgAction)) + ` DEBUG;; esac`
	}
	if p.prev != "" {
		// Parsed after the unset ran: aliases are still off.
		t += `; case ${⟨Q⟩o-} in *A*) \builtin shopt -s expand_aliases;; esac`
	}
	return p.expand(t) + "\n"
}

// callFile is the text of a call's file: the prefix, then the command as
// one brace group. The group makes the whole command one complete command
// to bash, so that an error bash reports itself (an unbound variable under
// set -u, a bad substitution) abandons all of it, as it would end a bash -c:
// sourced line by line, bash would go on with the next line (set -eu; cd
// $UNSET; rm -r build would run the rm in the wrong directory). The price is
// bash's for any one complete command: it is parsed before it runs, so an
// alias the call defines, or a shopt that changes the syntax (extglob),
// takes effect from the next call on. The call's end (callEnd) follows the
// group.
func callFile(p callProto, command string, traps userTraps, trapFIFO string) []byte {
	// The first command keeps an empty command (or one of comments only)
	// a valid group with status 0; it puts back xtrace, so that nothing
	// before the command is traced.
	first := ":"
	if p.prev != "" {
		first = p.expand(`⟨V⟩a=${⟨Q⟩o//[!x]/}; \eval ${⟨V⟩a:+'\set -x'}`)
	}
	return []byte(p.callPrefix(traps) + "{ " + first + "\n" + command + "\n}; " + p.callEnd(trapFIFO))
}

// callEnd follows the group of the user's text, still inside the sourced
// file: the group's status kept (varsG, which the line reports), the
// options kept and posix mode on (varsOn, as the line's tail would), then
// the user's RETURN trap and the ERR trap written to the call's trap FIFO
// and the DEBUG (before the write) and RETURN traps taken away, so that the "." of the call
// file, which returns right after, does not fire a RETURN trap (the next
// call's file sets it again) and the DEBUG trap (it lasts for its call)
// runs for none of the protocol's commands after this one. It is inline,
// not a function: bash runs a RETURN trap set in a function when the
// function returns, and puts a DEBUG trap from before back. What it and
// a DEBUG trap print goes to /dev/null (xtrace's lines for varsG and
// varsOn too); nothing here can fail into the ERR trap (the || \:).
//
// It is parsed with the command's aliases (it follows the command's
// group): no reserved word, and what needs one is a function of the call
// line's (varsSeterr, varsUnwrap: calls that define the trap function).
func (p callProto) callEnd(trapFIFO string) string {
	if !p.wrapTrap {
		return p.expand(`{ ⟨V⟩g=$?; \⟨V⟩on; \trap - DEBUG; `+saveTraps(trapFIFO)+`; } >/dev/null 2>&1 || \:`) + "\n"
	}
	return p.expand(`{ ⟨V⟩g=$?; \⟨V⟩on; \trap - DEBUG; \⟨V⟩seterr; `+saveTraps(trapFIFO)+`; \⟨V⟩unwrap; } >/dev/null 2>&1 || \:`) + "\n"
}

// saveTraps writes the user's RETURN trap and ERR trap to the call's trap
// FIFO (see savedTraps) and takes RETURN away. It runs in posix mode
// (trap is the builtin).
func saveTraps(fifo string) string {
	return `{ \trap -p RETURN; \trap -- ` + shellQuote(trapSentinelAction) + ` RETURN; \trap -p RETURN; \trap -p ERR; \trap -p RETURN; } >` + shellQuote(fifo) + `; \trap - RETURN`
}

// trapFuncs are the functions of a call that defines the trap function:
// varsSeterr puts in place an ERR trap the user set or removed through it
// (varsUset), so that saveTraps hands it on; varsUnwrap removes the trap
// function, unless the command defined one of its own in its place.
const trapFuncs = `⟨V⟩seterr() { case ${⟨V⟩uset+x}${⟨V⟩uerr+y} in xy) \trap -- "$⟨V⟩uerr" ERR;; x) \trap - ERR;; esac; }; ` +
	`⟨V⟩unwrap() { case ${⟨V⟩tw+x} in x) case $(\builtin declare -f trap 2>/dev/null) in *⟨V⟩uset*) \unset -f trap;; esac; \unset ⟨V⟩tw;; esac; }; `

// dbgAction is the DEBUG trap of a call that defines the trap function
// (see repairErr), untraced. varsDbg is most of it (a function is parsed
// once; the trap's text, at every command); the ERR trap is read outside
// any function: in one, without errtrace, bash shows none. It ends with
// the status of varsDbg or varsFix, 0: under extdebug a DEBUG trap that
// fails skips the command.
const dbgAction = `{ \⟨V⟩dbg || { ⟨V⟩kt=$(\builtin trap -p ERR); \⟨V⟩fix; }; } 2>/dev/null`

// repairErr keeps the protocol's ERR trap in place in a call whose text
// names trap and ERR, however the command set its own: through the trap
// function, or by the builtin itself (builtin trap, or trap in posix
// mode, where the builtin is found first), which replaced the protocol's
// trap and silenced set -e for the rest of the call. It does not depend
// on catching the builtin: the call's DEBUG trap (dbgAction), which bash
// runs before each command, notes a command that may set a trap (names
// trap or eval, sources a file: varsK), and
// before the next one at the top level of a sourced file reads the ERR
// trap back; varsFix takes one that is not the protocol's for the user's,
// kept as the function keeps it (varsUerr, varsUset: the protocol's ERR
// trap runs it first and the call's end hands it on), and sets the
// protocol's again. varsKg takes the action out of trap -p's line; varsDl
// is the DEBUG trap's line, which the trap function's listing leaves out.
// A DEBUG trap of the command's own replaces it for the rest of the call;
// a function that sets an ERR trap by the builtin, called by a command
// that names none of those, is not seen (bash runs DEBUG in no function
// without functrace).
func (p callProto) repairErr() string {
	ours := "trap -- " + shellQuote(p.errAction()) + " ERR"
	return p.expand(`⟨V⟩dbg() { ⟨V⟩kn=; case ${⟨V⟩k:+x}:${FUNCNAME[1]-} in x:source|x:) ⟨V⟩kn=1 ⟨V⟩k=;; esac; case $BASH_COMMAND in *trap*|*eval*|.\ *|source\ *) ⟨V⟩k=1;; esac; [[ -z $⟨V⟩kn ]]; }; ` +
		`⟨V⟩kg() { ⟨V⟩uerr=$2; }; ⟨V⟩dl=` + shellQuote("trap -- "+shellQuote(p.expand(dbgAction))+" DEBUG") + `; ` +
		`⟨V⟩fix() { ⟨V⟩kp=${POSIXLY_CORRECT+x}; case ${POSIXLY_CORRECT+x}${POSIXLY_CORRECT+${POSIXLY_CORRECT@a}} in "") POSIXLY_CORRECT=y \:;; esac; ` +
		`case $⟨V⟩kt in ` + shellQuote(ours) + `) ;; ""|"trap -- - ERR") \unset ⟨V⟩uerr; ⟨V⟩uset=1; \trap -- ` + shellQuote(p.errAction()) + ` ERR;; *) \eval "\⟨V⟩kg ${⟨V⟩kt#trap }"; ⟨V⟩uset=1; \trap -- ` + shellQuote(p.errAction()) + ` ERR;; esac; ` +
		`case $⟨V⟩kp in "") \unset POSIXLY_CORRECT;; esac; \unset ⟨V⟩kp ⟨V⟩kt; }; `)
}

func (p callProto) trapFuncs() string {
	if !p.wrapTrap {
		return ""
	}
	return p.expand(trapFuncs) + p.repairErr()
}

// abandonTraps is saveTraps on the paths where errexit or an interrupt
// abandons the line (the call's end does not run), when the command set
// or removed an ERR trap through the call's trap function (or its repair):
// so that the next call has it.
func (p callProto) abandonTraps() string {
	if !p.wrapTrap || p.trapFIFO == "" {
		return ""
	}
	return p.expand(`case ${⟨V⟩uset+x} in x) { ⟨V⟩seterr; ` + saveTraps(p.trapFIFO) + `; } 2>/dev/null;; esac; `)
}

// returnAgain sets a RETURN trap that is set to set itself again: the
// trap function returns right after (see trapFunc).
// varsRt says a RETURN trap may be set (the previous call's, or one set
// through the function): only then does it look (a subshell).
const returnAgain = `case ${⟨V⟩rt+x} in x) ⟨V⟩tr=$(\builtin trap -p RETURN); case $⟨V⟩tr in ?*) \builtin trap -- "\builtin $⟨V⟩tr" RETURN;; esac;; esac; `

// trapFunc is the call's function named trap, defined for a call whose
// text names trap and ERR (wrapTrap): bash has one ERR trap, the
// protocol's carries out errexit (see above), and a user's set by the
// builtin would replace it, so that set -e would hold no more in that
// call. Through the function, an ERR action goes to varsUerr, which the
// protocol's ERR trap runs first (with $? the failing status) before it
// carries out errexit, and varsUset says the call's end must hand it on
// (saveTraps); trap -p shows it in place of the protocol's (and not the
// protocol's USR2 trap). Every other
// signal goes to the builtin, in one call, the function's last command:
// the function has the trace attribute, so that bash neither takes DEBUG
// and RETURN away while it runs nor puts them back after (trap - RETURN
// and trap - DEBUG hold), and a DEBUG trap set here fires for no command
// of the function. A RETURN trap that is set when it returns would fire
// for that return: it is set to set itself again, silently. A DEBUG trap
// set before runs for the function's commands (bash runs it for a traced
// function's), the one difference from the builtin a command can see,
// besides type trap. Not in posix mode (callPrefix).
var trapFunc = `trap() { { \builtin local - ⟨V⟩tx=0 ⟨V⟩ta=- ⟨V⟩tk ⟨V⟩tr ⟨V⟩tp= ⟨V⟩te= ⟨V⟩tm= ⟨V⟩tl; ⟨V⟩tl=(); \builtin set +vx; } 2>/dev/null; ` +
	`case ${1-} in -p) \builtin shift; ⟨V⟩tp=1;; --) \builtin shift;; -?*) \builtin trap "$@" || ⟨V⟩tx=$?; ` + returnAgain + `\builtin return "$⟨V⟩tx";; esac; ` +
	// Listing: the builtin's, with the user's ERR trap (or none) in
	// place of the protocol's.
	`case $#:$⟨V⟩tp in 0:*|*:1) ⟨V⟩tk=$(\builtin trap -p "$@") || ⟨V⟩tx=$?; ⟨V⟩tr=$(\builtin trap -p ERR); ` +
	`case ${⟨V⟩uerr+x} in x) ⟨V⟩te="trap -- ${⟨V⟩uerr@Q} ERR";; esac; ` +
	`case $⟨V⟩tr in ?*) ⟨V⟩tk=${⟨V⟩tk/"$⟨V⟩tr"/"$⟨V⟩te"};; esac; ⟨V⟩tk=${⟨V⟩tk/` + shellQuote("trap -- '"+usr2Action+"' "+interruptName) + `/}; case ${⟨V⟩dl+x} in x) ⟨V⟩tk=${⟨V⟩tk/"$⟨V⟩dl"/};; esac; ⟨V⟩tk=${⟨V⟩tk//$'\n\n'/$'\n'}; ⟨V⟩tk=${⟨V⟩tk#$'\n'}; ⟨V⟩tk=${⟨V⟩tk%$'\n'}; ` +
	`case $⟨V⟩tk in ?*) \builtin printf '%s\n' "$⟨V⟩tk";; esac; ` + returnAgain + `\builtin return "$⟨V⟩tx";; esac; ` +
	// Setting: one argument is a signal to reset; a first argument that
	// is a number is a signal too (the builtin's rules).
	`case $# in 1) ;; *) case $1 in ""|*[!0-9]*) ⟨V⟩ta=$1; \builtin shift;; esac;; esac; ` +
	`for ⟨V⟩tk; do case ${⟨V⟩tk^^} in ERR|SIGERR) case $⟨V⟩ta in -) \builtin unset ⟨V⟩uerr;; *) ⟨V⟩uerr=$⟨V⟩ta;; esac; ⟨V⟩uset=1;; RETURN|SIGRETURN) ⟨V⟩tm=1;; *) ⟨V⟩tl+=("$⟨V⟩tk");; esac; done; ` +
	// RETURN, set here or before, would fire when this function returns:
	// it is set to set itself again.
	`case $⟨V⟩tm:$⟨V⟩ta in 1:-) \builtin trap - RETURN; \builtin unset ⟨V⟩rt;; 1:*) ⟨V⟩rt=1; ⟨V⟩tk="\builtin trap -- ${⟨V⟩ta@Q} RETURN"; \builtin trap -- "$⟨V⟩tk" RETURN;; *) ` + returnAgain + `;; esac; ` +
	`case ${#⟨V⟩tl[@]} in 0) ;; *) \builtin trap -- "$⟨V⟩ta" "${⟨V⟩tl[@]}";; esac; }; `

// errAction is the call's ERR trap: the failing status kept and the
// options kept (xtrace off) with what they trace thrown away, then
// varsErr, whose call is not traced.
func (p callProto) errAction() string {
	return p.expand(`{ ⟨V⟩t=$? ⟨V⟩y=$-:$SHELLOPTS: ⟨V⟩w=${⟨V⟩o+x} ⟨V⟩z=${⟨V⟩q+x}; ` + funcnestOff + `\⟨V⟩on; } 2>/dev/null; \⟨V⟩err`)
}

// callLine is the line that runs call n; the prompt after it is tagged
// tagDone+nonce. Before the call file: posix mode, the protocol's
// builtins, aliases off again (posix mode turned them on), the pending
// prompt, the call's functions, the USR2 trap and the prompt hook; then
// the shell's descriptors become the call's (exec, so that nothing of the
// control channel stays open in the shell to be saved, closed or
// inherited), bash's own 255 included. The call file is sourced inside
// the left side of ||, and so is the rest of the line: errexit is
// suspended for both. After it, before the nonce appears on the line:
// the options kept, the control channel reopened, a DEBUG trap, PS0 and
// TMOUT (which would end the shell idle at its prompt) taken away, the
// hook set again, then the command's posix mode back and aliases off.
// The tag is tagDone only if the call file ran (varsD): a "." that a
// command disabled for good (enable -n enable .) is a broken shell, not a
// status.
func callLine(p callProto, nonce string) string {
	var b strings.Builder
	// The tail of the line before (or a probe) enabled the builtins and
	// made the prompts plain; nothing ran since but the prompt hook and
	// PS0, which are the protocol's unless the command made them readonly
	// (a readonly one of the command's could have set the slot's
	// variables between calls: they are unset first, in posix mode, the
	// posix mode kept meanwhile under the call's own fresh name).
	if p.persist {
		b.WriteString(p.expand(p.fresh + `=${POSIXLY_CORRECT+x}; case ${POSIXLY_CORRECT+x}${POSIXLY_CORRECT@a} in "") POSIXLY_CORRECT=y \:;; esac; ` + aliasesOff))
		b.WriteString(p.scrub(p.vars))
		b.WriteString(p.expand(`⟨V⟩p=$` + p.fresh + `; \unset ` + p.fresh + `; ⟨V⟩n=⟨N⟩; `))
	} else {
		b.WriteString(p.expand(`⟨V⟩p=${POSIXLY_CORRECT+x}; ` + posixOn + aliasesOff + `\unset ⟨V⟩q; ⟨V⟩n=⟨N⟩; `))
	}
	// The names the tail assigns are set nowhere before it, so that a
	// call cannot find them (compgen -v) and make them readonly.
	b.WriteString(`PS1=` + p.pending() + `; `)
	if !p.persist || p.define {
		b.WriteString(p.functions())
	}
	if p.persist && p.define {
		o := p
		o.vars, o.next = p.next, p.vars
		b.WriteString(o.functions())
	}
	b.WriteString(p.expand(`\trap -- '` + usr2Action + `' ` + interruptSpec + `; `))
	b.WriteString(p.expand(`⟨V⟩h=1; `) + p.abandonHook())
	// The call runs only once its descriptors are in place (an exec
	// that fails changes none of them): a descriptor limit the last
	// call lowered is raised first, or the shell says it is lost.
	b.WriteString(p.withFds(`\exec `+p.redirs()+` 255>&-`, tagUnrun) + ` && `)
	// The options are kept with stderr away: -x would trace it.
	b.WriteString(`{ \. ` + shellQuote(p.script) + p.expand(`; { ⟨V⟩s=${⟨V⟩g-$?}; ⟨V⟩e=1; `+stashOpts+`} 2>/dev/null; `+posixOn+enableBuiltins))
	b.WriteString(p.reopen() + "; ")
	b.WriteString(`\trap - DEBUG; \unset TMOUT; ` + bracesOff + plainPrompts)
	b.WriteString(unlessReadonly("PS0", ""))
	b.WriteString(p.promptHook())
	if p.prev != "" {
		b.WriteString(p.expand(`\unset ⟨Q⟩o; `))
	}
	b.WriteString(p.scrubNext())
	b.WriteString(p.expand(posixStuck(`⟨V⟩x=1`) + `PS1=$'\n'"⟨M⟩ ` + tagDone + `${⟨V⟩d+` + nonce + `}${⟨V⟩c:+` + dirtyMark + `}${⟨V⟩x:+` + stuckMark + `} $⟨V⟩s"$'\n'; `))
	b.WriteString(p.expand(`case ${⟨V⟩nk+x} in x) ` + funcnestBack + `;; esac; ` + p.forget() + `} || \:`))
	b.WriteString("\n")
	return b.String()
}

// forget removes the call's variables and functions (but its option
// stash) and, with the same unset, puts the command's posix mode back;
// then aliases are off for the next line.
func (p callProto) forget() string {
	t := forget
	if p.persist {
		t = forgetVars
	}
	if p.wrapTrap {
		t = `⟨V⟩unwrap; \unset -f ⟨V⟩unwrap ⟨V⟩seterr ⟨V⟩dbg ⟨V⟩kg ⟨V⟩fix; \unset ⟨V⟩k ⟨V⟩kn ⟨V⟩dl ⟨V⟩ro; ` + t
	}
	return t
}

const (
	forget     = `\unset -f ⟨V⟩on ⟨V⟩fds ⟨V⟩usr2 ⟨V⟩err ⟨V⟩probe; ` + forgetVars
	forgetVars = `\unset ⟨V⟩s ⟨V⟩h ⟨V⟩p ⟨V⟩d ⟨V⟩e ⟨V⟩t ⟨V⟩f ⟨V⟩r ⟨V⟩g ⟨V⟩n ⟨V⟩c ⟨V⟩x ⟨V⟩l ⟨V⟩y ⟨V⟩w ⟨V⟩z ⟨V⟩uerr ⟨V⟩uset ⟨V⟩rt ⟨V⟩int ${⟨V⟩q+"${⟨V⟩q:+⟨V⟩a}${⟨V⟩q:-POSIXLY_CORRECT}"}; \unset ⟨V⟩q ⟨V⟩a; ` + aliasesOff
)

// probeLine asks a shell whose line was abandoned to show it is back at
// its prompt, and reports the status the line ended with (errexit's, or
// bash's own 130 for a SIGINT): it is taken first, then varsProbe does
// the work. Its only words are assignments, the function's name and
// quoted builtins, since it is parsed with whatever aliases the command
// left. Without a call (p.vars empty) it only reports.
func probeLine(p callProto, nonce string) string {
	if p.vars == "" {
		return p.expand(`PS1=$'\n'"⟨M⟩ `+tagProbe+nonce+` $?"$'\n'`) + "\n"
	}
	// The DEBUG trap goes at the top level: bash puts back the one
	// from before when a function returns (without functrace).
	t := `⟨V⟩r=${⟨V⟩f:-$?}; ` + funcnestOff + `\⟨V⟩probe; \trap - DEBUG; PS1=$'\n'"⟨M⟩ ` + tagProbe + nonce + `${⟨V⟩c:+` + dirtyMark + `}${⟨V⟩x:+` + stuckMark + `} $⟨V⟩r"$'\n'; `
	if p.prev != "" {
		t += `\unset ⟨Q⟩o; ` // the call file has read it, if it ever will
	}
	return p.expand(t+funcnestBack+p.forget()) + "\n"
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
	self proctree.ID
	// stdin writes the control FIFO the shell reads its lines from
	// (opened read-write: never a broken pipe, whoever holds it).
	stdin io.WriteCloser
	// ctlIn and ctlOut are the control FIFOs, which the shell reopens by
	// path after each call; keeper is the server's own writer of ctlOut,
	// so that the shell closing it for a call is no end of file: it is
	// closed when the shell is reaped.
	ctlIn, ctlOut string
	keeper        *os.File
	// nofile is the shell's descriptor limit as it started (soft, hard).
	nofile [2]uint64
	// ctlInfo is the FIFO the shell reads its lines from (mayProbe),
	// once the shell is started.
	ctlInfo os.FileInfo
	// call is the protocol of the call in progress, or of the last one:
	// its variables name the option stash the next call restores.
	call   callProto
	lines  chan string   // the control channel, line by line; closed at EOF
	exited chan struct{} // closed once the process is reaped
	// superseded is closed once another shell took this one's place.
	superseded chan struct{}
	status     *os.ProcessState
	marker     string // the prefix of every protocol line (not a secret: nonces are)
	closed     bool   // the control channel closed during an interrupt
	exe        string // the shell's executable, to tell an exec
	// owed are the tags of probes sent during earlier calls whose
	// answers are still to come (the call's own prompt came first).
	owed map[string]bool
	// traps are the user's RETURN and ERR traps as the last call's end
	// saved them, for the next call's file.
	traps userTraps
	// gen is the generation of the shell's persistent protocol functions,
	// two slots of them (slotVars): a call runs on the slot the last one
	// on persistent functions did not (slot), so that its variables never
	// meet the option stash the previous call left. defined says the
	// generation's functions are in place: the line that defines them was
	// written. Its definitions come before anything of its own that could
	// fail or be interrupted: a line abandoned before them (an assignment
	// to a readonly PS1 or scrub list) shows an old prompt, an interrupt
	// finds the USR2 trap not yet set, and either replaces the shell.
	// dirty says a slot could not be scrubbed (dirtyMark): the next call
	// starts a new generation.
	gen     string
	slot    int
	defined bool
	dirty   bool
	// recoverBound is Spec.RecoverWait (see recoverWait).
	recoverBound time.Duration
	// stuck says posix mode can no longer be switched on (stuckMark):
	// the shell is replaced after the call.
	stuck bool
}

// proto is the protocol of call n on sh, whose text wraps trap or not
// (wrapsTrap): a call that does gets functions of its own under fresh
// names (its trap function and its ERR handling differ), every other
// call runs on the next slot of the shell's persistent functions.
func (sh *shell) proto(n int, wrapTrap bool) callProto {
	if sh.dirty {
		sh.gen, sh.defined, sh.dirty = newGen(), false, false
	}
	p := callProto{marker: sh.marker, n: n, prev: sh.call.vars, ctlIn: sh.ctlIn, ctlOut: sh.ctlOut, nofile: sh.nofile, wrapTrap: wrapTrap}
	k := 1 - sh.slot
	if wrapTrap {
		p.vars = newVars()
		if !sh.defined {
			// The generation's names stay unknown until its functions
			// are in place: this call's own functions (its probe's
			// scrub) would show them to its command.
			return p
		}
	} else {
		p.vars, p.persist, p.define, p.slot, p.fresh = slotVars(sh.gen, k), true, !sh.defined, k, newVars()+"p"
		k = 1 - k
	}
	p.next = slotVars(sh.gen, k)
	return p
}

// began records that the line of call p is written: the next call on
// persistent functions takes the other slot, and the generation's
// functions are in place if this line defines them.
func (sh *shell) began(p callProto) {
	if p.persist {
		sh.slot = p.slot
		sh.defined = true
	}
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
	if s.spec.PolicyGuard {
		exe, _ := os.Executable()
		g, err := execguard.PrepareSession(exe)
		if err != nil {
			return err
		}
		if s.policy != nil {
			s.policy.Close()
		}
		s.policy = g
		if s.sandbox != nil {
			g.Guard().TrustFirst()
		}
	}
	// A session of its own: no controlling terminal, and a process group
	// whose id is the shell's pid, for the final kill.
	cmd.SysProcAttr.Setsid = true
	if s.guard != nil {
		s.guard.Apply(cmd.SysProcAttr)
		cmd.Env = s.guard.Env(cmd.Env)
	}
	ch, err := s.calls.control()
	if err != nil {
		return result.Errorf(result.CodeSessionStartFailed, "control channel: %v", err)
	}
	in, pr, keeper := ch.in, ch.out, ch.keeper
	pw := ch.shellOut
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ch.shellIn, pw, pw
	if s.sandbox != nil {
		// --net proxy: the shell's namespace hands its proxy listener over.
		files, started, err := s.sandbox.Launch()
		if err != nil {
			ch.close()
			return err
		}
		defer started()
		cmd.ExtraFiles = append(cmd.ExtraFiles, files...)
	}
	if s.spec.PolicyGuard {
		// Last: the guard passes the sandbox's descriptors on at their
		// numbers and adds its own after them.
		cmd.Path, cmd.Args, cmd.ExtraFiles = s.policy.Guard().Wrap(cmd.Path, cmd.Args, cmd.ExtraFiles)
	}
	err = cmd.Start()
	ch.shellIn.Close()
	pw.Close()
	if s.spec.PolicyGuard {
		s.policy.Guard().Launched()
	}
	if err != nil {
		ch.close()
		return result.Errorf(result.CodeSessionStartFailed, "cannot start the shell %s: %v", s.spec.Shell, err).Wrap(err)
	}
	if s.track != nil {
		s.track.started()
	}
	sh := &shell{cmd: cmd, stdin: in, ctlIn: ch.inPath, ctlOut: ch.outPath, keeper: keeper, lines: make(chan string, 64), exited: make(chan struct{}), superseded: make(chan struct{}), marker: newMarker(), owed: map[string]bool{}, gen: newGen(), slot: 1, recoverBound: s.spec.RecoverWait}
	sh.call = callProto{marker: sh.marker, ctlIn: sh.ctlIn, ctlOut: sh.ctlOut}
	sh.nofile = nofileLimit(cmd.Process.Pid)
	sh.call.nofile = sh.nofile
	shellPID := cmd.Process.Pid
	if s.policy != nil {
		// The shell is the guard's child: signals, the cwd and the
		// shell's identity are its own, not the guard's.
		if shellPID, err = s.policy.Started(30 * time.Second); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			ch.close()
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
				ch.close()
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
		// What the shell wrote is read to its end, then the channel
		// closes; its input goes with it.
		keeper.Close()
		close(sh.exited)
	}()
	s.mu.Lock()
	old := s.sh
	s.sh = sh
	s.rec.ShellPID, s.rec.ShellStart, s.rec.Cwd = sh.id.PID, sh.id.Start, cwd
	s.mu.Unlock()
	if old != nil {
		close(old.superseded)
	}

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
	// From now on commands run: probes wait for the shell's own read
	// (before, in a sandbox, the shell itself was not yet known).
	sh.ctlInfo, _ = in.Stat()
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
	// gotLost: the shell could not reopen its control channel (reopen).
	gotLost
	// gotUnrun: the call's descriptors could not be put in place.
	gotUnrun
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
func (sh *shell) awaitCall(n int, nonce string, t <-chan time.Time, stop <-chan struct{}) (int, int) {
	pending := tagPending + strconv.Itoa(n)
	probes := map[string]bool{}
	// Probes are written only when the shell reads its prompt (mayProbe):
	// owed counts the pending prompts whose probe waits for that.
	owed := 0
	var retry *time.Timer
	gate := gateFirst
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	send := func() bool {
		for owed > 0 && sh.mayProbe() {
			owed--
			gate = gateFirst
			p := newNonce()
			probes[tagProbe+p] = true
			if _, err := io.WriteString(sh.stdin, probeLine(sh.call, p)); err != nil {
				return false
			}
		}
		if owed > 0 {
			retry = time.NewTimer(gate)
			gate = min(2*gate, gateLast)
		}
		return true
	}
	for {
		var again <-chan time.Time
		if retry != nil {
			again = retry.C
		}
		select {
		case <-again:
			retry = nil
			if !send() {
				return 0, gotEOF
			}
		case l, open := <-sh.lines:
			if !open {
				return 0, gotEOF
			}
			tag, code, ok := marked(l)
			if t, dirty := sh.undirty(tag, nonce, probes); dirty {
				tag = t
			}
			switch {
			case !ok && doneTag(l, nonce):
				// The line's end ran but could not keep the status: its
				// own redirections failed (a descriptor limit of 4 or
				// less, raised only by the reopen after them), so its
				// options and traps were not kept either.
				return 0, gotLost
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
			case tag == tagLost:
				return 0, gotLost
			case tag == tagUnrun:
				return 0, gotUnrun
			case tag == pending && len(probes)+owed < maxProbes:
				// Each abandoned-line prompt gets a probe: a shell whose
				// probe lines are skipped shows this prompt again for each.
				owed++
				if retry == nil && !send() {
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

// evictReaders kills what earlier calls left running (bg, and what those
// started since) that holds the shell's input FIFO open: no process of a
// call is given that FIFO (the shell holds none of the channel while a
// call runs), so one that opened it by its path did so to read the next
// call's line, nonce and all, before the shell does, and forge its end.
// Only those processes are read, not the machine's, and none when there
// are none.
func (sh *shell) evictReaders(bg []int) {
	if sh.ctlInfo == nil || len(bg) == 0 {
		return
	}
	pids := bg
	trusted := []int{sh.self.PID, sh.id.PID}
	if sh.cmd != nil && sh.cmd.Process != nil {
		trusted = append(trusted, sh.cmd.Process.Pid)
	}
	for _, id := range holdersAmong(sh.ctlInfo, pids, trusted...) {
		if id.Alive() {
			_ = syscall.Kill(id.PID, syscall.SIGKILL)
		}
	}
}

// doneTag reports whether marker line l is the prompt of the call with
// nonce, whatever its status field says.
func doneTag(l, nonce string) bool {
	f := strings.Fields(l)
	if len(f) < 2 {
		return false
	}
	base, _, _ := marks(f[1])
	return base == tagDone+nonce
}

// undirty is tag without its marks (dirtyMark, stuckMark) when it is the
// prompt of the call with nonce or of one of the probes, and records them
// (the next call gets a new generation, or a new shell); other tags are
// left as they are.
func (sh *shell) undirty(tag, nonce string, probes map[string]bool) (string, bool) {
	t, dirty, stuck := marks(tag)
	if (!dirty && !stuck) || (t != tagDone+nonce && !probes[t]) {
		return tag, false
	}
	sh.dirty = sh.dirty || dirty
	sh.stuck = sh.stuck || stuck
	return t, true
}

// maxProbes bounds the probes one call's abandoned-line prompts get; a
// further such prompt means the shell does not run the probes.
const maxProbes = 4

// How often the server looks again whether the shell reads its prompt
// before it writes a probe (mayProbe): first soon (bash shows the prompt
// just before it reads), then less often.
const (
	gateFirst = 500 * time.Microsecond
	gateLast  = 5 * time.Millisecond
)

// mayProbe reports whether a line written to the control FIFO now reaches
// the shell's own line reader and no one else. The FIFO's path is no
// secret (the prompt hook names it, and /proc/PID/fd shows it), and what
// a probe line carries is: a command that could read the probe (open the
// FIFO by its path, in a child, in the background, or with read in the
// shell itself) would learn its nonce and could answer it while it still
// runs, so that the call would be reported ended, with a status it chose.
// So a probe is written only while the shell is blocked in bash's own
// read of its next line from the FIFO (a prompt it really shows; a
// pending prompt the command printed itself is then not answered) and no
// other process below the server holds the FIFO open. Where the kernel
// does not tell (another system, a /proc that hides it), the probe goes
// as before.
func (sh *shell) mayProbe() bool {
	if sh.ctlInfo == nil {
		return true
	}
	ok, known := readsPrompt(sh.self.PID, sh.ctlInfo)
	if !known {
		return true
	}
	trusted := []int{sh.self.PID, sh.id.PID}
	if sh.cmd != nil && sh.cmd.Process != nil {
		trusted = append(trusted, sh.cmd.Process.Pid)
	}
	return ok && !othersHold(sh.ctlInfo, trusted...)
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
	// bash starts a call's & processes with SIGINT ignored (there is no
	// job control), so the SIGINT cannot stop them, and a call waiting
	// for one (cmd & wait) would wait out the grace for SIGKILL where
	// Ctrl-C at a terminal stops the wait at once: a process that ignores
	// SIGINT gets SIGTERM, as a one-shot call's processes do. First: a
	// & subshell, (cmd; next) &, ignores SIGINT but its cmd does not, and
	// would go on to next once the SIGINT killed cmd.
	deaf := tree
	deaf.Spare = func(p proctree.Stat) bool { return (spare != nil && spare(p)) || !ignores(p.PID, syscall.SIGINT) }
	had := deaf.Signal(syscall.SIGTERM) > 0
	had = tree.Signal(syscall.SIGINT) > 0 || had
	if had {
		tree.Signal(syscall.SIGCONT)
		if !waitQuiet(tree, grace) {
			tree.Signal(syscall.SIGKILL)
			killed = true
			waitQuiet(tree, time.Second)
		}
	}
	if caught, known := catches(pid, interruptSig); known && !caught {
		if sh.exe != "" && exePath(pid) != sh.exe {
			// exec replaced the shell: what runs is the call's.
			sh.closed = true
			return killed, false
		}
		// The command took the protocol's interrupt trap away (trap '' RTMAX-2):
		// nothing would stop the shell from running the rest of the line
		// once it goes on, so it must not go on. It is replaced.
		return killed, false
	}
	_ = syscall.Kill(pid, interruptSig)
	_ = syscall.Kill(pid, syscall.SIGCONT)
	if sh.probe(sh.recoverWait()) {
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
		_ = syscall.Kill(pid, interruptSig)
		if sh.probe(sh.recoverWait()) {
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
	return killed, sh.probe(sh.recoverWait())
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
	k := 0 // probes written
	gate := gateFirst
	for {
		var next <-chan time.Time // nil: no further probe
		var every *time.Timer
		switch {
		case answered:
		case !sh.mayProbe():
			// Not yet at its prompt (or someone else could read the
			// line): look again shortly.
			every = time.NewTimer(gate)
			next = every.C
			gate = min(2*gate, gateLast)
		default:
			nonce := newNonce()
			k++
			// A write that fails says nothing reads the shell's input
			// any more: the shell exited, or exec replaced it (which
			// closes its saved input and control channel). That is not
			// yet a verdict: the control channel's end is, and it follows.
			if _, err := io.WriteString(sh.stdin, probeLine(sh.call, nonce)); err == nil {
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
			if t, dirty, stuck := marks(tag); (dirty || stuck) && (sh.owed[t] || slices.Contains(sent, t)) {
				tag = t
				sh.dirty = sh.dirty || dirty
				sh.stuck = sh.stuck || stuck
			}
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
