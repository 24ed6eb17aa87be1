package run

import (
	"os"
	"path/filepath"
)

// Cwd is the directory a call that names dir (its --cwd, "" for none)
// works in: dir itself, cleaned, when it is absolute, else dir under this
// process's working directory. agentsh one-shot and session start,
// agentjob start, the sandbox's relative paths and the MCP server's
// directory all resolve here, so the same --cwd names the same directory
// on every path. ok is false when the working directory cannot be read
// (it was removed under the process); the result is then resolved against
// "/". The directory need not exist: CheckDir reports that.
func Cwd(dir string) (cwd string, ok bool) {
	if filepath.IsAbs(dir) {
		return filepath.Clean(dir), true
	}
	wd, err := os.Getwd()
	if err != nil {
		wd = "/"
	}
	return filepath.Join(wd, dir), err == nil
}
