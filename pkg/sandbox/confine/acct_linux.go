package confine

import "golang.org/x/sys/unix"

// The helper's half of process accounting (package sandbox, acct_linux.go,
// names the file and reads it after the run).

// startAccounting is the helper's half: called while it still has its
// capabilities, in the new PID namespace.
func startAccounting(path string) error {
	if path == "" {
		return nil
	}
	return unix.Acct(path)
}
