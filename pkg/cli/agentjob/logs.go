package agentjob

import (
	"bytes"
	"regexp"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/jobs"
	"github.com/agentplane/agentplane/pkg/result"
)

// DefaultMaxBytes bounds one read of a log stream, so one call's output
// stays small enough for a model's context.
const DefaultMaxBytes = 1 << 20

// LogsOptions are the flags and argument of logs.
type LogsOptions struct {
	Env      *clikit.Env
	StateDir string
	Job      string

	Stream    string
	Offset    int64
	SinceLast bool
	Reader    string
	Tail      int
	MaxBytes  int64
	Follow    bool
	Grep      string
	Raw       bool

	offsetSet, tailSet, readerSet bool
}

// NewCmdLogs builds the logs command.
func NewCmdLogs(env *clikit.Env, stateDir *string, runF func(*LogsOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &LogsOptions{Env: env, Stream: "both", Reader: "default", MaxBytes: DefaultMaxBytes}
	cmd := &cobra.Command{
		Use:   "logs JOB",
		Short: "Read a job's output by absolute byte offsets",
		Long: "Read a job's stdout and stderr by absolute byte offsets: from --offset (next_offset of the last " +
			"read), what a named reader has not read yet (--since-last), or the last lines (--tail). --grep " +
			"returns matching lines with their offsets; --follow streams NDJSON until the job ends. data never " +
			"ends inside a UTF-8 character (next_offset says where the next read begins; lossy says invalid bytes " +
			"were replaced) and is cleaned like agentsh's output (ANSI escapes removed, carriage-return redraws " +
			"collapsed, per read) unless --raw. A damaged --since-last cursor starts again from the oldest byte " +
			"kept (cursor_reset). Reading needs no write access to the state directory, except --since-last, " +
			"which moves its cursor.",
		Annotations: jobAnnotations("agentjob_logs", clikit.Hints{ReadOnly: true}, "job", "the job's handle or name"),
		Args:        cobra.ArbitraryArgs,
	}
	cmd.Annotations[clikit.AnnotToolDoc] = "Read a job's stdout and stderr by absolute byte offsets: from offset (the next_offset " +
		"of the last read), what a named reader has not read yet (since_last), or the last tail lines; grep returns the " +
		"matching lines with their offsets. data never splits a UTF-8 character and is cleaned of terminal escapes and " +
		"carriage-return redraws unless raw. The result always carries the job's status."
	f := cmd.Flags()
	f.Var(clikit.EnumValue{S: &o.Stream, Allowed: []string{jobs.Stdout, jobs.Stderr, "both"}}, "stream", "which stream: stdout, stderr or both")
	f.Int64Var(&o.Offset, "offset", 0, "read from absolute byte `N` of each stream")
	f.BoolVar(&o.SinceLast, "since-last", false, "read what this reader has not read yet, and remember where it stopped")
	f.StringVar(&o.Reader, "reader", o.Reader, "the `NAME` of the cursor --since-last keeps")
	f.IntVar(&o.Tail, "tail", 0, "read the last `N` lines")
	f.Var(clikit.SizeValue{N: &o.MaxBytes}, "max-bytes", "read at most `N` bytes of each stream")
	f.BoolVar(&o.Follow, "follow", false, "stream new output as NDJSON until the job ends")
	clikit.MarkFlags(f, clikit.ServerOwned, "follow")
	f.StringVar(&o.Grep, "grep", "", "return only the lines that match `REGEX`, with their offsets")
	f.BoolVar(&o.Raw, "raw", false, "keep ANSI escapes and carriage returns in data (it is still valid UTF-8)")
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		ref, err := oneRef(env, cmd, args)
		if err != nil {
			return nil, err
		}
		o.Job, o.StateDir = ref, *stateDir
		o.offsetSet, o.tailSet, o.readerSet = clikit.FlagChanged(cmd, "offset"), clikit.FlagChanged(cmd, "tail"), clikit.FlagChanged(cmd, "reader")
		if runF != nil {
			return runF(o)
		}
		return logsRun(o)
	})
	return cmd
}

func (o *LogsOptions) check() (*regexp.Regexp, error) {
	n := 0
	for _, set := range []bool{o.offsetSet, o.SinceLast, o.tailSet} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return nil, result.Errorf(result.CodeUsage, "give at most one of --offset, --since-last and --tail")
	case o.readerSet && !o.SinceLast:
		return nil, result.Errorf(result.CodeUsage, "--reader names the cursor of --since-last; give --since-last too")
	case o.Offset < 0 || o.Tail < 0:
		return nil, result.Errorf(result.CodeUsage, "--offset and --tail must not be negative")
	case o.MaxBytes <= 0:
		return nil, result.Errorf(result.CodeUsage, "--max-bytes must be positive")
	}
	if o.Grep == "" {
		return nil, nil
	}
	if n > 0 && !o.Follow {
		return nil, result.Errorf(result.CodeUsage, "--grep searches the whole log; position flags apply only with --follow")
	}
	re, err := regexp.Compile(o.Grep)
	if err != nil {
		return nil, result.Errorf(result.CodeUsage, "--grep: %v", err)
	}
	return re, nil
}

func (o *LogsOptions) readOptions() jobs.ReadOptions {
	return jobs.ReadOptions{MaxBytes: o.MaxBytes, Raw: o.Raw}
}

func (o *LogsOptions) streams() []string {
	if o.Stream == "both" {
		return []string{jobs.Stdout, jobs.Stderr}
	}
	return []string{o.Stream}
}

func logsRun(o *LogsOptions) (*clikit.Outcome, error) {
	re, err := o.check()
	if err != nil {
		return nil, err
	}
	st, err := openStore(o.Env, o.StateDir)
	if err != nil {
		return nil, err
	}
	if o.Follow {
		return follow(o, st, re)
	}
	// The status is read first: if it says ended, the logs read after it
	// are complete.
	s, err := st.Status(o.Job)
	if err != nil {
		return nil, err
	}
	parts := map[string]*result.Object{}
	for _, stream := range o.streams() {
		if re != nil {
			m, err := st.Grep(o.Job, stream, re, 0)
			if err != nil {
				return nil, err
			}
			if m == nil {
				m = []jobs.Match{}
			}
			parts[stream] = result.New().Set("matches", m)
			continue
		}
		var c jobs.LogChunk
		switch {
		case o.SinceLast:
			c, err = st.ReadSince(o.Job, stream, o.Reader, o.readOptions())
		case o.tailSet:
			c, err = st.Tail(o.Job, stream, o.Tail, o.readOptions())
		default:
			c, err = st.ReadLog(o.Job, stream, o.Offset, o.readOptions())
		}
		if err != nil {
			return nil, err
		}
		parts[stream] = chunkObject(result.New(), c)
	}
	return &clikit.Outcome{Value: logsResult(o, s, parts)}, nil
}

// logsResult puts the stream parts at the top level for one stream, or
// under "stdout" and "stderr" for both.
func logsResult(o *LogsOptions, s jobs.Status, parts map[string]*result.Object) *result.Object {
	obj := result.New().Set("success", true).Set("handle", s.Handle).Set("status", s.Status)
	if o.Stream != "both" {
		p := parts[o.Stream]
		for _, k := range []string{"data", "matches", "offset", "next_offset", "eof", "dropped_bytes", "lossy", "cursor_reset"} {
			if v, ok := p.Get(k); ok {
				obj.Set(k, v)
			}
		}
		return obj
	}
	return obj.Set(jobs.Stdout, parts[jobs.Stdout]).Set(jobs.Stderr, parts[jobs.Stderr])
}

func chunkObject(o *result.Object, c jobs.LogChunk) *result.Object {
	o.Set("data", string(c.Data)).Set("offset", c.Offset).Set("next_offset", c.NextOffset).Set("eof", c.EOF)
	if c.DroppedBytes > 0 {
		o.Set("dropped_bytes", c.DroppedBytes)
	}
	if c.Lossy {
		o.Set("lossy", true)
	}
	if c.CursorReset {
		o.Set("cursor_reset", true)
	}
	return o
}

// follower streams one log stream from a position.
type follower struct {
	env    *clikit.Env
	stream string
	start  int64 // where following began, for the final result
	pos    int64
	begun  bool // a read happened; with --since-last it tells start
	// partial holds the unfinished last line for --grep, which starts at
	// lineAt.
	partial []byte
	lineAt  int64
}

// follow streams new output as NDJSON events until the job ends. It never
// polls: it arms a watch on the job, reads the status, then reads every
// stream to its end, and sleeps on the watch only if the job still runs.
// Reading the status before the logs is what makes the end complete: the
// supervisor records the end only after the last output is in the logs.
func follow(o *LogsOptions, st *jobs.Store, re *regexp.Regexp) (*clikit.Outcome, error) {
	env := o.Env
	env.Pretty = false
	fs := make([]*follower, 0, 2)
	for _, stream := range o.streams() {
		f := &follower{env: env, stream: stream, pos: o.Offset}
		if o.tailSet {
			c, err := st.Tail(o.Job, stream, o.Tail, o.readOptions())
			if err != nil {
				return nil, err
			}
			f.pos = c.Offset
		}
		f.start, f.lineAt = f.pos, f.pos
		fs = append(fs, f)
	}
	changed, err := st.Watch(env.Ctx, o.Job)
	if err != nil {
		return nil, err
	}
	var s jobs.Status
	for {
		if s, err = st.Status(o.Job); err != nil {
			return nil, err
		}
		for _, f := range fs {
			if err := f.drain(o, st, re); err != nil {
				return nil, err
			}
		}
		if s.Ended() {
			break
		}
		if _, ok := <-changed; !ok {
			// The caller was interrupted (or the watch failed): report
			// where each stream stopped so a later call can go on.
			break
		}
	}
	parts := map[string]*result.Object{}
	for _, f := range fs {
		if re != nil && len(f.partial) > 0 && s.Ended() {
			// The job is over: its last line will not get a newline.
			f.match(re, f.lineAt, f.partial)
			f.partial = nil
		}
		parts[f.stream] = result.New().Set("offset", f.start).Set("next_offset", f.pos).Set("eof", s.Ended())
	}
	obj := logsResult(o, s, parts)
	if !s.Ended() {
		obj.Set("interrupted", true)
	}
	return &clikit.Outcome{Value: obj}, nil
}

// drain reads the stream from f.pos to its current end and emits it.
func (f *follower) drain(o *LogsOptions, st *jobs.Store, re *regexp.Regexp) error {
	opt := o.readOptions()
	if re != nil {
		// Lines are matched, and their offsets counted, in the log's own
		// bytes, as --grep without --follow does.
		opt.Raw = true
	}
	for {
		var c jobs.LogChunk
		var err error
		if o.SinceLast {
			c, err = st.ReadSince(o.Job, f.stream, o.Reader, opt)
		} else {
			c, err = st.ReadLog(o.Job, f.stream, f.pos, opt)
		}
		if err != nil {
			return err
		}
		if !f.begun {
			// A --since-last cursor is where this reader stopped before.
			f.begun, f.start, f.lineAt = true, c.Offset, c.Offset
		}
		if len(c.Data) == 0 && c.DroppedBytes == 0 {
			f.pos = c.NextOffset
			return nil
		}
		f.pos = c.NextOffset
		if re == nil {
			ev := result.New().Set("type", f.stream)
			_ = o.Env.Emit(chunkObject(ev, c))
		} else {
			f.lines(re, c)
		}
		if c.EOF {
			return nil
		}
	}
}

// lines emits the complete lines of c that match re, keeping an
// unfinished last line for the next chunk.
func (f *follower) lines(re *regexp.Regexp, c jobs.LogChunk) {
	if c.DroppedBytes > 0 || c.Offset != f.lineAt+int64(len(f.partial)) {
		// The cap dropped what the partial line continued into.
		f.partial, f.lineAt = nil, c.Offset
	}
	buf := append(f.partial, c.Data...)
	at := f.lineAt
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		f.match(re, at, buf[:i])
		at += int64(i + 1)
		buf = buf[i+1:]
	}
	f.partial, f.lineAt = bytes.Clone(buf), at
}

// match emits line if it matches; emitted lines carry the stream name, so
// one NDJSON sequence can interleave both streams.
func (f *follower) match(re *regexp.Regexp, at int64, line []byte) {
	if re.Match(line) {
		_ = f.env.Emit(result.New().Set("type", "match").Set("stream", f.stream).Set("offset", at).Set("line", string(line)))
	}
}
