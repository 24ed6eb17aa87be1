package main

import "testing"

// TestMergeSections: a run of some cases replaces their sections and the
// heading, keeps the others in their order, and appends a new one.
func TestMergeSections(t *testing.T) {
	old := "# Benchmarks\n\nold date\n\n## startup\n\nold a\n\n## capture\n\nold b\n"
	fresh := "# Benchmarks\n\nnew date\n\n## startup\n\nnew a\n\n## fresh\n\nnew c\n"
	want := "# Benchmarks\n\nnew date\n\n## startup\n\nnew a\n\n## capture\n\nold b\n\n## fresh\n\nnew c\n"
	if got := string(mergeSections([]byte(old), []byte(fresh))); got != want {
		t.Errorf("merged:\n%s\nwant:\n%s", got, want)
	}
}
