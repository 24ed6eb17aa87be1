//go:build !linux

package sandbox

import (
	"os"

	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox/spawn"
)

// Adopt never adopts here: no helper is started ahead (package spawn).
func (p *Prepared) Adopt(h *spawn.Helper) bool { return false }

// StartEarly is never called here.
func (p *Prepared) StartEarly(argv, env []string, dir string, stdio [3]*os.File) (*os.Process, error) {
	return nil, result.Errorf(result.CodeInternal, "no sandbox helper is started ahead here")
}
