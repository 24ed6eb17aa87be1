package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// A run's private directory and cgroups are removed by Cleanup. A runner
// killed with SIGKILL never gets there; its sandboxed tree dies with it
// (the helper has a parent-death signal and is PID 1 of its namespace), but
// the directory and the cgroups stay. Each carries its owner's identity
// (pid, start time, boot id), and the next Prepare removes those whose
// owner is provably gone: a recycled pid is told apart by its start time.
//
// Leftovers come only from a killed runner, so the sweep (a listing of the
// whole temp dir and of the cgroup parents) runs at most once per
// sweepEvery per user, not on every call's critical path: a stamp file in
// the temp dir records the last one. A stamp that is not a regular file of
// this user (planted by someone else) never suppresses a sweep.

const (
	tempPrefix   = "agentplane-sandbox-"
	cgroupPrefix = "agentplane-"
	ownerFile    = "owner"
	sweepStamp   = "agentplane-sandbox-swept."
	sweepEvery   = time.Minute
)

// ownerID is "pid.starttime" of the calling process.
func ownerID() string {
	pid := os.Getpid()
	start, _ := proctree.StartTime(pid)
	return strconv.Itoa(pid) + "." + strconv.FormatUint(start, 10)
}

func writeOwner(base string) error {
	boot, _ := proctree.BootID()
	return os.WriteFile(filepath.Join(base, ownerFile), []byte(ownerID()+" "+boot+"\n"), 0o600)
}

// ownerGone parses "pid.starttime" and reports whether that process is
// provably dead. Anything unparsable is left alone.
func ownerGone(id, boot string) bool {
	pidS, startS, ok := strings.Cut(id, ".")
	pid, err1 := strconv.Atoi(pidS)
	start, err2 := strconv.ParseUint(startS, 10, 64)
	if !ok || err1 != nil || err2 != nil || pid <= 0 {
		return false
	}
	if cur, err := proctree.BootID(); err == nil && boot != "" && cur != boot {
		return true
	}
	return !proctree.Alive(pid, start)
}

// sweepStale removes the private directories under parent (the temp dir
// when "") whose owner is dead.
func sweepStale(parent string) {
	if parent == "" {
		parent = os.TempDir()
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // a run being prepared right now, or not ours
		}
		f := strings.Fields(string(data))
		boot := ""
		if len(f) > 1 {
			boot = f[1]
		}
		if len(f) > 0 && ownerGone(f[0], boot) {
			_ = os.RemoveAll(dir)
		}
	}
}

// sweepDue reports whether the leftovers under parent (the temp dir when
// "") are to be swept now, and if so records that they were: true when
// the stamp of this user is missing, older than sweepEvery, dated in the
// future, or not a regular file of this user.
func sweepDue(parent string) bool {
	if parent == "" {
		parent = os.TempDir()
	}
	stamp := filepath.Join(parent, sweepStamp+strconv.Itoa(os.Getuid()))
	now := time.Now()
	st, err := os.Lstat(stamp)
	if err == nil {
		sys, ok := st.Sys().(*syscall.Stat_t)
		age := now.Sub(st.ModTime())
		if st.Mode().IsRegular() && ok && int(sys.Uid) == os.Getuid() && age >= 0 && age < sweepEvery {
			return false
		}
		// Dated now, without following a planted symlink; when that fails
		// (someone else's file) every call sweeps, as without a stamp.
		_ = unix.UtimesNanoAt(unix.AT_FDCWD, stamp, nil, unix.AT_SYMLINK_NOFOLLOW)
		return true
	}
	if f, err := os.OpenFile(stamp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600); err == nil {
		f.Close()
	}
	return true
}
