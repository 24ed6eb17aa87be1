package run

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/agentplane/agentplane/pkg/result"
)

// MaxArgLen is the longest single argument execve(2) accepts
// (MAX_ARG_STRLEN, 32 pages of 4 KiB, terminating NUL included): a longer
// one fails the start with E2BIG, "argument list too long".
const MaxArgLen = 128 << 10

// DefaultShell is the shell that runs a command string when none is
// chosen: bash when it is on PATH, otherwise /bin/sh. agentsh, its
// sessions and agentjob all use it, so a command behaves alike in each.
func DefaultShell() string {
	if p, err := exec.LookPath("bash"); err == nil {
		return p
	}
	return "/bin/sh"
}

// ShellArgv returns the argv that runs script through shell ("" for
// DefaultShell) as shell -c script. It is for scripts shorter than
// MaxArgLen; ScriptArgv handles any length.
func ShellArgv(shell, script string) []string {
	if shell == "" {
		shell = DefaultShell()
	}
	return []string{shell, "-c", script}
}

// ScriptArgv returns the argv that runs script through shell ("" for
// DefaultShell), whatever its length. A script that fits in one argument
// is passed with -c; a longer one (a model writing a file with a large
// heredoc) is written to a file that the shell sources (shell -c '. FILE'),
// so its text never goes through argv. The file is created in dir, which
// must be private to the run (a sandbox's temp dir, a job's directory), or
// when dir is "" in a new private directory under the system's temp dir.
// remove deletes what ScriptArgv created; call it once the shell is done.
func ScriptArgv(shell, script, dir string) (argv []string, remove func(), err error) {
	if len(script) < MaxArgLen-1 {
		return ShellArgv(shell, script), func() {}, nil
	}
	remove = func() {}
	perm := os.FileMode(0o644) // readable by a sandbox's --user in its temp dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "agentsh-script-"); err != nil {
			return nil, nil, result.Errorf(result.CodeStartFailed, "cannot create a directory for the command: %v", err)
		}
		made := dir
		remove = func() { os.RemoveAll(made) }
		perm = 0o600
	}
	f, err := os.CreateTemp(dir, "command-*.sh")
	if err != nil {
		remove()
		return nil, nil, result.Errorf(result.CodeStartFailed, "cannot write the command to a file: %v", err)
	}
	path, removeDir := f.Name(), remove
	remove = func() { os.Remove(path); removeDir() }
	_, err = f.WriteString(script)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(path, perm)
	}
	if err != nil {
		remove()
		return nil, nil, result.Errorf(result.CodeStartFailed, "cannot write the command to a file: %v", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	return ShellArgv(shell, ". "+shellQuote(abs)), remove, nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
