package run

import (
	"github.com/agentplane/agentplane/pkg/capture"
	"github.com/agentplane/agentplane/pkg/result"
)

// ExitTimeout is the exit code reported for a run that timed out, as
// coreutils timeout(1) does.
const ExitTimeout = 124

// Render builds the result object of a finished run (without cwd, command
// and pid, which the caller adds).
func Render(res *Result, opt capture.RenderOptions) *result.Object {
	exit := res.ExitCode
	if res.Status == StatusTimeout {
		exit = ExitTimeout
	}
	obj := result.New().
		Set("success", res.Status == StatusCompleted && res.ExitCode == 0).
		Set("status", res.Status).
		Set("exit_code", exit)
	if res.Signal != "" {
		obj.Set("signal", res.Signal)
	} else {
		obj.Set("signal", nil)
	}
	obj.Set("timed_out", res.TimedOut)
	type str struct {
		name string
		cap  *capture.HeadTail
		file string
	}
	var streams []str
	if res.Output != nil {
		streams = []str{{"output", res.Output, res.OutputFile}}
	} else {
		streams = []str{{"stdout", res.Stdout, res.StdoutFile}, {"stderr", res.Stderr, res.StderrFile}}
	}
	truncated := false
	texts := make([]capture.Text, len(streams))
	snaps := make([]capture.Captured, len(streams))
	for i, s := range streams {
		snaps[i] = s.cap.Snapshot()
		texts[i] = capture.Render(snaps[i], opt)
		obj.Set(s.name, texts[i].Text)
	}
	for i, s := range streams {
		obj.Set(s.name+"_bytes", snaps[i].Total)
	}
	for i, s := range streams {
		obj.Set(s.name+"_truncated", snaps[i].Truncated())
		truncated = truncated || snaps[i].Truncated()
	}
	obj.Set("truncated", truncated)
	for i, s := range streams {
		if texts[i].Lossy {
			obj.Set(s.name+"_lossy", true)
		}
		if texts[i].Base64 {
			obj.Set(s.name+"_encoding", "base64")
		}
		if s.file != "" {
			obj.Set(s.name+"_file", s.file)
		}
	}
	obj.Set("elapsed_ms", res.Elapsed.Milliseconds()).
		Set("started_at", result.FormatTime(res.StartedAt))
	return obj
}
