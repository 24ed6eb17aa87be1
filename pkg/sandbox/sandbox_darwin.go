package sandbox

import (
	"os"
	"sync"

	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox/confine"
)

// prepare checks p, already normalized and not empty, against what macOS
// can enforce and builds the helper invocation: the helper sets the
// rlimits and execs sandbox-exec with the generated profile, which execs
// the command.
func prepare(p Policy, self string, caps Capabilities) (*Prepared, error) {
	if err := checkDarwin(p, caps); err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp("", "agentplane-sandbox-")
	if err != nil {
		return nil, result.Errorf(result.CodeSandboxFailed, "cannot create the sandbox's private directory: %v", unwrap(err)).Wrap(err)
	}
	var once sync.Once
	cleanup := func() { once.Do(func() { _ = os.RemoveAll(base) }) }
	prep, err := buildSeatbelt(p, self, base)
	if err != nil {
		cleanup()
		return nil, err
	}
	prep.Cleanup = cleanup
	return prep, nil
}

// checkDarwin refuses what this Mac cannot enforce.
func checkDarwin(p Policy, c Capabilities) error {
	return seatbeltRefusal(p, c.SandboxExec != "")
}

// identify has nothing to record on macOS: the Seatbelt profile names the
// paths, which sandbox-exec resolves itself.
func identify(string) (confine.FileID, error) { return confine.FileID{}, nil }

// userCacheRoots: UserCaches adds no writable root here.
func userCacheRoots(Policy) []string { return nil }

// Stale is "": Seatbelt's rules name paths, so a file replaced at one is
// held to the same rule.
func (p *Prepared) Stale() string { return "" }
