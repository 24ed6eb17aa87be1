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
type logMeta struct {
	Dropped int64 `json:"dropped"`
}

func logPath(dir, stream string) string  { return filepath.Join(dir, stream+".log") }
func metaPath(dir, stream string) string { return filepath.Join(dir, stream+".meta.json") }

func readMeta(dir, stream string) logMeta {
	var m logMeta
	_ = state.ReadJSON(metaPath(dir, stream), &m)
	return m
}

// logTotal is how many bytes the stream has produced, kept or dropped.
func logTotal(dir, stream string) int64 {
	f, m, err := openLog(dir, stream)
	if err != nil {
		return m.Dropped
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return m.Dropped
	}
	return m.Dropped + fi.Size()
}

// openLog opens a stream's file together with the matching dropped count.
// The supervisor swaps the file and bumps the count under the exclusive log
// lock, so taking the shared lock for both reads gives a consistent pair;
// after that the open descriptor keeps its file however the supervisor
// trims.
func openLog(dir, stream string) (*os.File, logMeta, error) {
	unlock, err := state.LockShared(filepath.Join(dir, logLockFile))
	if err != nil {
		return nil, logMeta{}, err
	}
	defer unlock()
	m := readMeta(dir, stream)
	f, err := os.Open(logPath(dir, stream))
	return f, m, err
}

// logSink is the supervisor's writer for one stream: it appends to the
// log file and, past the limit, trims the file to its newest half.
type logSink struct {
	dir, stream string
	limit       int64
	f           *os.File
	size        int64
	dropped     int64
}

func openSink(dir, stream string, limit int64) (*logSink, error) {
	f, err := os.OpenFile(logPath(dir, stream), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &logSink{dir: dir, stream: stream, limit: limit, f: f, size: fi.Size(), dropped: readMeta(dir, stream).Dropped}
	if s.size > limit { // a smaller limit than the previous run's
		if err := s.trim(); err != nil {
			f.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *logSink) Write(p []byte) (int, error) {
	n, err := s.f.Write(p)
	s.size += int64(n)
	if err != nil {
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
// copy goes to a temp file that replaces the log by rename, and the sidecar
// is updated under the same exclusive lock, so readers never pair a file
// with the wrong dropped count.
func (s *logSink) trim() error {
	keep := s.limit / 2
	cut := s.size - keep
	src, err := os.Open(logPath(s.dir, s.stream))
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(s.dir, "."+s.stream+".trim*")
	if err != nil {
		return err
	}
	if _, err := io.Copy(tmp, io.NewSectionReader(src, cut, keep)); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	unlock, err := state.Lock(filepath.Join(s.dir, logLockFile))
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	defer unlock()
	if err := os.Rename(tmp.Name(), logPath(s.dir, s.stream)); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := state.WriteJSONAtomic(metaPath(s.dir, s.stream), logMeta{Dropped: s.dropped + cut}, 0o600); err != nil {
		return err
	}
	s.dropped += cut
	nf, err := os.OpenFile(logPath(s.dir, s.stream), os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	s.f.Close()
	s.f, s.size = nf, keep
	return nil
}

func (s *logSink) Close() error { return s.f.Close() }

// LogChunk is a piece of a log stream addressed by absolute offsets.
type LogChunk struct {
	Data       []byte `json:"-"`
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"next_offset"`
	// EOF reports that NextOffset is the end of what the stream has
	// produced so far (a running job may write more).
	EOF bool `json:"eof"`
	// DroppedBytes is how much of the requested range the log cap had
	// already dropped; Offset is then past the request.
	DroppedBytes int64 `json:"dropped_bytes,omitempty"`
}

func checkStream(stream string) error {
	if stream != Stdout && stream != Stderr {
		return invalid("stream must be stdout or stderr, not %q", stream)
	}
	return nil
}

// ReadLog reads up to maxBytes (0: 1 MiB) of stream from the absolute
// offset.
func (st *Store) ReadLog(ref, stream string, offset, maxBytes int64) (LogChunk, error) {
	id, err := st.Resolve(ref)
	if err != nil {
		return LogChunk{}, err
	}
	return readLog(st.jobDir(id), stream, offset, maxBytes)
}

func readLog(dir, stream string, offset, maxBytes int64) (LogChunk, error) {
	if err := checkStream(stream); err != nil {
		return LogChunk{}, err
	}
	if offset < 0 {
		return LogChunk{}, invalid("offset must not be negative")
	}
	if maxBytes <= 0 {
		maxBytes = defaultMaxBytes
	}
	f, m, err := openLog(dir, stream)
	if errors.Is(err, fs.ErrNotExist) {
		return LogChunk{Offset: offset, NextOffset: offset, EOF: true}, nil
	}
	if err != nil {
		return LogChunk{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return LogChunk{}, err
	}
	total := m.Dropped + fi.Size()
	c := LogChunk{Offset: offset}
	if offset < m.Dropped {
		c.DroppedBytes = m.Dropped - offset
		c.Offset = m.Dropped
	}
	c.Offset = min(c.Offset, total)
	n := min(maxBytes, total-c.Offset)
	c.Data = make([]byte, n)
	got, err := f.ReadAt(c.Data, c.Offset-m.Dropped)
	if err != nil && err != io.EOF {
		return LogChunk{}, err
	}
	c.Data = c.Data[:got]
	c.NextOffset = c.Offset + int64(got)
	c.EOF = c.NextOffset == total
	return c, nil
}

// Tail returns the last n lines of stream (at most maxBytes of them, 0:
// 1 MiB). A final line without a newline counts as a line.
func (st *Store) Tail(ref, stream string, n int, maxBytes int64) (LogChunk, error) {
	id, err := st.Resolve(ref)
	if err != nil {
		return LogChunk{}, err
	}
	if maxBytes <= 0 {
		maxBytes = defaultMaxBytes
	}
	dir := st.jobDir(id)
	total := logTotal(dir, stream)
	start := max(0, total-maxBytes)
	c, err := readLog(dir, stream, start, maxBytes)
	if err != nil {
		return c, err
	}
	data := c.Data
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
	c.Data = data[cut:]
	c.Offset += int64(cut)
	c.DroppedBytes = 0
	return c, nil
}

// Match is one line of a log that matched a Grep pattern.
type Match struct {
	Offset int64  `json:"offset"`
	Line   string `json:"line"`
}

// Grep returns up to limit (0: 1000) lines of stream that match re, oldest
// first, each with the absolute offset where it starts.
func (st *Store) Grep(ref, stream string, re *regexp.Regexp, limit int) ([]Match, error) {
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
	f, m, err := openLog(st.jobDir(id), stream)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	off := m.Dropped
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
func (st *Store) ReadSince(ref, stream, reader string, maxBytes int64) (LogChunk, error) {
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
	var cur cursor
	if err := state.ReadJSON(path, &cur); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return LogChunk{}, err
	}
	pos := &cur.Stdout
	if stream == Stderr {
		pos = &cur.Stderr
	}
	c, err := readLog(st.jobDir(id), stream, *pos, maxBytes)
	if err != nil {
		return c, err
	}
	*pos = c.NextOffset
	return c, state.WriteJSONAtomic(path, cur, 0o600)
}
