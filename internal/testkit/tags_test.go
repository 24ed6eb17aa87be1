package testkit

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// sleepTag is how the suite names the processes that noproc, killproc and
// LiveProcesses look for: "sleep N" with N of four or more digits.
var sleepTag = regexp.MustCompile(`\bsleep ([0-9]{4,})\b`)

// shortTag is a process pattern that names a prefix of tags: "sleep" and
// three digits matches the four-digit tags of every other test.
var shortTag = regexp.MustCompile(`(noproc|killproc|LiveProcesses\()\s*['"]sleep [0-9]{1,3}['"]`)

// TestSleepTagsUnique: LiveProcesses sees every process on the machine, and
// the packages' tests run at the same time, so a tag used by two test files
// lets one test find, or kill, another's process. Each tag belongs to one
// file.
func TestSleepTagsUnique(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{}
	var clashes []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".txtar") && !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, m := range shortTag.FindAllString(string(b), -1) {
			clashes = append(clashes, rel+": "+m+" matches the tags of other tests")
		}
		for _, m := range sleepTag.FindAllStringSubmatch(string(b), -1) {
			tag := m[1]
			if prev, ok := owner[tag]; ok && prev != rel {
				clashes = append(clashes, "sleep "+tag+": "+prev+" and "+rel)
				owner[tag] = rel // one report per pair
				continue
			}
			owner[tag] = rel
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(clashes)
	for _, c := range clashes {
		t.Error(c)
	}
}
