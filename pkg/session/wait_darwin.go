package session

import (
	"context"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// waitExit blocks until the process (pid, start) has exited, or timeout,
// without polling: a kqueue NOTE_EXIT event, as the pidfd is on Linux.
func waitExit(pid int, start uint64, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = proctree.WaitPID(ctx, pid, start)
}
