package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// A run's private directory and cgroups are removed by Cleanup. A runner
// killed with SIGKILL never gets there; its sandboxed tree dies with it
// (the helper has a parent-death signal and is PID 1 of its namespace), but
// the directory and the cgroups stay. Each carries its owner's identity
// (pid, start time, boot id), and the next Prepare removes those whose
// owner is provably gone: a recycled pid is told apart by its start time.

const (
	tempPrefix   = "agentplane-sandbox-"
	cgroupPrefix = "agentplane-"
	ownerFile    = "owner"
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
