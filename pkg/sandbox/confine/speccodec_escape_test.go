package confine

import (
	"reflect"
	"strings"
	"testing"
)

// A spec cut anywhere, at a record's end too (the runner's write of a
// spec larger than the channel's buffer ended early: the runner died, or
// its end was closed), is refused: decoded, its missing fields would be
// zero, which is less confinement (no Landlock ABI, no network namespace,
// no hidden files, a writable root).
func TestEscapeSpecTruncated(t *testing.T) {
	data, err := EncodeSpec(filledSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(data); i++ {
		if sp, err := ParseSpec(data[:i]); err == nil {
			t.Fatalf("a spec cut after %d of %d bytes (%q…) is accepted: %+v", i, len(data), data[max(0, i-24):i], sp)
		}
	}
}

// Paths and names the model chooses (a workspace, --allow-write,
// --deny-read, a --user's name) reach the helper in the spec's records: a
// value holding the format's separator is refused by the runner, and
// every other value, a newline or a field's name in it included, comes
// back as it was, never as a record of its own.
func TestEscapeSpecInjection(t *testing.T) {
	hostile := []string{
		"/ws\x00writable\x00/",
		"\x00",
		"/ws\nwritable\n/",
		"writable",
		"{\"writable\":[\"/\"]}",
		"/ws\x00",
		"",
		"/a path/with spaces/ 1 2 3",
		"\xff\xfe not UTF-8",
	}
	strs := func(sp *Spec) []*string { return []*string{&sp.Status, &sp.Acct, &sp.TempDir} }
	lists := func(sp *Spec) []*[]string {
		return []*[]string{&sp.Writable, &sp.WriteFiles, &sp.DenyDirs, &sp.DenyFiles, &sp.Cgroups,
			&sp.Seatbelt, &sp.ReadOnly, &sp.TempAreas, &sp.Pinned}
	}
	check := func(what string, sp Spec, v string) {
		t.Helper()
		data, err := EncodeSpec(sp)
		if strings.IndexByte(v, 0) >= 0 {
			if err == nil {
				t.Errorf("%s %q: encoded", what, v)
			}
			return
		}
		if err != nil {
			t.Errorf("%s %q: %v", what, v, err)
			return
		}
		got, err := ParseSpec(data)
		if err != nil {
			t.Errorf("%s %q: %v", what, v, err)
			return
		}
		if !reflect.DeepEqual(got, sp) {
			t.Errorf("%s %q: decoded as\n %+v\nwant %+v", what, v, got, sp)
		}
	}
	base := Spec{V: SpecVersion, Status: "/s", UID: -1, GID: -1, LandlockABI: 3, ReadOnlyRoot: true, NetNone: true}
	for _, v := range hostile {
		for i := range strs(&base) {
			sp := base
			*strs(&sp)[i] = v
			check("string field", sp, v)
		}
		for i := range lists(&base) {
			sp := base
			*lists(&sp)[i] = []string{"/first", v, "/last"}
			check("list field", sp, v)
		}
	}
}
