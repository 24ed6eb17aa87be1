package reexec

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// DetachedServers returns the predicate that spares, in agentsh's final
// cleanup, the job supervisors and session servers (of any state
// directory) that the command started: 'agentsh -c "agentjob start -- srv"'
// must leave the job running. A process qualifies only if all of these
// hold, so a command cannot escape the cleanup by renaming itself:
//   - it leads its own session (both servers call setsid);
//   - its argv is "agentjob __supervise …" or "agentsh __session-serve …";
//   - its executable (proctree.Executable) is the calling program, the
//     agentjob beside it, or an agentjob on the command's PATH (cmdEnv).
//
// The executables are looked up once, on the first candidate.
func DetachedServers(cmdEnv []string) func(proctree.Stat) bool {
	var known []os.FileInfo
	looked := false
	return func(p proctree.Stat) bool {
		if p.SID != p.PID {
			return false
		}
		argv, err := proctree.Argv(p.PID)
		if err != nil || len(argv) < 2 {
			return false
		}
		prog := filepath.Base(argv[0])
		if !(prog == "agentjob" && argv[1] == JobSupervisor) && !(prog == "agentsh" && argv[1] == SessionServer) {
			return false
		}
		if !looked {
			looked, known = true, serverExecutables(cmdEnv)
		}
		fi, err := proctree.Executable(p.PID)
		if err != nil {
			return false
		}
		for _, k := range known {
			if os.SameFile(fi, k) {
				return true
			}
		}
		return false
	}
}

// serverExecutables are the files a legitimate detached server runs from.
func serverExecutables(cmdEnv []string) []os.FileInfo {
	var paths []string
	if self, err := os.Executable(); err == nil {
		paths = append(paths, self, filepath.Join(filepath.Dir(self), "agentjob"))
	}
	for _, kv := range cmdEnv {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, dir := range filepath.SplitList(v) {
				if filepath.IsAbs(dir) {
					paths = append(paths, filepath.Join(dir, "agentjob"))
				}
			}
		}
	}
	var out []os.FileInfo
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			out = append(out, fi)
		}
	}
	return out
}
