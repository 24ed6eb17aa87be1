// Package execguard enforces a command policy while the command runs: every
// program image that the command or any of its descendants executes is
// decided on its real argv after the exec and before the image's first
// instruction, and an image the policy refuses is killed there.
//
// The mechanism is ptrace. The guard is a re-exec of the calling program
// with the hidden first argument [Command]; it sits between the runner and
// the command:
//
//	g, err := execguard.Prepare(pol, approved, self)   // *result.Error on refusal
//	defer g.Cleanup()
//	req.Path, req.Argv, req.ExtraFiles = g.Wrap(path, argv, req.ExtraFiles)
//	res, err := run.Run(ctx, req)   // g.Launched() once started
//	rep := g.Report()   // what was decided; rep.Err() is the call's refusal
//
// The guard reports over a pipe that only it holds (reports.go), so the
// report survives the sandbox's mount namespace, and the command can
// neither forge nor block it.
//
// The program's main must route Command to [Main] before any other work
// (the sandbox helper is routed the same way). Main starts the command
// traced (PTRACE_TRACEME, so its first image stops before it runs), decides
// that image, then converts the tracee to a PTRACE_SEIZE tracee with
// TRACEEXEC, TRACEFORK, TRACEVFORK, TRACECLONE and EXITKILL, so that every
// process and thread of the tree is traced from its first instruction and
// group stops keep their job-control meaning (PTRACE_LISTEN). At each
// PTRACE_EVENT_EXEC stop the new image has not run: the argv in
// /proc/PID/cmdline is the one the kernel copied onto the new stack, and
// after an exec the process has one thread, stopped, so nothing in the
// process can change it before the decision. For a #! script the kernel
// runs the interpreter with the script's path in place of argv[0]; the
// script with its arguments is decided too (a script named git run as git
// push is git push). A refused image gets SIGKILL
// while still stopped, the guard records why, and exits: EXITKILL then kills
// every process left in the tree, so nothing after a refusal runs.
//
// Every ptrace request comes from the one OS thread that attached (the main
// goroutine, locked to its thread).
//
// What the guard does not see: anything a process does without executing a
// program (shell builtins, a library's own network calls, a program that
// implements a git alias in-process), and memory another process writes
// through /proc/PID/mem between the decision and the moment the program
// reads its argv (a sandbox's read-only /proc refuses that write; the
// guard's seccomp filter refuses process_vm_writev to the whole tree); a process that is already traced (by
// strace or gdb) cannot be traced again, which is reported as
// policy_unavailable. Those are the sandbox's job.
package execguard

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/agentplane/agentplane/pkg/policy"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox/confine"
)

// Command is the hidden first argument that marks a re-exec of the program
// as the guard. The program's main must call Main(os.Args[2:]) when
// os.Args[1] equals it, before any other work.
const Command = "__execguard"

// Modes of enforcement (--policy-enforce).
const (
	// EnforceRuntime decides the string before the call and every exec
	// while it runs; the default when a policy is given.
	EnforceRuntime = "runtime"
	// EnforceStatic decides only the string before the call.
	EnforceStatic = "static"
)

// Actions on a decided image.
const (
	ActionRan    = "ran"
	ActionKilled = "killed"
)

// maxApproved bounds the prompt-level execs a report lists one by one.
const maxApproved = 64

// Exit status of the guard when it refused an image or could not start the
// command; the report says which.
const exitRefused = 125

// spec is what the runner hands to the guard, in spec.json of the guard's
// private directory.
type spec struct {
	Rules    []policy.Rule `json:"rules"`
	Default  string        `json:"default"`
	Approved bool          `json:"approved"`
	// TrustFirst: the first image is this program's own sandbox helper,
	// which is not the command; what it executes is decided.
	TrustFirst bool `json:"trust_first"`
	// Session: the guard traces a session's shell; each call's policy
	// comes from the controller on the two descriptors after the report
	// pipe (see Session).
	Session bool `json:"session,omitempty"`
}

// Exec is one image decided at run time.
type Exec struct {
	PID  int      `json:"pid"`
	Argv []string `json:"argv"`
	// Exe is the executed file (/proc/PID/exe), which differs from argv[0]
	// for a #! script's interpreter, a symlink or a renamed copy.
	Exe string `json:"exe"`
	// Chain is the argv of each parent, nearest first, up to the command.
	Chain         [][]string `json:"chain"`
	Decision      string     `json:"decision"`
	Rule          string     `json:"rule"`
	Justification string     `json:"justification"`
	Source        string     `json:"source"`
	Action        string     `json:"action"`
}

// Report is what the guard saw and did in one run.
type Report struct {
	Enforced string `json:"enforced"`
	// Execs counts the images decided.
	Execs int `json:"execs"`
	// Approved lists prompt-level images that ran because the call was
	// approved (the first few).
	Approved []Exec `json:"approved"`
	// Killed is the image that was refused, if any; the run stopped there.
	Killed *Exec `json:"killed,omitempty"`
	// Error is set when the guard could not start the command at all.
	Error *Failure `json:"error,omitempty"`
	// Interrupted says the guard ended before its last report (it was
	// killed, with the call's tree, which dies with it): Execs and
	// Approved are what it had reported until then.
	Interrupted bool `json:"interrupted,omitempty"`
	// Deaths are the traced processes that died of a signal a resource
	// limit sends (SIGXCPU, SIGXFSZ, SIGKILL), for the sandbox to tell
	// which limit a child hit (Prepared.NoteTraced).
	Deaths confine.Deaths `json:"limit_deaths,omitempty"`
}

// Failure is a guard that could not run the command.
type Failure struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Err is the refusal the run ends with: policy_denied for a forbidden
// image, approval_required for a prompt-level one in a call that was not
// approved, the failure's own code when the guard could not start the
// command, nil otherwise.
func (r *Report) Err() error {
	if r == nil {
		return nil
	}
	if r.Error != nil {
		return result.Errorf(r.Error.Code, "%s", r.Error.Message)
	}
	k := r.Killed
	if k == nil {
		return nil
	}
	code, verb := result.CodePolicyDenied, "is forbidden by the policy"
	if k.Decision != policy.Forbidden {
		code, verb = result.CodeApprovalRequired, "needs approval"
	}
	if k.Justification != "" {
		verb += ": " + k.Justification
	}
	e := result.Errorf(code, "%s %s (stopped at run time)", strings.Join(k.Argv, " "), verb).
		With("argv", k.Argv).With("chain", k.Chain).With("rule", k.Rule).With("source", k.Source).
		With("decision", k.Decision)
	if code == result.CodeApprovalRequired {
		e.With("hint", "ask a human about this command; run the call again with --approved if they agree")
	}
	return e
}

// Guard is runtime enforcement prepared for one run.
type Guard struct {
	dir  string
	self string
	sp   spec
	// reports is the runner's end of the report pipe; own are the
	// guard's descriptors (the report pipe's write end first, then in
	// session mode the control pipes), closed here once it started.
	reports *reportReader
	own     []*os.File
}

// Prepare makes a guard for one run of a command under p. self is this
// program's executable, which must route Command to Main. On a platform
// without ptrace it fails with policy_unavailable.
func Prepare(p *policy.Policy, approved bool, self string) (*Guard, error) {
	g, err := prepare(self, spec{Rules: p.Rules, Default: p.Default, Approved: approved})
	if err != nil {
		return nil, err
	}
	if g.sp.Rules == nil {
		g.sp.Rules = []policy.Rule{}
	}
	return g, nil
}

func prepare(self string, sp spec) (*Guard, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "agentplane-guard-")
	if err != nil {
		return nil, result.Errorf(result.CodePolicyUnavailable, "cannot make the guard's directory: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, result.Errorf(result.CodePolicyUnavailable, "cannot make the guard's report pipe: %v", err)
	}
	return &Guard{dir: dir, self: self, sp: sp, reports: newReportReader(r), own: []*os.File{w}}, nil
}

// TrustFirst says that the argv given to Wrap starts this program's own
// sandbox helper: its image is not decided, the images it executes are.
func (g *Guard) TrustFirst() { g.sp.TrustFirst = true }

// Wrap returns what the runner starts to run the command under the guard:
// the program's executable, the guard's argv and the extra files, which
// are the command's own (files, passed on to it at the same descriptor
// numbers, 3 on) followed by the guard's. path is the command's
// executable ("" to look argv[0] up in the command's PATH). Call it last,
// once the command's extra files are known and after TrustFirst, and
// Launched once the start returned.
func (g *Guard) Wrap(path string, argv []string, files []*os.File) (string, []string, []*os.File) {
	b, _ := json.Marshal(g.sp)
	// A failure here surfaces as the guard's own: it cannot read its spec.
	_ = os.WriteFile(filepath.Join(g.dir, "spec.json"), b, 0o600)
	first := 3 + len(files)
	out := make([]string, 0, len(argv)+6)
	out = append(out, filepath.Base(g.self), Command, g.dir, strconv.Itoa(first), path, "--")
	return g.self, append(out, argv...), append(slices.Clip(files), g.own...)
}

// Launched closes the runner's copies of the guard's descriptors; call it
// once the guard's process started, or failed to. Until then the report
// pipe cannot end.
func (g *Guard) Launched() {
	for _, f := range g.own {
		f.Close()
	}
	g.own = nil
}

// Report returns what the guard reported about the run; call it once the
// guard's process ended. A guard killed before it decided anything (with
// the call) reports only that enforcement was on.
func (g *Guard) Report() *Report {
	g.Launched()
	return g.reports.final(0, reportWait)
}

// Cleanup removes the guard's directory and closes what is left open.
func (g *Guard) Cleanup() {
	g.Launched()
	_ = os.RemoveAll(g.dir)
}

func readSpec(dir string) (spec, error) {
	var sp spec
	b, err := os.ReadFile(filepath.Join(dir, "spec.json"))
	if err != nil {
		return sp, err
	}
	return sp, json.Unmarshal(b, &sp)
}
