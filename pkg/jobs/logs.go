package jobs

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/agentplane/agentplane/internal/faultpoint"
	"github.com/agentplane/agentplane/pkg/capture"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/state"
)

// Log streams.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// defaultMaxBytes bounds a read when the caller gives no limit.
const defaultMaxBytes = 1 << 20

// logMeta is the sidecar <stream>.meta.json: how many bytes the cap has cut
// from the front of the stream. Offsets are absolute (bytes since the job
// first started), so byte N of the stream is at N-Dropped in the file.
//
// The count belongs to one version of the log file, named by its inode,
// and a trim announces the next version before it exists: the sidecar is
// rewritten with Next (the trimmed copy's inode and count) before the copy
// is renamed over the log. Whatever moment the supervisor dies at, the
// inode of the log file that readers open picks the count that goes with
// it, so offsets never tear.
type logMeta struct {
	Dropped int64 `json:"dropped"`
	// Ino is the inode of the log file Dropped counts for (0 in sidecars
	// written before it was recorded: they go with any file).
	Ino  uint64    `json:"ino,omitempty"`
	Next *logCount `json:"next,omitempty"`
}

// logCount is a dropped count and the inode of the log file it goes with.
type logCount struct {
	Dropped int64  `json:"dropped"`
	Ino     uint64 `json:"ino"`
}

// droppedFor is the dropped count of the log file with inode ino.
func (m logMeta) droppedFor(ino uint64) int64 {
	if m.Next != nil && m.Next.Ino == ino {
		return m.Next.Dropped
	}
	return m.Dropped
}

func logPath(dir, stream string) string  { return filepath.Join(dir, stream+".log") }
func metaPath(dir, stream string) string { return filepath.Join(dir, stream+".meta.json") }

// trimPrefix begins the name of a trim's temp copy of stream.
func trimPrefix(stream string) string { return "." + stream + ".trim" }

// readMeta reads the sidecar; a missing one means nothing was dropped, a
// damaged one is state_corrupt (the offsets of that stream are unknown).
func readMeta(dir, stream string) (logMeta, error) {
	var m logMeta
	err := state.ReadJSON(metaPath(dir, stream), &m)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	return m, err
}

func fileIno(f *os.File) (uint64, int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st == nil {
		return 0, fi.Size(), nil
	}
	return st.Ino, fi.Size(), nil
}

// logTotal is how many bytes the stream has produced, kept or dropped.
func logTotal(dir, stream string) int64 {
	f, dropped, err := openLog(dir, stream)
	if err != nil {
		return dropped
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return dropped
	}
	return dropped + fi.Size()
}

// openLog opens a stream's file together with its dropped count. The
// supervisor swaps the file and its count under the exclusive log lock,
// and the count is chosen by the inode of the file opened (see logMeta),
// so the pair is consistent even after a crash; the shared lock keeps the
// sidecar and the file from changing between the two reads. After that
// the open descriptor keeps its file however the supervisor trims.
func openLog(dir, stream string) (*os.File, int64, error) {
	unlock, err := state.LockShared(filepath.Join(dir, logLockFile))
	if err != nil {
		return nil, 0, err
	}
	defer unlock()
	m, err := readMeta(dir, stream)
	if err != nil {
		return nil, 0, err
	}
	f, err := state.OpenFile(logPath(dir, stream), os.O_RDONLY, 0)
	if err != nil {
		return nil, m.Dropped, err
	}
	ino, _, err := fileIno(f)
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, m.droppedFor(ino), nil
}

// logSink is the supervisor's writer for one stream: it appends to the
// log file and, past the limit, trims the file to its newest half.
type logSink struct {
	dir, stream string
	limit       int64
	f           *os.File
	ino         uint64
	size        int64
	dropped     int64
	// lost counts output that could not be written (a full disk): it is
	// in no offset, and the final record reports it.
	lost int64
}

// openSink opens the stream's log for appending. It repairs what a killed
// trim left: the sidecar is made to name the current file alone, and a
// damaged sidecar is rebuilt from the total of the last recorded end
// (prevTotal, 0 when unknown), so offsets stay absolute.
func openSink(dir, stream string, limit, prevTotal int64) (*logSink, error) {
	s, err := openSinkLocked(dir, stream, limit, prevTotal)
	if err != nil {
		return nil, err
	}
	if s.size > limit { // a smaller limit than the previous run's
		if err := s.trim(); err != nil {
			s.f.Close()
			return nil, err
		}
	}
	return s, nil
}

func openSinkLocked(dir, stream string, limit, prevTotal int64) (*logSink, error) {
	// Readers take the shared log lock; creating the file here means a
	// reader never has to (it may have no write access).
	unlock, err := state.Lock(filepath.Join(dir, logLockFile))
	if err != nil {
		return nil, err
	}
	defer unlock()
	f, err := state.OpenFile(logPath(dir, stream), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	ino, size, err := fileIno(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &logSink{dir: dir, stream: stream, limit: limit, f: f, ino: ino, size: size}
	m, merr := readMeta(dir, stream)
	if merr != nil {
		s.dropped = max(0, prevTotal-size)
	} else {
		s.dropped = m.droppedFor(ino)
	}
	if merr != nil || m.Next != nil || (m.Ino != ino && s.dropped != 0) {
		if err := s.writeMeta(logMeta{Dropped: s.dropped, Ino: ino}); err != nil {
			f.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *logSink) writeMeta(m logMeta) error {
	return state.WriteJSONAtomic(metaPath(s.dir, s.stream), m, 0o600)
}

func (s *logSink) Write(p []byte) (int, error) {
	n, err := s.f.Write(p)
	s.size += int64(n)
	if err != nil {
		s.lost += int64(len(p) - n)
		return n, err
	}
	if s.size > s.limit {
		if err := s.trim(); err != nil {
			return n, err
		}
	}
	return n, nil
}

func (s *logSink) total() int64 { return s.dropped + s.size }

// trim keeps the newest half of the limit. Keeping half rather than all of
// it means trims happen once per limit/2 bytes, not on every write. The
// copy goes to a temp file that replaces the log by rename; the sidecar
// announces the copy's count before the rename (see logMeta), all under
// the exclusive log lock.
func (s *logSink) trim() error {
	keep := s.limit / 2
	cut := s.size - keep
	src, err := state.OpenFile(logPath(s.dir, s.stream), os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(s.dir, trimPrefix(s.stream)+"*")
	if err != nil {
		return err
	}
	fail := func(err error) error {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if _, err := io.Copy(tmp, io.NewSectionReader(src, cut, keep)); err != nil {
		return fail(err)
	}
	ino, _, err := fileIno(tmp)
	if err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	faultpoint.Hit("log.trim.copied")
	unlock, err := state.Lock(filepath.Join(s.dir, logLockFile))
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	defer unlock()
	next := &logCount{Dropped: s.dropped + cut, Ino: ino}
	if err := s.writeMeta(logMeta{Dropped: s.dropped, Ino: s.ino, Next: next}); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	faultpoint.Hit("log.trim.announced")
	if err := os.Rename(tmp.Name(), logPath(s.dir, s.stream)); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	faultpoint.Hit("log.trim.renamed")
	s.dropped, s.ino = next.Dropped, ino
	nf, err := state.OpenFile(logPath(s.dir, s.stream), os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	s.f.Close()
	s.f, s.size = nf, keep
	// Tidy the sidecar; the announced count is already right for readers.
	_ = s.writeMeta(logMeta{Dropped: s.dropped, Ino: ino})
	return nil
}

func (s *logSink) Close() error { return s.f.Close() }

// LogChunk is a piece of a log stream addressed by absolute offsets.
type LogChunk struct {
	// Data is the text of the bytes from Offset to NextOffset: cleaned
	// like agentsh's capture (ANSI escapes removed, carriage-return
	// redraws collapsed), or with Raw only made valid UTF-8. It never ends
	// inside a character or escape sequence that the log continues.
	Data       []byte `json:"-"`
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"next_offset"`
	// EOF reports that NextOffset is the end of what the stream has
	// produced so far (a running job may write more).
	EOF bool `json:"eof"`
	// DroppedBytes is how much of the requested range the log cap had
	// already dropped; Offset is then past the request.
	DroppedBytes int64 `json:"dropped_bytes,omitempty"`
	// Lossy reports that invalid UTF-8 in the range was replaced.
	Lossy bool `json:"lossy,omitempty"`
	// CursorReset reports that a --since-last cursor was damaged and the
	// read started again from the oldest byte kept.
	CursorReset bool `json:"cursor_reset,omitempty"`
}

// ReadOptions say how a log read presents its bytes.
type ReadOptions struct {
	MaxBytes int64 // at most this many bytes of the log (0: 1 MiB)
	Raw      bool  // keep escapes and carriage returns (UTF-8 is still repaired)
}

func (o ReadOptions) maxBytes() int64 {
	if o.MaxBytes <= 0 {
		return defaultMaxBytes
	}
	return o.MaxBytes
}

func checkStream(stream string) error {
	if stream != Stdout && stream != Stderr {
		return invalid("stream must be stdout or stderr, not %q", stream)
	}
	return nil
}

// ReadLog reads up to opt.MaxBytes of stream from the absolute offset.
func (st *Store) ReadLog(ref, stream string, offset int64, opt ReadOptions) (_ LogChunk, err error) {
	defer func() { err = state.Coded(err) }()
	id, err := st.Resolve(ref)
	if err != nil {
		return LogChunk{}, err
	}
	w, err := readWindow(st.jobDir(id), stream, offset, opt.maxBytes())
	if err != nil {
		return LogChunk{}, err
	}
	return w.present(opt.Raw, st.endedFn(id)), nil
}

// endedFn reports, when asked, whether job id has ended, so that a window
// ending inside a character knows whether the rest can still come.
func (st *Store) endedFn(id string) func() bool {
	return func() bool {
		s, err := st.statusOf(id)
		return err == nil && s.Ended()
	}
}

// window is a raw read of a log: the bytes of [Offset, NextOffset) in
// Data, and after them up to lookahead bytes more, which complete a
// character or escape sequence that the window alone would only begin.
type window struct {
	LogChunk
	more  []byte
	total int64
}

// lookahead is how far a window may be widened past its limit so that it
// holds at least one whole character or escape sequence.
const lookahead = 4 << 10

func readWindow(dir, stream string, offset, maxBytes int64) (window, error) {
	if err := checkStream(stream); err != nil {
		return window{}, err
	}
	if offset < 0 {
		return window{}, invalid("offset must not be negative")
	}
	f, dropped, err := openLog(dir, stream)
	if errors.Is(err, fs.ErrNotExist) {
		return window{LogChunk: LogChunk{Offset: offset, NextOffset: offset, EOF: true}, total: offset}, nil
	}
	if err != nil {
		return window{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return window{}, err
	}
	total := dropped + fi.Size()
	w := window{LogChunk: LogChunk{Offset: offset}, total: total}
	if offset < dropped {
		w.DroppedBytes = dropped - offset
		w.Offset = dropped
	}
	w.Offset = min(w.Offset, total)
	n := min(maxBytes, total-w.Offset)
	buf := make([]byte, min(n+lookahead, total-w.Offset))
	got, err := f.ReadAt(buf, w.Offset-dropped)
	if err != nil && err != io.EOF {
		return window{}, err
	}
	buf = buf[:got]
	w.Data, w.more = buf[:min(int64(got), n)], buf[min(int64(got), n):]
	w.NextOffset = w.Offset + int64(len(w.Data))
	return w, nil
}

// present turns the raw window into what a reader gets: text that never
// splits a character or sequence (the window ends before one that the log
// continues, or, for a job that has ended, replaces a truncated one),
// cleaned unless raw.
func (w window) present(raw bool, ended func() bool) LogChunk {
	c := w.LogChunk
	data := w.Data
	atEnd := func(d []byte) bool { return c.Offset+int64(len(d)) == w.total }
	text, skipped, consumed, lossy := capture.Window(data, false, raw)
	if skipped+consumed == 0 && len(data) > 0 && len(w.more) > 0 {
		// Nothing but the start of a character or sequence: widen.
		data = append(data[:len(data):len(data)], w.more...)
		text, skipped, consumed, lossy = capture.Window(data, false, raw)
	}
	cutOff := skipped+consumed < len(data)
	if cutOff && (atEnd(data) && ended() || !atEnd(data) && skipped+consumed == 0) {
		// Nothing more will come, or the sequence is longer than any
		// window: the cut-off rest is presented as it is.
		text, skipped, consumed, lossy = capture.Window(data, true, raw)
	}
	c.Offset += int64(skipped)
	c.Data, c.Lossy = text, lossy
	c.NextOffset = c.Offset + int64(consumed)
	c.EOF = c.NextOffset == w.total
	return c
}

// Tail returns the last n lines of stream (at most opt.MaxBytes of them).
// A final line without a newline counts as a line.
func (st *Store) Tail(ref, stream string, n int, opt ReadOptions) (_ LogChunk, err error) {
	defer func() { err = state.Coded(err) }()
	id, err := st.Resolve(ref)
	if err != nil {
		return LogChunk{}, err
	}
	dir := st.jobDir(id)
	maxBytes := opt.maxBytes()
	total := logTotal(dir, stream)
	w, err := readWindow(dir, stream, max(0, total-maxBytes), maxBytes)
	if err != nil {
		return LogChunk{}, err
	}
	// Lines are counted in the bytes of the log, before any cleaning, so
	// that the offset stays exact.
	data := w.Data
	body := bytes.TrimSuffix(data, []byte("\n"))
	cut := 0
	for i, seen := len(body)-1, 0; i >= 0; i-- {
		if body[i] == '\n' {
			seen++
			if seen == n {
				cut = i + 1
				break
			}
		}
	}
	if n <= 0 {
		cut = len(data)
	}
	w.Data = data[cut:]
	w.Offset += int64(cut)
	w.DroppedBytes = 0
	return w.present(opt.Raw, st.endedFn(id)), nil
}

// Match is one line of a log that matched a Grep pattern.
type Match struct {
	Offset int64  `json:"offset"`
	Line   string `json:"line"`
}

// Grep returns up to limit (0: 1000) lines of stream that match re, oldest
// first, each with the absolute offset where it starts.
func (st *Store) Grep(ref, stream string, re *regexp.Regexp, limit int) (_ []Match, err error) {
	defer func() { err = state.Coded(err) }()
	id, err := st.Resolve(ref)
	if err != nil {
		return nil, err
	}
	if err := checkStream(stream); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 1000
	}
	f, dropped, err := openLog(st.jobDir(id), stream)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	off := dropped
	var out []Match
	for len(out) < limit {
		line, err := r.ReadString('\n')
		if len(line) > 0 && re.MatchString(strings.TrimSuffix(line, "\n")) {
			out = append(out, Match{Offset: off, Line: strings.TrimSuffix(line, "\n")})
		}
		off += int64(len(line))
		if err != nil {
			break
		}
	}
	return out, nil
}

// cursor is cursors/<reader>.json: where a reader stopped in each stream.
type cursor struct {
	Stdout int64 `json:"stdout"`
	Stderr int64 `json:"stderr"`
}

func validReader(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return name[0] != '.'
}

// ReadSince returns what reader has not read yet of stream (up to maxBytes)
// and moves the reader's cursor past it. The cursor is kept in the job's
// directory, so it survives between CLI invocations; a reader name is
// [A-Za-z0-9._-]+.
func (st *Store) ReadSince(ref, stream, reader string, opt ReadOptions) (_ LogChunk, err error) {
	defer func() { err = state.Coded(err) }()
	id, err := st.Resolve(ref)
	if err != nil {
		return LogChunk{}, err
	}
	if err := checkStream(stream); err != nil {
		return LogChunk{}, err
	}
	if !validReader(reader) {
		return LogChunk{}, result.Errorf(result.CodeInvalidRequest, "reader name %q must be letters, digits, '.', '_' or '-'", reader)
	}
	dir := filepath.Join(st.jobDir(id), cursorsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return LogChunk{}, err
	}
	unlock, err := state.Lock(filepath.Join(dir, "."+reader+".lock"))
	if err != nil {
		return LogChunk{}, err
	}
	defer unlock()
	path := filepath.Join(dir, reader+".json")
	reset := false
	// Under the reader's lock, which every writer of its cursor holds:
	// temp files of its killed writes are nobody's.
	state.RemoveTemps(dir, reader+".json")
	var cur cursor
	if err := state.ReadJSON(path, &cur); err != nil && !errors.Is(err, fs.ErrNotExist) {
		if !state.IsCorrupt(err) {
			return LogChunk{}, err
		}
		// A damaged cursor must not break its reader for good: it starts
		// again from the oldest byte kept, and says so.
		cur = cursor{}
		reset = true
	}
	pos := &cur.Stdout
	if stream == Stderr {
		pos = &cur.Stderr
	}
	w, err := readWindow(st.jobDir(id), stream, *pos, opt.maxBytes())
	if err != nil {
		return LogChunk{}, err
	}
	c := w.present(opt.Raw, st.endedFn(id))
	c.CursorReset = reset
	*pos = c.NextOffset
	return c, state.WriteJSONAtomic(path, cur, 0o600)
}
