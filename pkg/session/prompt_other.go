//go:build !linux

package session

import (
	"os"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// readsPrompt cannot tell on this system.
func readsPrompt(pid int, ctl os.FileInfo) (ok, known bool) { return false, false }

// othersHold cannot tell on this system.
func othersHold(ctl os.FileInfo, trusted ...int) bool { return false }

// nofileLimit is unknown on this system.
func nofileLimit(pid int) [2]uint64 { return [2]uint64{} }

// holdersAmong cannot tell on this system.
func holdersAmong(ctl os.FileInfo, pids []int, trusted ...int) []proctree.ID { return nil }
