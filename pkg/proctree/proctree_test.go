package proctree

import (
	"os"
	"testing"
)

func TestAliveAndRecycledPID(t *testing.T) {
	s, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !Alive(os.Getpid(), s.StartTime) {
		t.Fatal("self not alive")
	}
	if Alive(os.Getpid(), s.StartTime+1) {
		t.Fatal("a different start time must not count as the same process")
	}
	if Alive(0, 0) || Alive(-5, 0) {
		t.Fatal("nonsense pids reported alive")
	}
}

// TestDescendantsExceptPrunesSubtree: an exempt process and everything
// below it are left out, its siblings' subtrees are not.
func TestDescendantsExceptPrunesSubtree(t *testing.T) {
	snap := []Stat{
		{PID: 10, PPID: 1},
		{PID: 11, PPID: 10}, // exempt
		{PID: 12, PPID: 11}, // below the exempt one
		{PID: 13, PPID: 12},
		{PID: 14, PPID: 10},
		{PID: 15, PPID: 14},
	}
	got := map[int]bool{}
	for _, s := range DescendantsExcept(snap, 10, func(s Stat) bool { return s.PID == 11 }) {
		got[s.PID] = true
	}
	if len(got) != 2 || !got[14] || !got[15] {
		t.Fatalf("got %v, want 14 and 15 only", got)
	}
	if n := len(Descendants(snap, 10)); n != 5 {
		t.Fatalf("Descendants found %d, want 5", n)
	}
}
