package files

import (
	"fmt"
	"sort"
	"strings"

	"github.com/agentplane/agentplane/pkg/result"
)

// Bounds of the near-miss search, so that a failed edit in a huge file still
// answers quickly: the cheap scan compares at most scanBudget line pairs, and
// only the best rescoreTop windows get the precise (quadratic) score.
const (
	scanBudget   = 4_000_000
	rescoreTop   = 20
	maxLevenLine = 300
	// levenBudget bounds the total edit-distance work (cells of the
	// dynamic programme) of one search; past it the cheap score is used.
	levenBudget = 20_000_000
	// minHintSimilarity is the score below which a window is too unlike
	// old_string to be worth showing.
	minHintSimilarity = 0.4
)

// notFound builds old_string_not_found with the closest window of lines as a
// hint, so the caller can see what the file really says there.
func notFound(path string, body []byte, old string) error {
	e := newErr(result.CodeOldStringNotFound, "old_string was not found in %s", path)
	text, start, end, score := nearMiss(body, old)
	if score >= minHintSimilarity {
		e.Message = fmt.Sprintf("old_string was not found in %s; the closest text is at lines %d-%d (%.0f%% similar)",
			path, start, end, score*100)
		e.With("hint", fmt.Sprintf("lines %d-%d are the closest match; compare them with old_string (whitespace, typos, stale content)", start, end)).
			With("closest_match", text).
			With("start_line", start).
			With("end_line", end).
			With("similarity", float64(int(score*100))/100)
	}
	return e
}

// nearMiss finds the window of lines, as many as old_string has, most
// similar to it. Candidates come from two sources: windows aligned on a
// line that equals one of old's lines (after trimming), and, while within
// scanBudget, every window scored with a cheap prefix/suffix similarity.
// The best candidates are rescored with an edit-distance ratio.
func nearMiss(body []byte, old string) (text string, start, end int, score float64) {
	oldLines := strings.Split(strings.TrimSuffix(strings.ReplaceAll(old, "\r\n", "\n"), "\n"), "\n")
	lines := splitLineSpans(body)
	k := len(oldLines)
	if len(lines) == 0 {
		return "", 0, 0, 0
	}
	if k > len(lines) {
		k = len(lines)
		oldLines = oldLines[:k]
	}
	windows := len(lines) - k + 1
	trimmed := make([]string, len(lines))
	for i, l := range lines {
		trimmed[i] = strings.TrimSpace(string(body[l.start:l.end]))
	}
	line := func(i int) string { return trimmed[i] }
	trimmedOld := make([]string, k)
	for j, l := range oldLines {
		trimmedOld[j] = strings.TrimSpace(l)
	}

	cheap := make([]float32, windows)
	byText := map[string][]int{}
	for j, l := range trimmedOld {
		if l != "" {
			byText[l] = append(byText[l], j)
		}
	}
	for i := range lines {
		for _, j := range byText[line(i)] {
			if w := i - j; w >= 0 && w < windows {
				cheap[w] += 1 / float32(k)
			}
		}
	}
	if windows*k <= scanBudget {
		for w := range windows {
			s := 0.0
			for j := range k {
				s += quickSimilarity(trimmedOld[j], line(w+j))
			}
			cheap[w] = max(cheap[w], float32(s/float64(k)))
		}
	}
	cands := topWindows(cheap, rescoreTop)
	best := -1
	budget := levenBudget
	for _, w := range cands {
		s := 0.0
		for j := range k {
			a, b := trimmedOld[j], line(w+j)
			if cost := len(a) * len(b); cost <= budget {
				budget -= cost
				s += similarity(a, b)
			} else {
				s += quickSimilarity(a, b)
			}
		}
		s /= float64(k)
		if best < 0 || s > score {
			best, score = w, s
		}
	}
	if best < 0 {
		return "", 0, 0, 0
	}
	first, last := lines[best], lines[best+k-1]
	return string(body[first.start:last.end]), best + 1, best + k, score
}

// quickSimilarity is a linear-time stand-in for edit similarity: the share
// of the longer string covered by the common prefix and suffix. It rates a
// one-character typo highly, which is the common near miss.
func quickSimilarity(a, b string) float64 {
	if a == b {
		return 1
	}
	n := max(len(a), len(b))
	p := 0
	for p < len(a) && p < len(b) && a[p] == b[p] {
		p++
	}
	s := 0
	for s < len(a)-p && s < len(b)-p && a[len(a)-1-s] == b[len(b)-1-s] {
		s++
	}
	return float64(p+s) / float64(n)
}

// similarity is 1 - Levenshtein distance / longer length, over bytes; long
// lines fall back to quickSimilarity to keep the cost bounded.
func similarity(a, b string) float64 {
	if a == b {
		return 1
	}
	if len(a) > maxLevenLine || len(b) > maxLevenLine {
		return quickSimilarity(a, b)
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return 1 - float64(prev[len(b)])/float64(max(len(a), len(b)))
}

// topWindows returns the indexes of the n highest scores, best first, ties
// to the earlier window; one pass, so it stays linear in the file.
func topWindows(scores []float32, n int) []int {
	top := make([]int, 0, n+1)
	for w, sc := range scores {
		if sc <= 0 || (len(top) == n && sc <= scores[top[n-1]]) {
			continue
		}
		i := sort.Search(len(top), func(i int) bool { return scores[top[i]] < sc })
		top = append(top, 0)
		copy(top[i+1:], top[i:])
		top[i] = w
		if len(top) > n {
			top = top[:n]
		}
	}
	return top
}
