package session

import "golang.org/x/sys/unix"

// keepFdsFromShells marks every descriptor this process inherited (its
// launcher's handshake, whatever the agent's own process left open)
// close-on-exec, so that the shell and what it runs never hold one: a
// call sees its stdin, stdout and stderr and nothing else. Descriptors the
// server hands a child on purpose go through ExtraFiles, which are dup'ed
// into the child after fork and so unaffected.
func keepFdsFromShells() {
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
}
