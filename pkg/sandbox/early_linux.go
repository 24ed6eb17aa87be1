package sandbox

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox/spawn"
)

// Adopt makes p's start the helper h started ahead (spawn) when h is the
// helper Prepare made p's (the same program and namespaces), p starts no
// other first, and needs nothing at the helper's own start that h was not
// given (a control socket, kept descriptors, the proxy's listener). It
// waits for h's start and reports whether it adopted it (not one that did
// not start); one it did not
// is the caller's to Discard. The run then starts through StartEarly, not
// Wrap's argv and Launch; Cleanup discards an adopted helper that was
// never started.
func (p *Prepared) Adopt(h *spawn.Helper) bool {
	if h == nil || !h.Started() || p.spec == nil || p.early != nil || p.Control || p.KeepFDs != 0 || p.net != nil ||
		p.launched || h.Path() != p.Path || p.SysProcAttr == nil || len(p.SysProcAttr.UidMappings) > 0 ||
		p.SysProcAttr.Cloneflags != h.Cloneflags() {
		return false
	}
	p.early = h
	return true
}

// StartEarly starts the run in the helper Adopt took (it is a
// run.Request's Start): it sends the spec, with the target's argv (as
// given to Wrap), environment (Wrap's, and the runner's additions) and
// directory, and its three standard streams, and returns the helper,
// whose end report Ended then reads. It may be called once.
func (p *Prepared) StartEarly(argv, env []string, dir string, stdio [3]*os.File) (*os.Process, error) {
	proc, ours := p.early.Take()
	if proc == nil {
		return nil, result.Errorf(result.CodeStartFailed, "the sandbox's helper did not start")
	}
	p.smu.Lock()
	p.launched = true
	_, enc, err := p.encodeSpec(&earlyTarget{argv: argv, env: env, dir: dir, slack: p.early.TimerSlack()})
	p.smu.Unlock()
	abandon := func() { spawn.Abandon(proc, ours) }
	if err != nil {
		abandon()
		return nil, err
	}
	fds := make([]int, 3)
	for i, f := range stdio {
		if f == nil {
			abandon()
			return nil, result.Errorf(result.CodeInternal, "the command's standard stream %d is missing", i)
		}
		fds[i] = int(f.Fd())
	}
	// The first bytes carry the streams (the socket's buffer is empty:
	// they go at once); the rest follows as Launch writes it.
	n, err := sendWithFiles(ours, enc, fds)
	if err != nil {
		abandon()
		return nil, result.Errorf(result.CodeStartFailed, "cannot send the sandbox spec: %v", err).Wrap(err)
	}
	p.setEnd(ours)
	writeRest(ours, writeSome(ours, enc[n:]), func() { shutWrite(ours) })
	return proc, nil
}

// sendWithFiles writes what the non-blocking socket f takes of b at once,
// at least one byte, with the descriptors fds, and returns how much it
// wrote.
func sendWithFiles(f *os.File, b []byte, fds []int) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	n := 0
	ctlErr := rc.Control(func(fd uintptr) {
		for {
			n, err = unix.SendmsgN(int(fd), b, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL)
			if err != unix.EINTR {
				return
			}
		}
	})
	if ctlErr != nil {
		return 0, ctlErr
	}
	if err == nil && n <= 0 {
		err = unix.EAGAIN
	}
	return n, err
}
