//go:build !linux

package sandbox

import "os"

// endReports: the macOS helper execs sandbox-exec and so cannot report
// the command's end; the runner waits for the exit.
const endReports = false

// specChannel returns a pipe for the spec, ours the write end.
func specChannel(bool) (theirs, ours *os.File, err error) { return os.Pipe() }

// shutWrite is not called without the report.
func shutWrite(f *os.File) { f.Close() }
