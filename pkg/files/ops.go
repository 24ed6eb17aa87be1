package files

import (
	"bytes"
	"errors"
	"io/fs"
	"strings"
	"unicode/utf8"

	"github.com/agentplane/agentplane/pkg/result"
)

// ReadOptions selects what Read returns.
type ReadOptions struct {
	Offset   int  // first line to return, 1-based; 0 means 1
	Limit    int  // number of lines; 0 means to the end
	Numbered bool // prefix each line with its number, like cat -n
	MaxBytes int  // cut the content at this many bytes (at a line end when possible); 0 means no cut
}

// ReadResult is a file's content, or part of it, and facts about the whole.
type ReadResult struct {
	Path       string `json:"path"`
	Content    string `json:"content"`
	SHA256     string `json:"sha256"` // of the whole file, for ExpectSHA256
	Size       int64  `json:"size"`
	TotalLines int    `json:"total_lines"`
	LineStart  int    `json:"line_start"`
	LineEnd    int    `json:"line_end"`
	Truncated  bool   `json:"truncated"` // MaxBytes cut the content
	Binary     bool   `json:"binary"`    // not UTF-8 text: Content is empty
	// BOM: the file starts with a UTF-8 byte order mark, which Content
	// leaves out (and which Write, Edit and Insert keep).
	BOM bool `json:"bom"`
}

// Read returns lines of a text file, and for a binary file only its facts.
func (f *FS) Read(path string, opt ReadOptions) (*ReadResult, error) {
	s, err := f.open()
	if err != nil {
		return nil, err
	}
	defer s.close()
	t, err := s.resolve(path, true)
	if err != nil {
		return nil, err
	}
	sel := newLines(opt)
	cur, err := s.readFacts(t, sel)
	if err != nil {
		return nil, err
	}
	if !cur.exists {
		return nil, newErr(result.CodeFileNotFound, "%s does not exist", path)
	}
	if cur.factsOnly {
		return &ReadResult{Path: path, SHA256: cur.sha, Size: cur.size, Binary: true}, nil
	}
	r := &ReadResult{Path: path, SHA256: cur.sha, Size: int64(len(cur.content))}
	var body []byte
	if st := cur.streamed; st != nil {
		// The lines are taken already, in the one pass over the file.
		r.Size, r.BOM, r.TotalLines = cur.size, st.bom, st.lines
	} else {
		if !isText(cur.content) {
			r.Binary = true
			return r, nil
		}
		body = bytes.TrimPrefix(cur.content, []byte(utf8BOM))
		r.BOM = len(body) < len(cur.content)
		r.TotalLines = countLines(body)
	}
	first := sel.first
	if first > r.TotalLines && !(r.TotalLines == 0 && first == 1) {
		return nil, newErr(result.CodeLineOutOfRange, "offset %d is past the end of %s (%d lines)", first, path, r.TotalLines).
			With("total_lines", r.TotalLines)
	}
	if r.TotalLines == 0 {
		return r, nil
	}
	if cur.streamed != nil {
		r.LineStart, r.LineEnd, r.Truncated, r.Content = sel.lineStart, sel.lineEnd, sel.truncated, sel.out.String()
		return r, nil
	}
	// Find the byte range of the selected lines.
	start := 0
	for line := 1; line < first; line++ {
		start += bytes.IndexByte(body[start:], '\n') + 1
	}
	end, last := start, first-1
	for end < len(body) && (opt.Limit <= 0 || last-first+1 < opt.Limit) {
		i := bytes.IndexByte(body[end:], '\n')
		if i < 0 {
			end = len(body)
		} else {
			end += i + 1
		}
		last++
	}
	for n, rest := first, body[start:end]; len(rest) > 0 && !sel.done; n++ {
		i := bytes.IndexByte(rest, '\n')
		line := rest
		if i >= 0 {
			line = rest[:i+1]
		}
		rest = rest[len(line):]
		sel.add(n, line)
	}
	r.LineStart, r.LineEnd, r.Truncated, r.Content = sel.lineStart, sel.lineEnd, sel.truncated, sel.out.String()
	return r, nil
}

// WriteOptions tunes Write.
type WriteOptions struct {
	Append       bool        // add content at the end instead of replacing
	ExpectSHA256 string      // refuse (file_changed) unless the file has this hash
	ExpectAbsent bool        // refuse (file_exists) if the file exists
	Mode         fs.FileMode // permission bits; 0 keeps the file's, or 0644 for a new file
	NoMkdir      bool        // refuse (file_not_found) instead of creating parent directories
}

// Write replaces (or with Append extends) a file's content atomically,
// creating it if needed. Writing the content a file already has changes
// nothing and reports changed false.
func (f *FS) Write(path string, content []byte, opt WriteOptions) (*Mutation, error) {
	return f.mutateOne(path, opt.NoMkdir, true, func(t target, cur current) (*plan, error) {
		if opt.ExpectAbsent && cur.exists {
			return nil, newErr(result.CodeFileExists, "%s already exists", path).With("sha256", cur.sha)
		}
		if err := checkExpect(path, cur, opt.ExpectSHA256); err != nil {
			return nil, err
		}
		data := content
		if opt.Append && cur.exists {
			data = make([]byte, 0, len(cur.content)+len(content))
			data = append(append(data, cur.content...), content...)
		}
		p := &plan{t: t, cur: cur, data: data, mode: opt.Mode}
		if cur.exists && bytes.Equal(cur.content, data) && (opt.Mode == 0 || opt.Mode == cur.mode.Perm()) {
			p.unchanged = true
		}
		return p, nil
	})
}

// EditOptions tunes Edit.
type EditOptions struct {
	ExpectSHA256 string // refuse (file_changed) unless the file has this hash
	Fuzzy        bool   // also accept a unique match differing only in whitespace
}

// Edit applies string replacements in order, each to the result of the one
// before, all or nothing, and reports how each matched. old_string is looked
// for exactly first; then with every line ending read as "\n" on both sides
// (MatchLineEndings); then, with Fuzzy, line by line ignoring differences in
// whitespace runs and indentation (MatchWhitespace), in which case whole
// lines are replaced and new_string is re-indented to the file's
// indentation. A match must be unique unless ReplaceAll or ExpectedCount
// says otherwise. Failures: old_string_not_found (with the closest lines as
// a hint), old_string_not_unique (with the line of every match),
// count_mismatch, no_change.
func (f *FS) Edit(path string, edits []EditSpec, opt EditOptions) (*Mutation, error) {
	if len(edits) == 0 {
		return nil, invalid("no edits given")
	}
	var reports []EditReport
	m, err := f.mutateOne(path, true, true, func(t target, cur current) (*plan, error) {
		if !cur.exists {
			return nil, newErr(result.CodeFileNotFound, "%s does not exist", path)
		}
		if err := checkExpect(path, cur, opt.ExpectSHA256); err != nil {
			return nil, err
		}
		txt, err := parseText(path, cur.content)
		if err != nil {
			return nil, err
		}
		body, reps, err := applyEdits(path, txt.body, txt.eol, edits, opt.Fuzzy)
		if err != nil {
			return nil, err
		}
		reports = reps
		data := txt.bytes(body)
		if bytes.Equal(data, cur.content) {
			return nil, newErr(result.CodeNoChange, "the edits leave %s unchanged", path)
		}
		return &plan{t: t, cur: cur, data: data, text: true}, nil
	})
	if m != nil {
		m.Edits = reports
	}
	return m, err
}

// InsertOptions tunes Insert.
type InsertOptions struct {
	ExpectSHA256 string // refuse (file_changed) unless the file has this hash
}

// Insert puts text after line (0 = before the first line) as whole lines in
// the file's line ending. A file without a final newline keeps lacking one.
func (f *FS) Insert(path string, line int, text string, opt InsertOptions) (*Mutation, error) {
	if text == "" {
		return nil, newErr(result.CodeNoChange, "nothing to insert")
	}
	if !utf8.ValidString(text) {
		return nil, newErr(result.CodeInvalidEncoding, "the text to insert is not valid UTF-8")
	}
	return f.mutateOne(path, true, true, func(t target, cur current) (*plan, error) {
		if !cur.exists {
			return nil, newErr(result.CodeFileNotFound, "%s does not exist", path)
		}
		if err := checkExpect(path, cur, opt.ExpectSHA256); err != nil {
			return nil, err
		}
		txt, err := parseText(path, cur.content)
		if err != nil {
			return nil, err
		}
		body := txt.body
		total := countLines(body)
		if line < 0 || line > total {
			return nil, newErr(result.CodeLineOutOfRange, "line %d is outside %s (0 to %d)", line, path, total).
				With("total_lines", total)
		}
		ins := toEOL(text, txt.eol)
		if !strings.HasSuffix(ins, "\n") {
			ins += txt.eol
		}
		var nb []byte
		if line == total && len(body) > 0 && body[len(body)-1] != '\n' {
			// After a last line without a newline: the newline goes
			// between, and the file still ends without one.
			nb = make([]byte, 0, len(body)+len(txt.eol)+len(ins))
			nb = append(append(append(nb, body...), txt.eol...), strings.TrimSuffix(strings.TrimSuffix(ins, "\n"), "\r")...)
		} else {
			off := 0
			for range line {
				off += bytes.IndexByte(body[off:], '\n') + 1
			}
			nb = make([]byte, 0, len(body)+len(ins))
			nb = append(append(append(nb, body[:off]...), ins...), body[off:]...)
		}
		return &plan{t: t, cur: cur, data: txt.bytes(nb), text: true}, nil
	})
}

// Undo restores the version of the file from before the last change agentfs
// made to it, provided the file is still what agentfs wrote (else
// undo_conflict). Undoing a creation deletes the file. Each Undo steps one
// version further back.
func (f *FS) Undo(path string) (*Mutation, error) {
	if f.HistoryDir == "" {
		return nil, newErr(result.CodeNothingToUndo, "no undo history is kept")
	}
	var entry *historyEntry
	m, err := f.mutateOne(path, false, false, func(t target, cur current) (*plan, error) {
		// A dry run holds no lock: it leaves the history as it is.
		list, err := f.entries(f.historyDir(t.abs), !f.DryRun)
		if err != nil {
			return nil, historyError(err)
		}
		// Stale entries go once nothing else will change the file: their
		// saved content may be a hard link to it (a large file's), whose
		// removal moves its inode change time, which the commit checks.
		var stale []*historyEntry
		dropStale := func() {
			if !f.DryRun {
				for _, h := range stale {
					f.dropHistory(h)
				}
			}
		}
		for i := len(list) - 1; i >= 0; i-- {
			if err := list[i].damaged; err != nil {
				dropStale()
				return nil, newErr(result.CodeIOError, "the undo history of %s is damaged at entry %d (%v): undo cannot go past it; nothing was changed", path, list[i].Meta.Seq, err).
					With("hint", "remove that entry's files from the history directory to undo the versions before it")
			}
			h := list[i].Meta
			if landed(h, cur) {
				entry = list[i]
				break
			}
			if neverLanded(h, cur) {
				// The recorded change never landed (a crash between the
				// history and the rename): the entry is stale. A dry run
				// leaves the history as it is.
				stale = append(stale, list[i])
				continue
			}
			dropStale()
			e := newErr(result.CodeUndoConflict, "%s changed since agentfs last wrote it; undo would lose those changes", path).
				With("expected_sha256", h.WrittenSHA256)
			if cur.exists {
				e.With("current_sha256", cur.sha)
			}
			return nil, e
		}
		if entry == nil {
			dropStale()
			return nil, newErr(result.CodeNothingToUndo, "no change of %s to undo", path)
		}
		p := &plan{t: t, cur: cur, remove: !entry.Meta.PrevExists}
		if entry.Meta.PrevExists {
			data, err := entry.readData()
			if err != nil {
				return nil, err
			}
			p.data = data
			// The history records permission bits only (see record);
			// anything else in an entry (setuid, setgid, sticky, a file
			// type) was written by someone else, who could then make
			// the restored file setuid, so it is dropped.
			p.mode = fs.FileMode(entry.Meta.PrevMode).Perm()
			if p.mode == 0 {
				p.mode = defaultFileMode
			}
		}
		// The entry goes once the file is restored, still under the lock.
		p.onCommit = func() {
			f.dropHistory(entry)
			dropStale()
		}
		return p, nil
	})
	return m, err
}

// withRecovered adds to a refusal the files the change put back before it
// was refused (Recovered): the refusal may be of what that changed (a
// stale --expect-sha256), and the caller must learn of it either way.
func (f *FS) withRecovered(err error) error {
	var re *result.Error
	if len(f.Recovered) == 0 || !errors.As(err, &re) {
		return err
	}
	return re.With("put_back", f.Recovered)
}

// landed reports whether the file is what h's change wrote.
func landed(h historyMeta, cur current) bool {
	return h.WrittenExists == cur.exists && (!cur.exists || h.WrittenSHA256 == cur.sha)
}

// neverLanded reports whether h's change was cut off before it reached
// the file (a crash between the history and the rename): the file is as
// it was before the change. (So is one someone else put back to that
// version, which agentfs wrote itself at the entry before: undo goes on
// from there as from the version it is.)
func neverLanded(h historyMeta, cur current) bool {
	return !landed(h, cur) && h.PrevExists == cur.exists && (!cur.exists || h.PrevSHA256 == cur.sha)
}

// mutateOne runs one single-file change: resolve, create parents (unless
// noMkdir), lock the directory, read, build the plan, commit (with undo
// history when record), report.
func (f *FS) mutateOne(path string, noMkdir, record bool, build func(target, current) (*plan, error)) (_ *Mutation, retErr error) {
	s, err := f.open()
	if err != nil {
		return nil, err
	}
	defer s.close()
	f.Recovered = append(f.Recovered, s.recoverJournals()...)
	defer func() { retErr = f.withRecovered(retErr) }()
	t, err := s.resolve(path, true)
	if err != nil {
		return nil, err
	}
	if t.rel == "." {
		return nil, newErr(result.CodeIsDirectory, "%s is a directory", path)
	}
	if err := s.mayChange(t); err != nil {
		return nil, err
	}
	if f.DryRun {
		// The same checks and the same report, nothing created, locked
		// or written (an unlocked read: a preview, as Apply's dry run).
		if err := s.checkDirs([]target{t}, noMkdir); err != nil {
			return nil, err
		}
		cur, err := s.readCurrent(t)
		if err != nil {
			return nil, err
		}
		p, err := build(t, cur)
		if err != nil {
			return nil, err
		}
		return f.reportPlan(p, path, path), nil
	}
	dirs, err := s.prepareDirs([]target{t}, noMkdir)
	if err != nil {
		s.removeDirs(dirs)
		return nil, err
	}
	unlock, err := s.lockDirs([]target{t})
	if err != nil {
		s.removeDirs(dirs)
		return nil, err
	}
	defer unlock()
	cur, err := s.readCurrent(t)
	if err != nil {
		s.removeDirs(dirs)
		return nil, err
	}
	p, err := build(t, cur)
	if err != nil {
		s.removeDirs(dirs)
		return nil, err
	}
	if p.unchanged {
		s.removeDirs(dirs)
		return f.reportPlan(p, path, path), nil
	}
	if err := s.commit([]*plan{p}, record); err != nil {
		s.removeDirs(dirs)
		return nil, err
	}
	if p.hist != nil {
		f.pruneHistory(p.hist.dir)
	}
	if p.onCommit != nil {
		p.onCommit()
	}
	return f.reportPlan(p, path, path), nil
}

// reportPlan is report for a committed (or unchanged) plan.
func (f *FS) reportPlan(p *plan, oldName, newName string) *Mutation {
	var after []byte
	afterSHA := ""
	if !p.remove {
		after = p.data
		afterSHA = p.newSHA()
	}
	return f.report(p.t.given, oldName, newName, p.cur.content, after, p.cur.sha, afterSHA, p.cur.exists, !p.remove, p.text)
}

// checkExpect enforces an expected hash, read under the lock so the check
// and the write see the same file.
func checkExpect(path string, cur current, want string) error {
	if want == "" {
		return nil
	}
	if !cur.exists {
		return newErr(result.CodeFileChanged, "%s no longer exists", path).With("expected_sha256", want)
	}
	if !strings.EqualFold(cur.sha, strings.TrimSpace(want)) {
		return newErr(result.CodeFileChanged, "%s changed since it was read (sha256 differs)", path).
			With("expected_sha256", want).With("current_sha256", cur.sha)
	}
	return nil
}
