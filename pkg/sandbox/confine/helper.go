package confine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentplane/agentplane/pkg/result"
)

// Main is the sandbox helper: args are what follows Command on
// the command line, the spec's descriptor (SpecFD), "--" and the target's
// argv. It confines its own process
// and execve()s the target, so it returns only on failure, with the exit
// status the program must exit with: 125 when the sandbox could not be set
// up, 126 or 127 when the target could not be executed or found. The
// reason is written to the status file named in the spec, which the parent
// reads through Prepared.Failure; the command's own stderr stays the
// command's.
func Main(args []string) int {
	// Credentials, capabilities, no_new_privs and the Landlock domain are
	// set on this thread only and survive the execve this same thread
	// makes; the other threads vanish with the exec. Never unlocked.
	runtime.LockOSThread()
	// On Linux the helper is PID 1 of the sandbox's PID namespace and the
	// parent of the target. Signals its caller sends to the process group
	// reach the target directly; the helper itself must neither die of
	// them (the kernel would kill the whole namespace at once, with no
	// grace) nor leave them ignored for the target (catchSignals).
	catchSignals()

	// Started early (only the spec's descriptor): the target's argv,
	// environment, directory and streams come with the spec.
	fd, err := strconv.Atoi(args0(args))
	early := len(args) == 1
	if !early && (len(args) < 3 || args[1] != "--") || err != nil || fd < 3 {
		return lastResort("usage: " + Command + " SPEC-FD [-- PROGRAM [ARG...]]")
	}
	read := ReadSpec
	if early {
		read = ReadEarlySpec
	}
	sp, end, err := read(fd)
	if err != nil {
		return lastResort(err.Error())
	}
	argv := args[min(2, len(args)):]
	if early {
		argv = sp.Argv
		os.Clearenv()
		setenv(sp.Environ)
	}
	// O_CLOEXEC (os.OpenFile's default) keeps the target from inheriting
	// it; the descriptor stays writable after the uid and Landlock changes.
	// The runner hands over an empty one or none: truncated only if it is
	// not, since O_TRUNC changes the times of an empty file too, a journal
	// transaction on the way to the command.
	// It is emptied only when it is the runner's own: a regular file of
	// this uid with no other name, never through a symlink. Anything else
	// (planted where a command could reach a private directory) may be
	// another file's name, which the truncation would empty.
	status, err := os.OpenFile(sp.Status, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err == nil {
		var st syscall.Stat_t
		if err = syscall.Fstat(int(status.Fd()), &st); err == nil {
			if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Nlink != 1 || int(st.Uid) != os.Geteuid() {
				status.Close()
				err = fmt.Errorf("%s is not a file of this run's own (mode %o, %d names, uid %d)", sp.Status, st.Mode, st.Nlink, st.Uid)
			} else if st.Size != 0 {
				err = status.Truncate(0)
			}
		}
	}
	if err != nil {
		return lastResort(fmt.Sprintf("open status file: %v", err))
	}
	h := &helper{sp: sp, status: status, end: end}
	if sp.V != SpecVersion {
		return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "the sandbox helper %s is from another build of agentplane (spec version %d, want %d); reinstall it with the programs", os.Args[0], sp.V, SpecVersion)
	}
	// The loader's variables, kept out of this process's start (Spec.Env),
	// are the target's again.
	setenv(sp.Env)
	if sp.Dir != "" {
		if err := os.Chdir(sp.Dir); err != nil {
			return h.fail(ExitSetupFailed, result.CodeCwdNotFound, "cannot enter the working directory %s: %v", sp.Dir, unwrap(err))
		}
	}
	return h.run(argv)
}

// setenv sets each NAME=value of kvs in this process's environment.
func setenv(kvs []string) {
	for _, kv := range kvs {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			_ = os.Setenv(k, v)
		}
	}
}

func args0(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// lastResort reports a failure that happened before the status file could
// be opened, which only a broken invocation causes.
func lastResort(msg string) int {
	fmt.Fprintf(os.Stderr, "agentsh-sandbox: error: %s\n", msg)
	return ExitSetupFailed
}

type helper struct {
	sp     Spec
	deaths Deaths // of the orphans reaped (deaths.go)
	status *os.File
	end    int // the socket of the end report (Spec.Report), or -1
}

func (h *helper) fail(exit int, code, format string, args ...any) int {
	f := Failure{Code: code, Message: fmt.Sprintf(format, args...)}
	// A path that changed since the runner checked it, wherever on the
	// way the error was wrapped, is named for the runner (Failure.Changed).
	for _, a := range args {
		var ce *ChangedError
		if err, ok := a.(error); ok && errors.As(err, &ce) {
			f.Changed = ce.Path
		}
	}
	data, _ := json.Marshal(f)
	_, _ = h.status.Write(data)
	return exit
}

// exec resolves argv[0], applies the resource limits and execve()s it; it
// returns only on failure, with the helper's exit status.
func (h *helper) exec(argv []string) int {
	sp := h.sp
	path, code, err := lookPath(argv[0])
	if err != nil {
		exit := ExitNotExecutable
		if code == result.CodeCommandNotFound {
			exit = ExitNotFound
		}
		return h.fail(exit, code, "%v", err)
	}
	// Last, so that the helper's own Go runtime is not held to the
	// command's address-space, file-size or descriptor limits.
	for _, r := range sp.Rlimits {
		lim := syscall.Rlimit{Cur: r.Cur, Max: r.Max}
		if err := syscall.Setrlimit(r.Resource, &lim); err != nil {
			return h.fail(ExitSetupFailed, result.CodeSandboxFailed, "cannot set resource limit %d: %v", r.Resource, err)
		}
	}
	return h.execFailed(argv[0], syscall.Exec(path, argv, os.Environ()))
}

// execFailed reports a target that could not be executed the way the
// runner reports a command it cannot start (run's startError): not found
// (127), not executable (126: permission, not a program), or not started
// (125: an argument list too long, no memory, too many processes).
func (h *helper) execFailed(name string, err error) int {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return h.fail(ExitNotFound, result.CodeCommandNotFound, "command not found: %s", name)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.ENOEXEC):
		return h.fail(ExitNotExecutable, result.CodeCommandNotExecutable, "cannot run %s: %v", name, err)
	}
	return h.fail(ExitSetupFailed, result.CodeStartFailed, "cannot start %s: %v", name, err)
}

// lookPath resolves name against the PATH of the helper's environment, which
// is the command's.
func lookPath(name string) (string, string, error) {
	notFound := func() error { return fmt.Errorf("command not found: %s", name) }
	// check returns "" for an executable file, else the error's code and,
	// unless it is command_not_found, the error: the entries of a long
	// PATH are missed on every call, with no error built for each.
	check := func(p string) (string, error) {
		var st syscall.Stat_t
		err := syscall.Stat(p, &st)
		for err == syscall.EINTR {
			err = syscall.Stat(p, &st)
		}
		switch {
		case err == syscall.ENOENT || err == syscall.EACCES || err == syscall.EPERM || err == syscall.ENOTDIR:
			// A PATH entry this user cannot search holds nothing it can
			// run, as for a shell.
			return result.CodeCommandNotFound, nil
		case err != nil:
			return result.CodeCommandNotExecutable, fmt.Errorf("cannot run %s: %v", name, err)
		case st.Mode&syscall.S_IFMT == syscall.S_IFDIR || st.Mode&0o111 == 0:
			return result.CodeCommandNotExecutable, fmt.Errorf("%s is not an executable file", p)
		}
		return "", nil
	}
	if strings.Contains(name, "/") {
		code, err := check(name)
		if code == result.CodeCommandNotFound {
			err = notFound()
		}
		return name, code, err
	}
	pathEnv, ok := os.LookupEnv("PATH")
	if !ok {
		pathEnv = "/usr/local/bin:/usr/bin:/bin"
	}
	var firstCode string
	var firstErr error
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		code, err := check(p)
		if code == "" {
			return p, "", nil
		}
		if firstErr == nil && code == result.CodeCommandNotExecutable {
			firstCode, firstErr = code, err
		}
	}
	if firstErr != nil {
		return "", firstCode, firstErr
	}
	return "", result.CodeCommandNotFound, notFound()
}

// seatbeltArgv is the argv the macOS helper execs: argv itself when the
// spec has no Seatbelt profile, else sandbox-exec's invocation followed by
// the command, resolved here, before the profile applies, so that a
// missing or non-executable command is reported as on Linux (sandbox-exec
// then runs it by that path). On failure it returns nil and the helper's
// exit status, the reason written to the status file.
func (h *helper) seatbeltArgv(argv []string) ([]string, int) {
	if len(h.sp.Seatbelt) == 0 {
		return argv, 0
	}
	path, code, err := lookPath(argv[0])
	if err != nil {
		exit := ExitNotExecutable
		if code == result.CodeCommandNotFound {
			exit = ExitNotFound
		}
		return nil, h.fail(exit, code, "%v", err)
	}
	wrapped := make([]string, 0, len(h.sp.Seatbelt)+len(argv))
	wrapped = append(wrapped, h.sp.Seatbelt...)
	wrapped = append(wrapped, path)
	return append(wrapped, argv[1:]...), 0
}
