package proctree

import "os"

// ID identifies one process on this boot: a pid alone may name a
// different process once the first one is gone and reaped.
type ID struct {
	PID   int
	Start uint64 // Linux: clock ticks since boot (/proc/PID/stat field 22); macOS: µs since the epoch (p_starttime)
}

// Identify returns the identity of the process that has pid now.
func Identify(pid int) (ID, error) {
	s, err := ReadStat(pid)
	if err != nil {
		return ID{}, err
	}
	return ID{PID: pid, Start: s.StartTime}, nil
}

// Alive reports whether this very process still runs (not a zombie).
func (id ID) Alive() bool { return Alive(id.PID, id.Start) }

func ownPID() int { return os.Getpid() }
