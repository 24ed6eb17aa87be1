// Package patch parses patches and plans their effect on a set of files, in
// memory, without touching the disk.
//
// Two formats are understood, and Parse tells them apart by the first
// non-blank line:
//
//   - the unified diff written by `git diff` and `diff -u`: several files,
//     `diff --git` headers with new/deleted file modes, renames and copies,
//     /dev/null for added and deleted files, `\ No newline at end of file`;
//   - the `*** Begin Patch` format that code agents emit: Add File, Delete
//     File, Update File with an optional Move to, `@@` chunks located by their
//     context rather than by line numbers, and `*** End of File`.
//
// Plan checks every hunk of every file against the current contents and
// returns the complete change set, or an error and no changes at all, so that
// the caller can commit a patch all or nothing.
//
// Choices worth knowing:
//
//   - Strip -1 (automatic) strips one component from a file's names when
//     they carry git's a/ and b/ prefixes and none otherwise, so both
//     `git diff` and `diff -u f.orig f` apply without a flag.
//   - Hunk line counts are checked, as git apply does: a hunk shorter or
//     longer than its @@ header is a parse error, not a guess.
//   - Context is matched exactly first, then ignoring trailing whitespace,
//     then ignoring surrounding whitespace, then with typographic quotes,
//     dashes and spaces read as ASCII; unified hunks prefer the match
//     nearest their line number. Context lines keep the file's own text.
//   - Lines keep their own line endings; new lines take the file's (CRLF
//     files stay CRLF); a UTF-8 BOM stays. A unified diff keeps or drops the
//     final newline as its `\ No newline` markers say, and keeps a missing
//     one missing when it says nothing; the agent format always ends the
//     file with a newline, like the reference tool.
//   - In the agent format, a pure-addition chunk under an `@@ anchor` goes
//     right after the anchor line (the reference tool appends it to the end
//     of the file); without an anchor it goes at the end. An update with
//     Move to and no chunks is a plain rename.
//   - Paths must be relative and stay inside the directory the patch is
//     applied in; others are refused with outside_root.
package patch

import (
	"path"
	"strings"

	"github.com/agentplane/agentplane/pkg/result"
)

// Format is the syntax a patch was written in.
type Format int

const (
	// FormatUnified is the unified diff of `git diff` and `diff -u`.
	FormatUnified Format = iota + 1
	// FormatAgent is the `*** Begin Patch` … `*** End Patch` format.
	FormatAgent
)

// String names the format as it appears in JSON results.
func (f Format) String() string {
	switch f {
	case FormatUnified:
		return "unified"
	case FormatAgent:
		return "agent"
	}
	return "unknown"
}

// Action is what a patch does to one file.
type Action string

// The actions a FilePatch or a Change can carry.
const (
	ActionAdd    Action = "add"
	ActionUpdate Action = "update"
	ActionDelete Action = "delete"
	ActionMove   Action = "move"
	// ActionCopy only appears in a parsed FilePatch (git's "copy from/to");
	// Plan reports it as an add of the destination.
	ActionCopy Action = "copy"
)

// Patch is a parsed patch: the operations on files, in the order written.
type Patch struct {
	Format Format
	Files  []FilePatch
}

// FilePatch is the part of a patch that concerns one file.
type FilePatch struct {
	Action Action
	// Path is the file the operation reads (for add, the file it creates),
	// relative and cleaned.
	Path string
	// MoveTo is the destination of a move or copy.
	MoveTo string
	// Hunks are applied in order. An add is planned as hunks applied to an
	// empty file, so its lines are all additions.
	Hunks []Hunk
	// Overwrite lets an add or move replace an existing file. The agent
	// format allows that; a unified diff that creates a file over an existing
	// one is refused, as git apply does.
	Overwrite bool
	// Line is the patch line of the header that started this file.
	Line int
}

// LineKind says whether a hunk line is kept, removed or added.
type LineKind byte

// Hunk line kinds, spelled as the prefix character of the patch line.
const (
	Context LineKind = ' '
	Delete  LineKind = '-'
	Insert  LineKind = '+'
)

// HunkLine is one line of a hunk.
type HunkLine struct {
	Kind LineKind
	// Text is the line without its prefix and without its line ending.
	Text string
	// CR records that the patch line ended in CRLF. It only matters for
	// lines of a newly created file, which have no existing line ending to
	// follow.
	CR bool
}

// Hunk is one contiguous change.
type Hunk struct {
	// Anchors are agent-format `@@ text` lines: each is sought in order, and
	// the change is looked for after the last one found.
	Anchors []string
	// OldStart is the 1-based first old line from a unified `@@ -a,b` header,
	// a hint for where to look; 0 when unknown (agent format).
	OldStart int
	Lines    []HunkLine
	// EndOfFile anchors the hunk at the end of the file (`*** End of File`).
	EndOfFile bool
	// OldNoEOL and NewNoEOL carry `\ No newline at end of file` markers: the
	// old or new side's last line has no line ending.
	OldNoEOL, NewNoEOL bool
	// Line is the patch line of the hunk header.
	Line int
}

// Parse reads a patch in either format. strip removes that many leading path
// components from unified diff file names, like patch -pN; -1 chooses for
// each file: 1 when its names carry git's a/ and b/ prefixes, 0 otherwise.
// The agent format has no prefixes and ignores strip.
//
// Errors are *result.Error with code patch_parse_error (Details "line" and
// "text"), or outside_root for an absolute or escaping path.
func Parse(data []byte, strip int) (*Patch, error) {
	lines := splitPatchLines(data)
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" {
			continue
		}
		if t == beginMarker || (strings.HasPrefix(t, "<<") && i+1 < len(lines) && strings.TrimSpace(lines[i+1]) == beginMarker) {
			return parseAgent(lines)
		}
		break
	}
	return parseUnified(lines, strip)
}

// splitPatchLines splits on LF and drops the empty string after a final
// newline; a CR before the LF stays, for the parsers to judge.
func splitPatchLines(data []byte) []string {
	if len(data) == 0 {
		return nil
	}
	lines := strings.Split(string(data), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// parseError builds a patch_parse_error pointing at a 1-based patch line.
func parseError(line int, text, format string, args ...any) *result.Error {
	return result.Errorf(result.CodePatchParse, format, args...).With("line", line).With("text", text)
}

// cleanPath validates a path written in a patch and returns it cleaned. Paths
// are relative to the directory the caller applies the patch in; an absolute
// path or one that climbs above it is refused here, before the caller's own
// confinement gets a chance, because a patch has no business naming one.
func cleanPath(p string, line int, text string) (string, error) {
	if p == "" {
		return "", parseError(line, text, "missing file name")
	}
	if strings.ContainsRune(p, 0) {
		return "", parseError(line, text, "file name contains a NUL byte")
	}
	if strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`) || hasDriveLetter(p) {
		return "", result.Errorf(result.CodeOutsideRoot, "absolute path %q in patch", p).
			With("line", line).With("text", text).With("path", p)
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", result.Errorf(result.CodeOutsideRoot, "path %q in patch leaves the directory it applies to", p).
			With("line", line).With("text", text).With("path", p)
	}
	if c == "." {
		return "", parseError(line, text, "file name %q names a directory", p)
	}
	return c, nil
}

// hasDriveLetter spots Windows absolute paths such as C:\x or C:/x, which a
// patch written on Windows may carry.
func hasDriveLetter(p string) bool {
	if len(p) < 3 || p[1] != ':' || (p[2] != '/' && p[2] != '\\') {
		return false
	}
	c := p[0] | 0x20
	return c >= 'a' && c <= 'z'
}
