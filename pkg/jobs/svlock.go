package jobs

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/state"
	"golang.org/x/sys/unix"
)

// The run lock (supervisor.lock) is held by the job's live supervisor and
// holds its identity, "PID START-TIME\n", written once it has the lock. It
// is how a job whose status.json is damaged is still found: the lock says
// whether a supervisor runs, and the identity which process it is, without
// any record.

// writeLockIdentity records the supervisor's identity in the lock file f.
// It is not synced: after a crash the lock is free anyway.
func writeLockIdentity(f *os.File, self proctree.Stat) {
	_ = f.Truncate(0)
	_, _ = f.WriteAt(fmt.Appendf(nil, "%d %d\n", self.PID, self.StartTime), 0)
}

// lockHolder returns the identity last written in job id's run lock and
// whether that supervisor holds the lock now and is alive. Reading needs
// no write access.
func (st *Store) lockHolder(id string) (proctree.Stat, bool) {
	var sv proctree.Stat
	f, err := state.OpenFile(filepath.Join(st.jobDir(id), runLockFile), os.O_RDONLY, 0)
	if err != nil {
		return sv, false
	}
	defer f.Close()
	b := make([]byte, 64)
	n, _ := f.ReadAt(b, 0)
	if _, err := fmt.Sscanf(string(b[:n]), "%d %d", &sv.PID, &sv.StartTime); err != nil {
		sv = proctree.Stat{}
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) == nil {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return sv, false
	}
	return sv, sv.PID > 0 && proctree.Alive(sv.PID, sv.StartTime)
}

// corruptStatus is what List shows for job id whose status.json does not
// parse: what the spec says, the error, and running if a supervisor of it
// still holds its run lock (it rewrites the record at its next change),
// lost otherwise.
func (st *Store) corruptStatus(id string, rerr error) Status {
	var spec Spec
	_ = state.ReadJSON(filepath.Join(st.jobDir(id), specFile), &spec)
	s := Status{Handle: st.dir.Mint("job", id), ID: id, Name: spec.Name, Status: StatusRunning,
		Command: spec.command(), Cwd: spec.Cwd, Description: spec.Description, Backend: BackendLocal,
		Error: state.Classify(rerr)}
	if sv, ok := st.lockHolder(id); ok {
		s.svPID, s.svStart, s.svLocal = sv.PID, sv.StartTime, true
		return s
	}
	s.Status, s.LostReason = StatusLost, LostStateCorrupt
	return s
}
