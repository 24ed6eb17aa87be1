package session

import (
	"os"
	"sort"
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
//
// Most calls leave nothing new running, and a scan can prove that without
// reading anything of the machine's other processes (quiet).
type tracker struct {
	root  int
	last  int // the last id allocated when the previous scan began; 0: none
	known map[int]uint64
	// forked: the root started a process of its own since the last scan
	// (a new shell). It may be on the children list of any of the root's
	// threads, of which quiet reads only the main one's.
	forked bool
	quiets int // scans quiet answered
}

// started tells the tracker that the root started a process itself.
func (t *tracker) started() { t.forked = true }

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
	if out, ok := t.quiet(); ok {
		t.quiets++
		t.remember(out, last)
		return out
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

// quiet is the scan when no process below the root has a child that was
// not below it at the last scan: then the processes below it are the known
// ones still there, as their stat and the kernel's children lists prove,
// at a cost that does not grow with the machine's other processes. It
// fails (the caller scans by ids) as soon as a list holds anything else.
//
// The lists are read deepest first and the root's last: a child whose
// parent exits meanwhile moves to an ancestor (the root is a subreaper),
// whose list is read after. Of the root, only the main thread's list is
// read: the kernel puts orphans there, and the root's own children are
// known or announced (started).
// quietLists bounds the children lists quiet reads (one per thread of
// each known process): past it, a JVM or a browser left running makes the
// scan by ids the cheaper one.
const quietLists = 64

func (t *tracker) quiet() ([]proctree.Stat, bool) {
	if t.forked {
		return nil, false
	}
	stats := make(map[int]proctree.Stat, len(t.known))
	for pid, start := range t.known {
		// One that is gone is not below the root any more; its children
		// moved to an ancestor, whose list says so.
		if st, err := proctree.ReadStat(pid); err == nil && st.StartTime == start {
			stats[pid] = st
		}
	}
	depth := make(map[int]int, len(stats))
	var depthOf func(pid, n int) int
	depthOf = func(pid, n int) int {
		if d, ok := depth[pid]; ok {
			return d
		}
		st, ok := stats[pid]
		d := 0
		if ok && n < 4096 {
			d = 1 + depthOf(st.PPID, n+1)
		}
		depth[pid] = d
		return d
	}
	order := make([]proctree.Stat, 0, len(stats))
	for pid, st := range stats {
		depthOf(pid, 0)
		order = append(order, st)
	}
	sort.Slice(order, func(i, j int) bool { return depth[order[i].PID] > depth[order[j].PID] })
	onlyKnown := func(pid, threads int) bool {
		kids, err := proctree.Children(pid, threads)
		if err != nil {
			return false
		}
		for _, k := range kids {
			if _, ok := stats[k]; !ok {
				return false
			}
		}
		return true
	}
	lists := 1 // the root's
	for _, st := range order {
		lists += max(st.Threads, 1)
	}
	if lists > quietLists {
		return nil, false
	}
	for _, st := range order {
		// A zombie's children were moved at its exit.
		if !st.Dead() && !onlyKnown(st.PID, st.Threads) {
			return nil, false
		}
	}
	if !onlyKnown(t.root, 1) {
		return nil, false
	}
	out := make([]proctree.Stat, 0, len(order))
	return append(out, order...), true
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
	t.forked = false
}
