package state

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/result"
)

// eventsFile is the environment's lifecycle log, one JSON object per line.
const eventsFile = "events.jsonl"

// TimeFormat is how timestamps are written: RFC 3339, UTC, milliseconds
// (the result envelope's format).
const TimeFormat = result.TimeFormat

// FormatTime formats t in TimeFormat, in UTC.
func FormatTime(t time.Time) string { return result.FormatTime(t) }

// Event is one line of the environment's durable lifecycle log.
type Event struct {
	Seq      int64  `json:"seq"`
	Time     string `json:"time"`
	Handle   string `json:"handle,omitempty"`
	Name     string `json:"name,omitempty"`
	Type     string `json:"type"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	Restarts int    `json:"restarts,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// AppendEvent assigns e the next sequence number and the current time (if
// unset) and appends it to the log, durably, returning the event as
// written. Appenders are serialised by an exclusive lock on the log, so
// sequence numbers are strictly increasing across processes. Each event is
// one write(2) of a whole line; a torn last line left by a crash is cut off
// before appending, so it never glues onto the next event.
func (d *Dir) AppendEvent(e Event) (Event, error) {
	f, err := OpenFile(d.Join(eventsFile), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return e, err
	}
	defer f.Close()
	if err := flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return e, err
	}
	last, end, err := lastSeq(f)
	if err != nil {
		return e, err
	}
	if err := f.Truncate(end); err != nil {
		return e, err
	}
	e.Seq = last + 1
	if e.Time == "" {
		e.Time = FormatTime(time.Now())
	}
	b, err := json.Marshal(e)
	if err != nil {
		return e, err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		return e, err
	}
	return e, f.Sync()
}

// lastSeq scans f backwards for the last complete line and returns its seq
// and the length of the file up to and including that line's newline (what
// survives once a torn tail is cut). Lines that do not parse are skipped.
func lastSeq(f *os.File) (seq int64, end int64, err error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	size := fi.Size()
	const block = 64 << 10
	var tail []byte // bytes from pos to the current scan limit
	pos := size
	end = -1
	for {
		// Complete lines in tail, newest first.
		for {
			i := bytes.LastIndexByte(tail, '\n')
			if i < 0 {
				break
			}
			if end < 0 {
				end = pos + int64(i) + 1
				tail = tail[:i]
				continue
			}
			line := tail[i+1:]
			tail = tail[:i]
			if s, ok := parseSeq(line); ok {
				return s, end, nil
			}
		}
		if pos == 0 {
			if end < 0 {
				end = 0
			}
			if s, ok := parseSeq(tail); ok {
				return s, end, nil
			}
			return 0, end, nil
		}
		n := min(int64(block), pos)
		pos -= n
		buf := make([]byte, n, n+int64(len(tail)))
		if _, err := f.ReadAt(buf, pos); err != nil && err != io.EOF {
			return 0, 0, err
		}
		tail = append(buf, tail...)
	}
}

func parseSeq(line []byte) (int64, bool) {
	var e struct {
		Seq int64 `json:"seq"`
	}
	if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &e) != nil || e.Seq <= 0 {
		return 0, false
	}
	return e.Seq, true
}

// ReadEvents returns the events with seq greater than since for which keep
// returns true (keep may be nil), oldest first. A last line without its
// newline is a torn or in-progress append and is ignored; lines that do not
// parse are skipped.
func (d *Dir) ReadEvents(since int64, keep func(Event) bool) ([]Event, error) {
	f, err := OpenFile(d.Join(eventsFile), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Event
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			return out, nil // line, if any, has no newline: torn
		}
		if err != nil {
			return out, err
		}
		var e Event
		if json.Unmarshal(line, &e) != nil || e.Seq <= since {
			continue
		}
		if keep == nil || keep(e) {
			out = append(out, e)
		}
	}
}

// WaitEvents blocks until at least one event with seq greater than since
// that keep accepts exists, and returns those events; it returns ctx's
// error when ctx ends first. It watches the log instead of polling it.
func (d *Dir) WaitEvents(ctx context.Context, since int64, keep func(Event) bool) ([]Event, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The directory is watched, not the file, so a log that does not exist
	// yet is still seen when it is created.
	changed, err := WatchNames(wctx, []string{eventsFile}, d.path)
	if err != nil {
		return nil, err
	}
	for {
		evs, err := d.ReadEvents(since, keep)
		if err != nil || len(evs) > 0 {
			return evs, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		}
	}
}
