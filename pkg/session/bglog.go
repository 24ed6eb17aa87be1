package session

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/agentplane/agentplane/pkg/capture"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/state"
)

// bgLog is the session's background log: what processes left running by
// earlier calls write after their call returned. It is one file, bg.log,
// bounded by limit: past it the oldest half is dropped, and bg.base
// records how many bytes were dropped so far, so that offsets stay
// absolute. Bytes the file could not take (a full disk) are dropped too:
// bg.lost lists each such loss, "OFFSET COUNT", the offset being that of
// the first byte kept after it, as soon as that file can be written (at
// the latest with the next write that the disk takes).
// Rotation, the loss records and reads take bg.lock.
type bgLog struct {
	path  string
	limit int64
	mu    sync.Mutex
	f     *os.File
	size  int64
	// lost bytes not yet recorded in bg.lost, lost at offset lostAt.
	lost, lostAt int64
}

func (l *bgLog) lockPath() string { return l.path + ".lock" }
func (l *bgLog) basePath() string { return strings.TrimSuffix(l.path, ".log") + ".base" }
func (l *bgLog) lostPath() string { return strings.TrimSuffix(l.path, ".log") + ".lost" }

// recordLost appends the pending loss to bg.lost; it stays pending when
// that fails (the disk is still full).
func (l *bgLog) recordLost() {
	unlock, err := state.Lock(l.lockPath())
	if err != nil {
		return
	}
	defer unlock()
	f, err := os.OpenFile(l.lostPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return
	}
	_, err = f.WriteString(strconv.FormatInt(l.lostAt, 10) + " " + strconv.FormatInt(l.lost, 10) + "\n")
	if f.Close() == nil && err == nil {
		l.lost = 0
	}
}

// losses reads bg.lost: the offset and count of each loss.
func losses(p string) [][2]int64 {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	var out [][2]int64
	for _, ln := range strings.Split(string(b), "\n") {
		f := strings.Fields(ln)
		if len(f) != 2 {
			continue
		}
		at, err1 := strconv.ParseInt(f[0], 10, 64)
		n, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 == nil && err2 == nil && n > 0 {
			out = append(out, [2]int64{at, n})
		}
	}
	return out
}

// lostIn is the sum of the losses at offsets in [from, to).
func lostIn(ls [][2]int64, from, to int64) int64 {
	var n int64
	for _, x := range ls {
		if x[0] >= from && x[0] < to {
			n += x[1]
		}
	}
	return n
}

func (l *bgLog) write(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return
		}
		st, _ := f.Stat()
		l.f, l.size = f, st.Size()
	}
	if l.lost > 0 {
		l.recordLost() // a loss the full disk kept from its record
	}
	n, _ := l.f.Write(b)
	l.size += int64(n)
	if n < len(b) {
		if l.lost == 0 {
			l.lostAt = readBase(l.basePath()) + l.size
		}
		l.lost += int64(len(b) - n)
		l.recordLost()
	}
	if l.size > l.limit {
		l.rotate()
	}
}

// rotate keeps the newest half of the log.
func (l *bgLog) rotate() {
	unlock, err := state.Lock(l.lockPath())
	if err != nil {
		return
	}
	defer unlock()
	data, err := os.ReadFile(l.path)
	if err != nil {
		return
	}
	keep := l.limit / 2
	drop := int64(len(data)) - keep
	if drop <= 0 {
		return
	}
	base := readBase(l.basePath())
	if err := state.WriteFileAtomic(l.basePath(), []byte(strconv.FormatInt(base+drop, 10)), 0o600); err != nil {
		return
	}
	if err := state.WriteFileAtomic(l.path, data[drop:], 0o600); err != nil {
		return
	}
	l.f.Close()
	l.f = nil
	l.size = 0
}

func readBase(p string) int64 {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// LogsRequest selects part of a session's background log.
type LogsRequest struct {
	SinceLast bool `json:"since_last,omitempty"`
	Tail      int  `json:"tail,omitempty"` // last N lines
	Raw       bool `json:"raw,omitempty"`
}

// LogsResult is a read of the background log. Offsets are absolute bytes
// since the session started.
type LogsResult struct {
	Data       string `json:"data"`
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"next_offset"`
	// DroppedBytes is how much of what was asked for the bound dropped
	// before it was read: with --since-last, the bytes written after the
	// last read that are gone; otherwise the oldest bytes of the log.
	DroppedBytes int64 `json:"dropped_bytes,omitempty"`
}

// readLog reads the background log of the session in sdir. It needs no
// server: the log outlives the session until the session is removed.
func readLog(sdir string, req LogsRequest) (*LogsResult, error) {
	l := &bgLog{path: filepath.Join(sdir, "bg.log")}
	unlock, err := state.Lock(l.lockPath())
	if err != nil {
		return nil, result.Errorf(result.CodeStateDir, "cannot lock the session log: %v", err)
	}
	defer unlock()
	base := readBase(l.basePath())
	data, err := os.ReadFile(l.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, result.Errorf(result.CodeInternal, "cannot read the session log: %v", err)
	}
	total := base + int64(len(data))
	out := &LogsResult{Offset: base, NextOffset: total}
	lost := losses(l.lostPath())
	cursorPath := filepath.Join(sdir, "bg.cursor")
	switch {
	case req.SinceLast:
		cur := readBase(cursorPath)
		if cur > total {
			cur = total
		}
		// Lost bytes that lie at or after the last read's end.
		out.DroppedBytes = lostIn(lost, cur, total)
		if cur < base {
			out.DroppedBytes += base - cur
			cur = base
		}
		data = data[cur-base:]
		out.Offset = cur
		if err := state.WriteFileAtomic(cursorPath, []byte(strconv.FormatInt(total, 10)), 0o600); err != nil {
			return nil, result.Errorf(result.CodeStateDir, "cannot save the log cursor: %v", err)
		}
	case req.Tail > 0:
		i := len(data)
		if i > 0 && data[i-1] == '\n' {
			i--
		}
		lines := 0
		for lines < req.Tail && i > 0 {
			j := bytes.LastIndexByte(data[:i], '\n')
			lines++
			if j < 0 {
				i = 0
				break
			}
			i = j
		}
		if i > 0 {
			i++ // after the newline
		}
		// Fewer lines are left than were asked for: the rest were dropped.
		if i == 0 && lines < req.Tail {
			out.DroppedBytes = base + lostIn(lost, 0, total+1)
		} else {
			// Lost bytes between the lines returned.
			out.DroppedBytes = lostIn(lost, base+int64(i)+1, total)
		}
		out.Offset = base + int64(i)
		data = data[i:]
	default:
		// The whole log was asked for: its oldest bytes are gone, and
		// what the disk could not take.
		out.DroppedBytes = base + lostIn(lost, 0, total+1)
	}
	if !req.Raw {
		data = capture.Clean(data)
	}
	out.Data = strings.ToValidUTF8(string(data), "\uFFFD")
	return out, nil
}
