package session

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"

	"github.com/agentplane/agentplane/pkg/result"
)

// authority decides who may drive a session. Two layers, each enough on
// its own against the threat it names:
//
//   - the session secret: a 0600 file in the session's directory that the
//     client must present. It stops every process that cannot read the
//     state directory: another user, a --user sandbox, and a sandbox whose
//     mount namespace hides the state directory.
//   - the peer's credentials (SO_PEERCRED and the peer's pidfd): a caller
//     must run as the server's user (or root), in the server's user, mount
//     and network namespaces, and without no_new_privs unless the server
//     has it too. Every agentplane sandbox sets no_new_privs and most add
//     namespaces, so a sandboxed command is refused even where it can read
//     the secret (a Landlock-only sandbox of root reads everything) and
//     where it can reach the socket (Landlock does not mediate connect()
//     on a pathname Unix socket, and a network namespace does not isolate
//     one).
type authority struct {
	token string
	self  peerIdentity
}

func newAuthority() (*authority, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	self, err := identityOf(os.Getpid())
	if err != nil {
		return nil, err
	}
	return &authority{token: hex.EncodeToString(b), self: self}, nil
}

// publish writes the secret for clients.
func (a *authority) publish(sdir string) error {
	p := tokenPath(sdir)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	_ = os.Remove(p)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY|noFollow, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(a.token)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// caller is the peer of one connection, identified as the server accepts
// it (identify): a client connects while it runs its own checks, so the
// reads of /proc are done by the time its first message comes.
type caller struct {
	id      peerIdentity
	err     error
	still   func() error // the peer is still the process that connected
	release func()
}

// identify reads who is at the other end of c; release what it returns.
func (a *authority) identify(c net.Conn) *caller {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return &caller{err: errors.New("not a Unix socket connection"), still: func() error { return nil }, release: func() {}}
	}
	who := &caller{}
	who.id, who.still, who.release, who.err = peerOf(uc)
	return who
}

// admit checks the caller of one connection, still alive, and the secret
// its first message carried.
func (a *authority) admit(who *caller, token string) error {
	if subtle.ConstantTimeCompare([]byte(token), []byte(a.token)) != 1 {
		return result.Errorf(result.CodeSessionRefused, "the caller did not present this session's secret")
	}
	err := who.err
	if err == nil {
		err = who.still()
	}
	if err != nil {
		return result.Errorf(result.CodeSessionRefused, "cannot identify the caller: %v", err)
	}
	if why := a.self.refuses(who.id); why != "" {
		return result.Errorf(result.CodeSessionRefused, "the caller may not drive this session: %s", why)
	}
	return nil
}

// peerIdentity is what the server compares between itself and a caller.
type peerIdentity struct {
	UID        int
	UserNS     string
	MountNS    string
	NetNS      string
	NoNewPrivs bool
	// Guard is the pid of the runtime policy guard that traces the
	// process ("" when none does): a call under a runtime policy may drive
	// only a session its own guard traces, or the session's shell would
	// run what the policy forbids outside the traced tree.
	Guard string
}

// refuses says why peer may not drive a session served by self, or "".
func (self peerIdentity) refuses(peer peerIdentity) string {
	switch {
	case peer.UID != self.UID && peer.UID != 0:
		return "it runs as another user"
	case peer.UserNS != self.UserNS:
		return "it runs in another user namespace"
	case peer.MountNS != self.MountNS:
		return "it runs in another mount namespace"
	case peer.NetNS != self.NetNS:
		return "it runs in another network namespace"
	case peer.NoNewPrivs && !self.NoNewPrivs:
		return "it runs with no_new_privs (inside a sandbox)"
	case peer.Guard != "" && peer.Guard != self.Guard:
		return "it runs under a runtime command policy whose guard does not trace this session"
	}
	return ""
}
