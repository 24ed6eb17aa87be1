package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// A run's private directory and cgroups are removed by Cleanup. A runner
// killed with SIGKILL never gets there; its sandboxed tree dies with it
// (the helper has a parent-death signal and is PID 1 of its namespace), but
// the directory and the cgroups stay. Each is named after its owner (pid
// and start time), and the next Prepare removes those whose owner is
// provably gone: a recycled pid is told apart by its start time. (A
// directory of an older agentplane names its owner and boot in an owner
// file instead.) The name, not a file, so that a run costs no file to
// create and remove on the temp dir's filesystem, whose journal makes
// each such change a wait on a busy machine. A leftover from before a
// reboot whose pid and start time a live process happens to have again is
// kept until that process is gone.
//
// Leftovers come only from a killed runner, so the sweep (a listing of the
// whole temp dir and of the cgroup parents) runs at most once per
// sweepEvery per user, not on every call's critical path: a stamp file in
// the temp dir records the last one. A stamp that is not a regular file of
// this user (planted by someone else) never suppresses a sweep.

const (
	runPrefix    = "run."
	tempPrefix   = "agentplane-sandbox-" // an older agentplane's private directories
	cgroupPrefix = "agentplane-"
	ownerFile    = "owner" // an older agentplane's record of the owner
	sweepStamp   = "agentplane-sandbox-swept."
	sweepEvery   = time.Minute
)

// ownerID is "pid.starttime" of the calling process.
func ownerID() string {
	pid := os.Getpid()
	start, _ := proctree.StartTime(pid)
	return strconv.Itoa(pid) + "." + strconv.FormatUint(start, 10)
}

// privateName is the name of a run's private directory in its temp area:
// runPrefix, the owner and rnd, dot-separated. Short (29 characters at
// most, as short as an older agentplane's), since tools bind Unix sockets
// below TMPDIR and a socket's path has 107 bytes.
func privateName(rnd string) string {
	return runPrefix + ownerID() + "." + rnd
}

// nameOwner parses a private directory's name into its owner.
func nameOwner(name string) (id string, ok bool) {
	rest, ok := strings.CutPrefix(name, runPrefix)
	f := strings.Split(rest, ".")
	if !ok || len(f) != 3 {
		return "", false
	}
	return f[0] + "." + f[1], true
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
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		if id, ok := nameOwner(e.Name()); ok {
			if ownerGone(id, "") {
				_ = os.RemoveAll(dir)
			}
			continue
		}
		if !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // not ours
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
	return proctree.SweepDue(parent, sweepStamp, sweepEvery)
}
