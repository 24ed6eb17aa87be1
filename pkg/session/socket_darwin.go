package session

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// longSocketAddr names a socket whose path is too long for a socket
// address (104 bytes on macOS, where $TMPDIR alone takes about 50) through
// a short symlink to its directory in /tmp, removed when the returned
// function is called. macOS has no /proc/self/fd. The link's name is
// random and created exclusively, and /tmp is sticky, so no other user can
// put a link of theirs in its place.
func longSocketAddr(path string) (string, func(), error) {
	dir := filepath.Dir(path)
	for range 8 {
		var rnd [8]byte
		_, _ = rand.Read(rnd[:])
		link := filepath.Join("/tmp", "agentplane-sock-"+hex.EncodeToString(rnd[:]))
		err := os.Symlink(dir, link)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", nil, err
		}
		return filepath.Join(link, filepath.Base(path)), func() { _ = os.Remove(link) }, nil
	}
	return "", nil, errors.New("session: cannot create a short name for the socket directory in /tmp")
}
