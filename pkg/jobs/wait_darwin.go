package jobs

import (
	"context"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// waitProcess blocks until the process (pid, start) is gone, returning nil,
// or ctx ends: a kqueue NOTE_EXIT event, as the pidfd is on Linux.
func waitProcess(ctx context.Context, pid int, start uint64) error {
	return proctree.WaitPID(ctx, pid, start)
}
