package jobs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

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
	sv, held := st.runLock(id)
	return sv, held && sv.PID > 0 && proctree.Alive(sv.PID, sv.StartTime)
}

// runLock returns the identity last written in job id's run lock and
// whether a process holds the lock now. A holder whose identity reads as
// zero took the lock a moment ago and has not written it yet.
func (st *Store) runLock(id string) (proctree.Stat, bool) {
	var sv proctree.Stat
	f, err := state.OpenFile(filepath.Join(st.jobDir(id), runLockFile), os.O_RDONLY, 0)
	if err != nil {
		return sv, false
	}
	defer f.Close()
	sv = readLockIdentity(f)
	if unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) == nil {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return sv, false
	}
	return sv, true
}

func readLockIdentity(f *os.File) proctree.Stat {
	var sv proctree.Stat
	b := make([]byte, 64)
	n, _ := f.ReadAt(b, 0)
	if _, err := fmt.Sscanf(string(b[:n]), "%d %d", &sv.PID, &sv.StartTime); err != nil {
		return proctree.Stat{}
	}
	return sv
}

// takeRunLock takes job id's run lock without waiting, for a caller that
// must know that no supervisor runs the job while it acts, and that none
// starts meanwhile (one launched now fails to take the lock and refuses).
// It returns the identity of the last supervisor that held the lock, and
// ok false when a supervisor holds it. On a state directory where the lock
// file cannot be created, no supervisor can have made it or make it now:
// ok, with nothing to unlock.
func (st *Store) takeRunLock(id string) (sv proctree.Stat, unlock func(), ok bool) {
	path := filepath.Join(st.jobDir(id), runLockFile)
	f, err := state.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = state.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	}
	if err != nil {
		return sv, func() {}, true
	}
	if !lockExclusive(f) {
		f.Close()
		return sv, nil, false
	}
	return readLockIdentity(f), func() { f.Close() }, true
}

// lockExclusive takes the run lock f exclusively without waiting for a
// holder of it, for a supervisor (which runs the job only with it) and for
// a stop (takeRunLock). A status reader probes the lock with a shared lock
// for a moment (runLock): while only readers hold it, the exclusive lock
// is tried again, so that a reader is not taken for a supervisor. A writer
// is a supervisor or a stop: false, at once.
func lockExclusive(f *os.File) bool {
	deadline := time.Now().Add(readerWait)
	for unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		if !onlyReaders(f) || time.Now().After(deadline) {
			return false
		}
		if runLockRetried != nil {
			runLockRetried()
		}
		time.Sleep(50 * time.Microsecond)
	}
	return true
}

// readerWait bounds how long takeRunLock waits out status readers' shared
// locks, which are held for the few system calls of a probe.
const readerWait = time.Second

// runLockRetried is called before each new try of takeRunLock (tests).
var runLockRetried func()

// onlyReaders reports that every flock(2) held on f's file is shared, by
// /proc/locks, which names the kind of each lock on each inode (false
// where it cannot be read: the holder is then taken for a supervisor, as
// without it).
func onlyReaders(f *os.File) bool {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return false
	}
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		return false
	}
	return flockReadersOnly(locks, uint64(unix.Major(uint64(st.Dev))), uint64(unix.Minor(uint64(st.Dev))), uint64(st.Ino))
}

// flockReadersOnly reads /proc/locks: lines such as
// "3: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF", and "3: -> FLOCK ..."
// for a waiter, which holds nothing. It reports that at least one FLOCK is
// held on major:minor:ino and none of them is a WRITE.
func flockReadersOnly(locks []byte, major, minor, ino uint64) bool {
	readers := false
	for _, line := range strings.Split(string(locks), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "FLOCK" || !sameDevIno(f[5], major, minor, ino) {
			continue // a waiter ("->") holds nothing
		}
		if f[3] != "READ" {
			return false
		}
		readers = true
	}
	return readers
}

// sameDevIno compares the device and inode field of /proc/locks
// ("fd:01:5678": major and minor in hex, the inode in decimal).
func sameDevIno(field string, major, minor, ino uint64) bool {
	var ma, mi, in uint64
	if _, err := fmt.Sscanf(field, "%x:%x:%d", &ma, &mi, &in); err != nil {
		return false
	}
	return ma == major && mi == minor && in == ino
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
