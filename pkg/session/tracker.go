package session

import (
	"os"
	"strconv"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// tracker finds the server's descendants at the end of each call without
// reading every process of the machine. Process ids are handed out in
// increasing order, so every process created since the last scan has an id
// above the last one allocated then: a scan reads only the stat of those
// and of the descendants it already knew. A scan where that cannot hold
// (the first, the ids wrapped around, no last allocated id on this system)
// reads them all.
type tracker struct {
	root  int
	last  int // the last id allocated when the previous scan began; 0: none
	known map[int]uint64
}

// trackMargin re-reads the ids allocated just before the previous scan
// began: a process being forked at that moment has its id already but may
// not yet be listed in /proc.
const trackMargin = 64

func newTracker(root int) *tracker { return &tracker{root: root} }

// scan returns the stat of every process below the root now (zombies
// included, as a snapshot has them).
func (t *tracker) scan() []proctree.Stat {
	last, err := lastPID()
	if err != nil || t.last == 0 || last < t.last-trackMargin {
		return t.full(last)
	}
	d, err := os.Open("/proc")
	if err != nil {
		return t.full(0)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return t.full(0)
	}
	stats := map[int]proctree.Stat{}
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if _, old := t.known[pid]; !old && (pid <= t.last-trackMargin || pid > last) {
			continue
		}
		if st, err := proctree.ReadStat(pid); err == nil {
			stats[pid] = st
		}
	}
	// A process is below the root when its parent is the root or below
	// it; every such parent is among the processes read, since it was
	// either known at the last scan or created after it.
	below := map[int]bool{t.root: true}
	var isBelow func(pid, depth int) bool
	isBelow = func(pid, depth int) bool {
		if v, ok := below[pid]; ok {
			return v
		}
		st, ok := stats[pid]
		v := ok && depth < 4096 && isBelow(st.PPID, depth+1)
		below[pid] = v
		return v
	}
	var out []proctree.Stat
	for pid, st := range stats {
		if pid != t.root && isBelow(pid, 0) {
			out = append(out, st)
		}
	}
	t.remember(out, last)
	return out
}

func (t *tracker) full(last int) []proctree.Stat {
	snap, err := proctree.Snapshot()
	if err != nil {
		t.last = 0
		return nil
	}
	out := proctree.Descendants(snap, t.root)
	t.remember(out, last)
	return out
}

func (t *tracker) remember(procs []proctree.Stat, last int) {
	t.known = make(map[int]uint64, len(procs))
	for _, p := range procs {
		t.known[p.PID] = p.StartTime
	}
	t.last = last
}
