package sandbox

import (
	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/result"
)

// soleName refuses a regular file to protect or hide that has other hard
// links: the read-only bind or the cover sits on this name only, and the
// command would write (or read) the file through another one, which can
// lie anywhere on its file system, a writable root too (a link made by an
// earlier call that did not protect it, or by a dotfile manager).
func soleName(path, what string) error {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink <= 1 {
		return nil
	}
	return result.Errorf(result.CodeSandboxFailed, "the %s file %s has %d hard links: the sandbox covers one name, and the command could reach the file through another", what, path, st.Nlink).
		With("hint", "remove its other names (find / -xdev -samefile "+path+")")
}
