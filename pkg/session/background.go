package session

import (
	"context"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// bgLogLimit bounds the background log; past it the oldest half goes.
const bgLogLimit = 4 << 20

// BackgroundProc is a process a call left running (cmd &).
type BackgroundProc struct {
	PID      int    `json:"pid"`
	Start    uint64 `json:"start"`
	Command  string `json:"command"`
	Call     int    `json:"call"`
	Status   string `json:"status"` // running, exited
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	// shellCmd is set while Command is not yet the process's own: it was
	// caught between the shell's fork and its exec, so its command line
	// was still the shell's (shellCmd) or empty. list reads it again.
	shellCmd *string
}

// background keeps track of what calls left running and of their output.
type background struct {
	mu      sync.Mutex
	procs   []*BackgroundProc
	log     *bgLog
	changed chan struct{}
	self    int
}

func newBackground(path string, limit int64) *background {
	return &background{log: &bgLog{path: path, limit: limit}, changed: make(chan struct{}, 1), self: os.Getpid()}
}

// adopt records the processes call n left behind: the new descendants of
// the shell whose parent is not itself one of them (the head of a
// pipeline or subshell, not each of its parts).
func (b *background) adopt(snap []proctree.Stat, n, shellPID, shellSelf int, shellCmd, callText string, before map[int]uint64) {
	fresh := map[int]bool{}
	var found []proctree.Stat
	for _, p := range proctree.Descendants(snap, shellPID) {
		if st, ok := before[p.PID]; (ok && st == p.StartTime) || p.Dead() {
			continue
		}
		fresh[p.PID] = true
		found = append(found, p)
	}
	// Orphans a call left (double fork, setsid) are the server's children
	// now: the server is a subreaper.
	for _, p := range snap {
		if p.PPID == b.self && p.PID != shellPID && !p.Dead() {
			if st, ok := before[p.PID]; ok && st == p.StartTime {
				continue
			}
			if !b.known(p.PID, p.StartTime) {
				fresh[p.PID] = true
				found = append(found, p)
			}
		}
	}
	// In the order they started (a scan lists them in any order).
	sort.Slice(found, func(i, j int) bool {
		if found[i].StartTime != found[j].StartTime {
			return found[i].StartTime < found[j].StartTime
		}
		return found[i].PID < found[j].PID
	})
	for _, p := range found {
		if fresh[p.PPID] {
			continue
		}
		// A child of what an earlier call left running (a loop's sleep)
		// is that process's, not this call's.
		if _, old := before[p.PPID]; old && p.PPID != shellSelf && p.PPID != shellPID {
			continue
		}
		bp := &BackgroundProc{PID: p.PID, Start: p.StartTime, Command: cmdline(p.PID), Call: n, Status: StateRunning}
		if bp.Command == "" || bp.Command == shellCmd {
			// Not exec'd yet (or a subshell): the call's text says what
			// it is until it execs.
			sc := shellCmd
			bp.shellCmd = &sc
			bp.Command = truncate(callText)
		}
		b.mu.Lock()
		b.procs = append(b.procs, bp)
		b.mu.Unlock()
		go b.wait(bp)
	}
	if len(found) > 0 {
		b.notify()
	}
}

// running lists the processes calls left that still run (by pid).
func (b *background) running() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	for _, p := range b.procs {
		if p.Status == "running" {
			out = append(out, p.PID)
		}
	}
	return out
}

func (b *background) known(pid int, start uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.procs {
		if p.PID == pid && p.Start == start {
			return true
		}
	}
	return false
}

// wait marks bp exited when it is gone, with its status when the server
// is the one to reap it (a reparented orphan); the shell reaps its own
// children and keeps their status to itself.
func (b *background) wait(bp *BackgroundProc) {
	_ = proctree.Wait(context.Background(), proctree.ID{PID: bp.PID, Start: bp.Start})
	var code *int
	sig := ""
	if st, err := proctree.ReadStat(bp.PID); err == nil && st.PPID == b.self && st.StartTime == bp.Start {
		var ws syscall.WaitStatus
		if pid, err := syscall.Wait4(bp.PID, &ws, syscall.WNOHANG, nil); err == nil && pid == bp.PID {
			if ws.Signaled() {
				c := 128 + int(ws.Signal())
				code, sig = &c, proctree.SignalName(ws.Signal())
			} else {
				c := ws.ExitStatus()
				code = &c
			}
		}
	}
	b.mu.Lock()
	bp.Status, bp.ExitCode, bp.Signal = "exited", code, sig
	b.mu.Unlock()
	b.notify()
}

func (b *background) notify() {
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

// watch calls onChange (which rewrites the record) whenever the list
// changed, until done.
func (b *background) watch(done <-chan struct{}, onChange func()) {
	for {
		select {
		case <-done:
			return
		case <-b.changed:
			onChange()
		}
	}
}

// list is a copy for the record: running processes, and the last few that
// exited.
func (b *background) list() []BackgroundProc {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []BackgroundProc
	exited := 0
	for i := len(b.procs) - 1; i >= 0; i-- {
		p := b.procs[i]
		if p.Status != StateRunning {
			exited++
			if exited > 20 {
				continue
			}
		}
		if p.shellCmd != nil && p.Status == StateRunning {
			p.recheck()
		}
		out = append(out, *p)
	}
	// oldest first
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// recheck reads again the command line of a process adopted between its
// fork and its exec. A subshell that never execs keeps the shell's.
func (p *BackgroundProc) recheck() {
	st, err := proctree.ReadStat(p.PID)
	if err != nil || st.StartTime != p.Start {
		return
	}
	if c := cmdline(p.PID); c != "" && c != *p.shellCmd {
		p.Command, p.shellCmd = c, nil
	}
}

// started lists the processes call n left running.
func (b *background) started(n int) []BackgroundProc {
	var out []BackgroundProc
	for _, p := range b.list() {
		if p.Call == n {
			out = append(out, p)
		}
	}
	return out
}

// closeAll closes the log at the session's end.
func (b *background) closeAll() {
	b.log.mu.Lock()
	defer b.log.mu.Unlock()
	if b.log.f != nil {
		b.log.f.Close()
		b.log.f = nil
	}
}

func cmdline(pid int) string {
	argv, err := proctree.Argv(pid)
	if err != nil {
		return ""
	}
	return truncate(strings.Join(argv, " "))
}

func truncate(s string) string {
	if len(s) > 300 {
		s = strings.ToValidUTF8(s[:300], "")
	}
	return s
}
