//go:build !linux

package jobs

// hasEnv reports whether process pid's environment holds kv. Without /proc
// it cannot be read, so the session members of a dead supervisor are not
// found this way (the job's main process and its tree still are).
func hasEnv(pid int, kv string) bool { return false }
