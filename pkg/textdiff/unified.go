// Package textdiff computes line-based unified diffs in the format that
// `diff -u`, `patch` and `git apply` read.
//
// It is built for the agentfs use case: a small edit in a possibly huge file.
// The common prefix and suffix are stripped at byte speed first (aligned to
// line boundaries), and only the changed middle is diffed with Myers'
// algorithm, whose cost is bounded; a middle too expensive to diff exactly
// becomes one replace hunk, which is still a correct diff.
package textdiff

import (
	"bytes"
	"fmt"
	"strings"
)

// maxCost bounds the work of the Myers search, measured as (lines in the
// middle) × (edit distance explored). Past it the middle is reported as one
// replace hunk: correct, only less minimal.
const maxCost = 50_000_000

// maxEditDistance bounds the memory of the Myers trace (about D² int32s).
const maxEditDistance = 2000

// Unified returns the unified diff that turns old into new, with context
// lines of context around each change, and the number of added and removed
// lines. Identical inputs give an empty diff. oldName and newName go into the
// "---" and "+++" headers as given ("/dev/null" for a created or deleted
// file is the caller's choice). A missing final newline is marked with
// "\ No newline at end of file" as diff does. Binary inputs are not special:
// callers that care should check first.
func Unified(oldName, newName string, old, new []byte, context int) (diff string, added, removed int) {
	if bytes.Equal(old, new) {
		return "", 0, 0
	}
	if context < 0 {
		context = 0
	}
	ops := lineOps(old, new, context)
	var b strings.Builder
	fmt.Fprintf(&b, "--- %s\n+++ %s\n", oldName, newName)
	for _, h := range groupHunks(ops, context) {
		a, r := h.write(&b)
		added += a
		removed += r
	}
	return b.String(), added, removed
}

// Stats returns only the number of added and removed lines, without
// building the diff text.
func Stats(old, new []byte) (added, removed int) {
	if bytes.Equal(old, new) {
		return 0, 0
	}
	for _, o := range lineOps(old, new, 0) {
		switch o.kind {
		case opInsert:
			added++
		case opDelete:
			removed++
		}
	}
	return added, removed
}

type opKind uint8

const (
	opEqual opKind = iota
	opDelete
	opInsert
)

// op is one line of the edit script. oldLine and newLine are 1-based line
// numbers of the line in each file (the position it would have, for the side
// it does not exist on).
type op struct {
	kind    opKind
	text    []byte // the line with its terminator, if any
	oldLine int
	newLine int
}

// lineOps returns the edit script over a window: up to context equal lines
// before the first change, the diffed middle, and up to context equal lines
// after. Lines outside the window are never split, which is what keeps a
// small edit in a huge file cheap.
func lineOps(old, new []byte, context int) []op {
	p := commonPrefix(old, new)
	p = bytes.LastIndexByte(old[:p], '\n') + 1 // back to a line start

	s := commonSuffix(old[p:], new[p:])
	for s > 0 && !(lineStart(old, len(old)-s) && lineStart(new, len(new)-s)) {
		i := bytes.IndexByte(old[len(old)-s:], '\n')
		if i < 0 {
			s = 0
			break
		}
		s -= i + 1
	}

	prefixLines := bytes.Count(old[:p], []byte{'\n'})

	// Context before the change, taken from the common prefix.
	var ops []op
	pre := lastLines(old[:p], context)
	first := prefixLines - len(pre) + 1
	for i, l := range pre {
		ops = append(ops, op{kind: opEqual, text: l, oldLine: first + i, newLine: first + i})
	}

	a := splitLines(old[p : len(old)-s])
	b := splitLines(new[p : len(new)-s])
	oi, ni := prefixLines+1, prefixLines+1
	for _, e := range myers(a, b) {
		switch e.kind {
		case opEqual:
			ops = append(ops, op{kind: opEqual, text: a[e.i], oldLine: oi, newLine: ni})
			oi++
			ni++
		case opDelete:
			ops = append(ops, op{kind: opDelete, text: a[e.i], oldLine: oi, newLine: ni})
			oi++
		case opInsert:
			ops = append(ops, op{kind: opInsert, text: b[e.j], oldLine: oi, newLine: ni})
			ni++
		}
	}

	for _, l := range firstLines(old[len(old)-s:], context) {
		ops = append(ops, op{kind: opEqual, text: l, oldLine: oi, newLine: ni})
		oi++
		ni++
	}
	return ops
}

func lineStart(b []byte, i int) bool { return i == 0 || b[i-1] == '\n' }

// commonPrefix returns the length of the longest common prefix, comparing
// in blocks so the assembly bytes.Equal does the bulk of the work.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	const block = 4096
	i := 0
	for i+block <= n && bytes.Equal(a[i:i+block], b[i:i+block]) {
		i += block
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// commonSuffix is commonPrefix from the end.
func commonSuffix(a, b []byte) int {
	n := min(len(a), len(b))
	const block = 4096
	i := 0
	for i+block <= n && bytes.Equal(a[len(a)-i-block:len(a)-i], b[len(b)-i-block:len(b)-i]) {
		i += block
	}
	for i < n && a[len(a)-1-i] == b[len(b)-1-i] {
		i++
	}
	return i
}

// splitLines splits b into lines that keep their "\n"; the last line may
// lack one.
func splitLines(b []byte) [][]byte {
	if len(b) == 0 {
		return nil
	}
	lines := make([][]byte, 0, bytes.Count(b, []byte{'\n'})+1)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			lines = append(lines, b)
			break
		}
		lines = append(lines, b[:i+1])
		b = b[i+1:]
	}
	return lines
}

// lastLines returns the last n lines of b, which ends with "\n" or is empty.
func lastLines(b []byte, n int) [][]byte {
	if n == 0 || len(b) == 0 {
		return nil
	}
	start := len(b)
	for k := 0; k < n && start > 0; k++ {
		start = bytes.LastIndexByte(b[:start-1], '\n') + 1
	}
	return splitLines(b[start:])
}

// firstLines returns the first n lines of b.
func firstLines(b []byte, n int) [][]byte {
	end := 0
	for k := 0; k < n && end < len(b); k++ {
		i := bytes.IndexByte(b[end:], '\n')
		if i < 0 {
			end = len(b)
			break
		}
		end += i + 1
	}
	return splitLines(b[:end])
}

// edit is one step of a Myers edit script: an index into a (equal, delete)
// and/or b (equal, insert).
type edit struct {
	kind opKind
	i, j int
}

// myers returns a shortest edit script from a to b, or a replace-everything
// script when the search would cost more than maxCost.
func myers(a, b [][]byte) []edit {
	// Intern lines so the inner loop compares integers.
	ids := make(map[string]int32, len(a)+len(b))
	intern := func(lines [][]byte) []int32 {
		out := make([]int32, len(lines))
		for i, l := range lines {
			id, ok := ids[string(l)]
			if !ok {
				id = int32(len(ids))
				ids[string(l)] = id
			}
			out[i] = id
		}
		return out
	}
	x, y := intern(a), intern(b)
	n, m := len(x), len(y)

	limit := maxEditDistance
	if n+m > 0 {
		limit = min(limit, maxCost/(n+m))
	}
	limit = min(limit, n+m)

	off := limit + 1
	v := make([]int32, 2*limit+3)
	var trace [][]int32
	found := -1
	for d := 0; d <= limit && found < 0; d++ {
		snap := make([]int32, 2*d+1)
		copy(snap, v[off-d:off+d+1])
		trace = append(trace, snap)
		for k := -d; k <= d; k += 2 {
			var xi int32
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				xi = v[off+k+1]
			} else {
				xi = v[off+k-1] + 1
			}
			yi := xi - int32(k)
			for int(xi) < n && int(yi) < m && x[xi] == y[yi] {
				xi++
				yi++
			}
			v[off+k] = xi
			if int(xi) >= n && int(yi) >= m {
				found = d
				break
			}
		}
	}
	if found < 0 {
		return replaceAll(n, m)
	}

	// Walk the trace backwards to recover the path. Each step d is one
	// insert or delete followed by a run of equal lines (the snake).
	var rev []edit
	xi, yi := n, m
	for d := found; d > 0; d-- {
		snap := trace[d] // v as it was before step d, for k in [-d, d]
		get := func(k int) int { return int(snap[k+d]) }
		k := xi - yi
		var pk int
		if k == -d || (k != d && get(k-1) < get(k+1)) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := get(pk)
		py := px - pk
		mx := px + 1 // a step right: delete a[px]
		if pk == k+1 {
			mx = px // a step down: insert b[py]
		}
		for xi > mx {
			rev = append(rev, edit{kind: opEqual, i: xi - 1, j: yi - 1})
			xi--
			yi--
		}
		if pk == k+1 {
			rev = append(rev, edit{kind: opInsert, i: px, j: py})
		} else {
			rev = append(rev, edit{kind: opDelete, i: px, j: py})
		}
		xi, yi = px, py
	}
	for xi > 0 && yi > 0 {
		rev = append(rev, edit{kind: opEqual, i: xi - 1, j: yi - 1})
		xi--
		yi--
	}
	out := make([]edit, len(rev))
	for i, e := range rev {
		out[len(rev)-1-i] = e
	}
	return out
}

// replaceAll deletes every line of a and inserts every line of b.
func replaceAll(n, m int) []edit {
	out := make([]edit, 0, n+m)
	for i := range n {
		out = append(out, edit{kind: opDelete, i: i})
	}
	for j := range m {
		out = append(out, edit{kind: opInsert, j: j})
	}
	return out
}

// hunk is a run of ops printed under one "@@" header.
type hunk []op

// groupHunks cuts the ops into hunks: changes closer than 2*context equal
// lines share a hunk, and each hunk keeps at most context equal lines on
// either side.
func groupHunks(ops []op, context int) []hunk {
	var hunks []hunk
	i := 0
	for i < len(ops) {
		// Find the next change.
		for i < len(ops) && ops[i].kind == opEqual {
			i++
		}
		if i == len(ops) {
			break
		}
		start := max(0, i-context)
		// Extend while the gap of equal lines to the next change is small.
		end := i
		for {
			for end < len(ops) && ops[end].kind != opEqual {
				end++
			}
			gap := 0
			for end+gap < len(ops) && ops[end+gap].kind == opEqual {
				gap++
			}
			if end+gap < len(ops) && gap <= 2*context {
				end += gap
				continue
			}
			end += min(gap, context)
			break
		}
		hunks = append(hunks, hunk(ops[start:end]))
		i = end
	}
	return hunks
}

// write prints the hunk and returns its added and removed line counts.
func (h hunk) write(b *strings.Builder) (added, removed int) {
	oldStart, newStart := h[0].oldLine, h[0].newLine
	oldCount, newCount := 0, 0
	for _, o := range h {
		switch o.kind {
		case opEqual:
			oldCount++
			newCount++
		case opDelete:
			oldCount++
		case opInsert:
			newCount++
		}
	}
	fmt.Fprintf(b, "@@ -%s +%s @@\n", rangeSpec(oldStart, oldCount), rangeSpec(newStart, newCount))
	for _, o := range h {
		switch o.kind {
		case opEqual:
			b.WriteByte(' ')
		case opDelete:
			b.WriteByte('-')
			removed++
		case opInsert:
			b.WriteByte('+')
			added++
		}
		b.Write(o.text)
		if len(o.text) == 0 || o.text[len(o.text)-1] != '\n' {
			b.WriteString("\n\\ No newline at end of file\n")
		}
	}
	return added, removed
}

// rangeSpec formats one side of a hunk header the way GNU diff does: an
// empty range names the line before it, and a count of one is implied.
func rangeSpec(start, count int) string {
	switch count {
	case 0:
		return fmt.Sprintf("%d,0", start-1)
	case 1:
		return fmt.Sprintf("%d", start)
	}
	return fmt.Sprintf("%d,%d", start, count)
}
