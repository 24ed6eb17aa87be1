package files

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/pkg/result"
	"golang.org/x/sys/unix"
)

// Undo history layout: HistoryDir/<hash of the file's absolute resolved
// path>/<seq>.data holds the content before change number seq and
// <seq>.json describes it (whether the file existed, its mode, and the
// sha256 agentfs wrote, which Undo compares with the file). The .json is
// written last and atomically, so an entry exists only once both are
// durable; a .data without its .json is debris from a crash and is swept.
// Every access happens under the lock of the file's directory, so one
// file's history has one writer at a time.

// historyEntry is one recorded change of one file.
type historyEntry struct {
	dir  string // the file's history directory
	Meta historyMeta
	// damaged says why the entry's description cannot be read (nil: it
	// can); Meta then holds its sequence number only. Such an entry is
	// kept, its saved content too (the only copy of that version): undo
	// stops at it with io_error rather than guess past it.
	damaged error
}

type historyMeta struct {
	Path          string `json:"path"`
	Seq           int64  `json:"seq"`
	Time          string `json:"time"`
	PrevExists    bool   `json:"prev_exists"`
	PrevSHA256    string `json:"prev_sha256,omitempty"`
	PrevMode      uint32 `json:"prev_mode,omitempty"`
	PrevSize      int64  `json:"prev_size"`
	WrittenExists bool   `json:"written_exists"`
	WrittenSHA256 string `json:"written_sha256,omitempty"`
}

func (h *historyEntry) base() string {
	return filepath.Join(h.dir, fmt.Sprintf("%012d", h.Meta.Seq))
}

// historyDir is the directory of one file's history.
func (f *FS) historyDir(abs string) string {
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(f.HistoryDir, hex.EncodeToString(sum[:16]))
}

// entries lists a file's history, oldest first, and with sweep removes
// debris. Only a caller that holds the lock of the file's directory may
// sweep: what looks like debris to anyone else (a .data without its .json,
// a temp file) may be the entry another agentfs is writing at that moment.
func (f *FS) entries(dir string, sweep bool) ([]*historyEntry, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	metas := map[int64]bool{}
	for _, de := range des {
		if n, ok := strings.CutSuffix(de.Name(), ".json"); ok {
			if seq, err := strconv.ParseInt(n, 10, 64); err == nil {
				metas[seq] = true
			}
		}
	}
	var out []*historyEntry
	for _, de := range des {
		name := de.Name()
		if n, ok := strings.CutSuffix(name, ".data"); ok {
			if seq, err := strconv.ParseInt(n, 10, 64); err == nil && !metas[seq] && sweep {
				_ = os.Remove(filepath.Join(dir, name))
			}
			continue
		}
		if strings.HasPrefix(name, ".tmp-") {
			if sweep {
				_ = os.Remove(filepath.Join(dir, name))
			}
			continue
		}
		n, ok := strings.CutSuffix(name, ".json")
		if !ok {
			continue
		}
		seq, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		h := &historyEntry{dir: dir}
		if err := json.Unmarshal(b, &h.Meta); err != nil || h.Meta.Seq != seq {
			if err == nil {
				err = fmt.Errorf("it names entry %d", h.Meta.Seq)
			}
			h.Meta, h.damaged = historyMeta{Seq: seq}, err
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Meta.Seq < out[j].Meta.Seq })
	return out, nil
}

// recordHistory saves p's current state before the commit replaces it.
// fileDir is the pinned directory of the file, name its base name there.
func (f *FS) recordHistory(fileDir *os.Root, name string, p *plan) (*historyEntry, error) {
	if f.HistoryDir == "" {
		return nil, nil
	}
	dir := f.historyDir(p.t.abs)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, historyError(err)
	}
	existing, err := f.entries(dir, true)
	if err != nil {
		return nil, historyError(err)
	}
	// A change that never landed shows as one only while the file is on
	// the inode it was on then: this change (or a later undo) moves it to
	// another, after which the entry would read as a revert by someone
	// else (undo_conflict). Dropped now.
	for n := len(existing); n > 0 && existing[n-1].damaged == nil && neverLanded(existing[n-1].Meta, p.cur); n-- {
		f.dropStale(fileDir, name, p, existing[n-1])
		existing = existing[:n-1]
	}
	seq := int64(1)
	if n := len(existing); n > 0 {
		seq = existing[n-1].Meta.Seq + 1
	}
	h := &historyEntry{dir: dir, Meta: historyMeta{
		Path:          p.t.abs,
		Seq:           seq,
		Time:          time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
		PrevExists:    p.cur.exists,
		WrittenExists: !p.remove,
	}}
	if p.cur.exists {
		h.Meta.PrevSHA256 = p.cur.sha
		h.Meta.PrevMode = uint32(p.cur.mode.Perm())
		h.Meta.PrevSize = int64(len(p.cur.content))
		if !linkData(fileDir, name, p, h.base()+".data") {
			if err := writeAtomic(dir, h.base()+".data", p.cur.content); err != nil {
				return nil, historyError(err)
			}
		}
	}
	if f.afterHistoryData != nil {
		f.afterHistoryData()
	}
	if !p.remove {
		h.Meta.WrittenSHA256 = p.newSHA()
	}
	meta, err := json.Marshal(h.Meta)
	if err != nil {
		return nil, historyError(err)
	}
	if err := writeAtomic(dir, h.base()+".json", meta); err != nil {
		_ = os.Remove(h.base() + ".data")
		return nil, historyError(err)
	}
	return h, nil
}

func historyError(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return newErr(result.CodeNoSpace, "undo history: no space left to keep it (%v); nothing was changed", err).Wrap(err)
	}
	return newErr(result.CodeIOError, "undo history: %v", err).Wrap(err)
}

// dropHistory removes an entry, meta first so that no half entry is ever
// visible.
func (f *FS) dropHistory(h *historyEntry) {
	_ = os.Remove(h.base() + ".json")
	_ = os.Remove(h.base() + ".data")
}

// dropStale drops the entry h of a change that never landed to p's file.
// Its saved content may be a hard link to the file itself (a large file's
// version kept so), whose removal moves the file's inode change time: the
// commit, which checks that time (unchanged), then expects the new one,
// if the file was as it was read until then.
func (f *FS) dropStale(fileDir *os.Root, name string, p *plan, h *historyEntry) {
	before, err := fileDir.Lstat(name)
	data, derr := os.Lstat(h.base() + ".data")
	linked := err == nil && derr == nil && os.SameFile(before, data)
	f.dropHistory(h)
	if !linked || p.cur.info == nil || !os.SameFile(before, p.cur.info) || !sameChange(before, p.cur.info) {
		return
	}
	if after, err := fileDir.Lstat(name); err == nil && os.SameFile(after, before) && after.Size() == before.Size() && after.ModTime().Equal(before.ModTime()) {
		p.cur.info = after
	}
}

// pruneHistory keeps at most HistoryVersions entries and HistoryBytes of
// saved content for the file, dropping the oldest first but always keeping
// the newest.
func (f *FS) pruneHistory(dir string) {
	maxN := f.HistoryVersions
	if maxN <= 0 {
		maxN = DefaultHistoryVersions
	}
	maxBytes := f.HistoryBytes
	if maxBytes <= 0 {
		maxBytes = DefaultHistoryBytes
	}
	list, err := f.entries(dir, true)
	if err != nil {
		return
	}
	var total int64
	for _, h := range list {
		total += h.Meta.PrevSize
	}
	for len(list) > 1 && (len(list) > maxN || total > maxBytes) {
		total -= list[0].Meta.PrevSize
		f.dropHistory(list[0])
		list = list[1:]
	}
}

// readData returns an entry's saved content, checked against its hash.
func (h *historyEntry) readData() ([]byte, error) {
	b, err := os.ReadFile(h.base() + ".data")
	if err != nil {
		return nil, historyError(err)
	}
	if sha(b) != h.Meta.PrevSHA256 {
		return nil, newErr(result.CodeIOError, "undo history of %s is damaged (saved content does not match its hash)", h.Meta.Path)
	}
	return b, nil
}

// writeAtomic writes data to name through a synced temp file in dir and a
// rename, then syncs dir.
func writeAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// linkMinSize is the size from which history keeps the replaced file by a
// hard link to its inode rather than a copy. The commit never writes that
// inode (it renames a new file over the name), so the link holds exactly
// the old content, and a large edit costs no second write of the file.
const linkMinSize = 64 << 10

// linkData hard-links the file p is about to replace into the history as
// name, through /proc/self/fd so that the link is made to the inode opened
// inside the root, never to whatever a path names a moment later. It
// reports false when that is not possible (small file, another file system,
// no /proc) or not safe (the inode has another name, or another process
// has it open, through which it can be changed in place after the commit:
// a logger's descriptor wrote into the history, and the undo found it
// damaged), and the caller copies instead. The content is checked against
// its hash when an undo reads it.
func linkData(fileDir *os.Root, base string, p *plan, name string) bool {
	if len(p.cur.content) < linkMinSize {
		return false
	}
	fd, err := fileDir.OpenFile(base, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer fd.Close()
	fi, err := fd.Stat()
	// (Only the file as it was read: the link changes its inode change
	// time, which the commit then expects instead.)
	if err != nil || p.cur.info == nil || !os.SameFile(fi, p.cur.info) || !sameChange(fi, p.cur.info) || !fi.Mode().IsRegular() || fi.Size() != int64(len(p.cur.content)) || !soleName(fi) || !noOtherOpen(fd) {
		return false
	}
	if fd.Sync() != nil {
		return false
	}
	proc := "/proc/self/fd/" + strconv.Itoa(int(fd.Fd()))
	if unix.Linkat(unix.AT_FDCWD, proc, unix.AT_FDCWD, name, unix.AT_SYMLINK_FOLLOW) != nil {
		return false
	}
	if d, err := os.Open(filepath.Dir(name)); err == nil {
		d.Sync()
		d.Close()
	}
	if after, err := fd.Stat(); err == nil {
		p.cur.info = after
	}
	return true
}

// soleName reports whether fi's inode has exactly one name, so that once
// the commit renames a new file over that name nothing but the history
// reaches the old inode by a path.
func soleName(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Nlink) == 1
}
