package audit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/state"
)

// Follow calls fn for each record timed at or after since (all when since
// is zero): first those already in the log, oldest first, then each new one
// as it is appended, until ctx ends (it then returns ctx's error) or fn
// returns an error (which Follow returns). It survives rotation without
// missing or repeating a record, even when several rotations happen between
// two wake-ups, provided the files it has not read yet are still among the
// Keep rotated ones.
//
// It watches the directory for changes to the log instead of polling. The
// file being followed is tracked by its open descriptor, inode and the
// offset past its last complete line: appends only ever grow a file (see
// the package doc on torn lines), and after a rotation the old file, now
// renamed, is drained to its end before the files that followed it are
// read.
func (l *Log) Follow(ctx context.Context, since time.Time, fn func(Record) error) error {
	dir := filepath.Dir(l.Path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return &Error{Op: "follow", Path: l.Path, Err: err}
	}
	// Arm the watch before the first read, so an append landing between
	// the read and the wait still wakes us.
	wake, err := state.WatchNames(ctx, []string{filepath.Base(l.Path)}, dir)
	if err != nil {
		return &Error{Op: "follow", Path: l.Path, Err: err}
	}
	fw := &follower{log: l, emit: func(line []byte) error {
		if r, ok := parse(line); ok && notBefore(r, since) {
			return fn(r)
		}
		return nil
	}}
	defer fw.close()
	for {
		if err := fw.catchUp(); err != nil {
			return err // fn's own error comes back unwrapped
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case _, ok := <-wake:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return &Error{Op: "follow", Path: l.Path, Err: errors.New("file watcher stopped")}
			}
		}
	}
}

// follower is Follow's position: the newest file read so far, kept open so
// that it can be drained after being renamed away (and so that its inode
// cannot be reused by a new file while we compare inodes).
type follower struct {
	log  *Log
	emit func(line []byte) error
	cur  *segment
	off  int64 // past the last complete line of cur
}

func (fw *follower) close() {
	if fw.cur != nil {
		_ = fw.cur.f.Close()
		fw.cur = nil
	}
}

// catchUp emits every complete line appended since the last call.
func (fw *follower) catchUp() error {
	if fw.cur != nil {
		if err := fw.drain(); err != nil {
			return err
		}
		// The common case, one append and no rotation: stat, not lock.
		if ino, err := pathInode(fw.log.Path); err == nil && ino == fw.cur.ino {
			return nil
		}
	}
	segs, err := fw.log.snapshot()
	if err != nil {
		return &Error{Op: "follow", Path: fw.log.Path, Err: err}
	}
	start := 0
	if fw.cur != nil {
		idx := -1
		for i, s := range segs {
			if s.ino == fw.cur.ino {
				idx = i
			}
		}
		if idx == len(segs)-1 {
			// Still the newest file (the path was missing when we looked,
			// or it is back): nothing else to read.
			closeAll(segs)
			return nil
		}
		// Rotated away. Every write to it finished before the rotation
		// (both hold the lock), so draining now reads it to its true end.
		if err := fw.drain(); err != nil {
			closeAll(segs)
			return err
		}
		fw.close()
		// Files after it are new to us. If it fell off the end (idx -1),
		// everything still kept is newer than it.
		start = idx + 1
	}
	closeAll(segs[:start])
	for i := start; i < len(segs); i++ {
		fw.cur, fw.off = &segs[i], 0
		if err := fw.drain(); err != nil {
			closeAll(segs[i+1:])
			return err
		}
		if i < len(segs)-1 {
			fw.close()
		}
	}
	return nil
}

func (fw *follower) drain() error {
	off, err := scan(fw.cur.f, fw.off, fw.emit)
	fw.off = off
	return err
}

func pathInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}
