package sandbox

import (
	"strconv"
	"strings"
	"time"

	"github.com/agentplane/agentplane/pkg/result"
)

// Settings are the sandbox settings a call asks for, as its flags or
// request keys give them (before paths are made absolute), or the values
// the operator configured for them.
type Settings struct {
	Mode       string // ModeNone, ModeReadOnly or ModeWorkspaceWrite
	Net        string // NetHost, NetNone or NetProxy
	AllowWrite []string
	AllowHost  []string
	DenyRead   []string
	Memory     int64 // 0: no limit
	CPUTime    time.Duration
	Pids       int64
	FileSize   int64
	Nofile     int64
}

// The settings a Floor can hold, by the name of the flag (and request key)
// that gives them.
const (
	FloorSandbox    = "sandbox"
	FloorNet        = "net"
	FloorMemory     = "memory"
	FloorCPUTime    = "cpu-time"
	FloorPids       = "pids"
	FloorFileSize   = "file-size"
	FloorNofile     = "nofile"
	FloorAllowWrite = "allow-write"
	FloorAllowHost  = "allow-host"
	FloorDenyRead   = "deny-read"
)

// FloorSettings lists every setting a Floor has a rule for.
func FloorSettings() []string {
	return []string{FloorSandbox, FloorNet, FloorMemory, FloorCPUTime, FloorPids, FloorFileSize,
		FloorNofile, FloorAllowWrite, FloorAllowHost, FloorDenyRead}
}

// A Floor is the operator's configured sandbox under sandbox_lock: a call
// may tighten it but never loosen it. Only the settings named in Held
// (the ones the operator configured) are held; the others are free.
type Floor struct {
	Settings
	Held []string
}

// Check returns a sandbox_locked error naming the first held setting that
// call loosens, or nil. A held name without a rule is an internal error,
// so that a setting marked as a floor can never be silently free.
func (f Floor) Check(call Settings) error {
	for _, name := range f.Held {
		if err := f.loosened(name, call); err != nil {
			return err
		}
	}
	return nil
}

// modeRank orders the filesystem modes from loosest to strictest.
var modeRank = map[string]int{ModeNone: 0, "": 0, ModeWorkspaceWrite: 1, ModeReadOnly: 2}

func (f Floor) loosened(name string, call Settings) error {
	switch name {
	case FloorSandbox:
		if modeRank[call.Mode] < modeRank[f.Mode] {
			return locked(name, f.Mode, call.Mode)
		}
	case FloorNet:
		switch {
		case f.Net == NetNone && call.Net != NetNone:
			return locked(name, NetNone, call.Net)
		case f.Net == NetProxy && (call.Net == NetHost || call.Net == "") && len(call.AllowHost) == 0:
			return locked(name, NetProxy, NetHost)
		}
	case FloorMemory:
		return limit(name, f.Memory, call.Memory, strconv.FormatInt(f.Memory, 10)+" bytes")
	case FloorCPUTime:
		return limit(name, int64(f.CPUTime), int64(call.CPUTime), f.CPUTime.String())
	case FloorPids:
		return limit(name, f.Pids, call.Pids, strconv.FormatInt(f.Pids, 10))
	case FloorFileSize:
		return limit(name, f.FileSize, call.FileSize, strconv.FormatInt(f.FileSize, 10)+" bytes")
	case FloorNofile:
		return limit(name, f.Nofile, call.Nofile, strconv.FormatInt(f.Nofile, 10))
	case FloorAllowWrite:
		return subset(name, f.AllowWrite, call.AllowWrite)
	case FloorAllowHost:
		return subset(name, f.AllowHost, call.AllowHost)
	case FloorDenyRead:
		have := map[string]bool{}
		for _, d := range call.DenyRead {
			have[d] = true
		}
		for _, d := range f.DenyRead {
			if !have[d] {
				return locked(name, d, "without it")
			}
		}
	default:
		return result.Errorf(result.CodeInternal, "--%s is held as a sandbox floor but has no floor rule", name)
	}
	return nil
}

// limit: a configured limit of 0 holds nothing; a call's 0 is no limit,
// the loosest of all.
func limit(name string, floor, got int64, shown string) error {
	if floor > 0 && (got == 0 || got > floor) {
		return locked(name, shown, "a looser value")
	}
	return nil
}

// subset: an allowlist may only shrink; every entry of the call's must be
// one of the floor's.
func subset(name string, floor, got []string) error {
	allowed := map[string]bool{}
	for _, a := range floor {
		allowed[a] = true
	}
	for _, a := range got {
		if !allowed[a] {
			return locked(name, strings.Join(floor, ","), a)
		}
	}
	return nil
}

func locked(flag, floor, got string) error {
	return result.Errorf(result.CodeSandboxLocked, "the configured sandbox is locked: --%s may not be loosened from %s to %s", flag, floor, got).
		With("hint", "the operator's config sets sandbox_lock; only stricter values are accepted")
}
