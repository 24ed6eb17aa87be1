package sandbox

import (
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/result"
)

// TestFloorCheck: for every setting a floor holds, a looser call is
// refused with sandbox_locked and an equal or stricter one passes; a
// setting the operator did not configure is free.
func TestFloorCheck(t *testing.T) {
	floor := Settings{Mode: ModeWorkspaceWrite, Net: NetNone, AllowWrite: []string{"/w"}, AllowHost: []string{"example.com"},
		DenyRead: []string{"/secret"}, Memory: 512 << 20, CPUTime: 10 * time.Second, Pids: 64, FileSize: 1 << 20, Nofile: 100}
	cases := []struct {
		held   string
		call   Settings
		locked bool
	}{
		{FloorSandbox, Settings{Mode: ModeNone}, true},
		{FloorSandbox, Settings{Mode: ""}, true},
		{FloorSandbox, Settings{Mode: ModeWorkspaceWrite}, false},
		{FloorSandbox, Settings{Mode: ModeReadOnly}, false},
		{FloorNet, Settings{Net: NetHost}, true},
		{FloorNet, Settings{Net: NetProxy, AllowHost: []string{"x"}}, true},
		{FloorNet, Settings{Net: NetNone}, false},
		{FloorMemory, Settings{Memory: 1 << 30}, true},
		{FloorMemory, Settings{}, true}, // no limit is the loosest
		{FloorMemory, Settings{Memory: 512 << 20}, false},
		{FloorMemory, Settings{Memory: 1}, false},
		{FloorCPUTime, Settings{CPUTime: 11 * time.Second}, true},
		{FloorCPUTime, Settings{CPUTime: 5 * time.Second}, false},
		{FloorPids, Settings{Pids: 65}, true},
		{FloorPids, Settings{Pids: 64}, false},
		{FloorFileSize, Settings{FileSize: 2 << 20}, true},
		{FloorFileSize, Settings{FileSize: 1024}, false},
		{FloorNofile, Settings{}, true},
		{FloorNofile, Settings{Nofile: 10}, false},
		{FloorAllowWrite, Settings{AllowWrite: []string{"/w", "/elsewhere"}}, true},
		{FloorAllowWrite, Settings{AllowWrite: []string{"/w"}}, false},
		{FloorAllowWrite, Settings{}, false},
		{FloorAllowHost, Settings{AllowHost: []string{"evil.example"}}, true},
		{FloorAllowHost, Settings{AllowHost: []string{"example.com"}}, false},
		{FloorDenyRead, Settings{DenyRead: []string{"/other"}}, true},
		{FloorDenyRead, Settings{DenyRead: []string{"/other", "/secret"}}, false},
	}
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.held] = true
		err := Floor{Settings: floor, Held: []string{c.held}}.Check(c.call)
		if got := result.AsError(err); c.locked != (err != nil && got.Code == result.CodeSandboxLocked) || (!c.locked && err != nil) {
			t.Errorf("floor %s, call %+v: %v, want locked=%v", c.held, c.call, err, c.locked)
		}
		// Not held, nothing is refused.
		if err := (Floor{Settings: floor}).Check(c.call); err != nil {
			t.Errorf("no held setting, call %+v: %v", c.call, err)
		}
	}
	for _, name := range FloorSettings() {
		if !covered[name] {
			t.Errorf("no case for the floor setting %s", name)
		}
	}
	// A zero limit in the floor holds nothing.
	if err := (Floor{Held: []string{FloorMemory, FloorPids}}).Check(Settings{}); err != nil {
		t.Errorf("zero limits held: %v", err)
	}
	// A held name without a rule is never free.
	if err := (Floor{Held: []string{"workspace"}}).Check(Settings{}); result.AsError(err).Code != result.CodeInternal {
		t.Errorf("a held setting without a rule: %v, want internal_error", err)
	}
}
