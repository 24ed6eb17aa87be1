package run

import (
	"slices"
	"testing"

	"github.com/agentplane/agentplane/pkg/result"
)

func TestBuildEnv(t *testing.T) {
	parent := []string{"PATH=/p", "SECRET=x", "HOME=/h", "PAGER=less", "bad"}
	for _, tc := range []struct {
		name      string
		clear     bool
		set       []string
		want, not []string
	}{
		{"inherits, defaults win over the parent", false, nil, []string{"PATH=/p", "SECRET=x", "PAGER=cat", "TERM=dumb"}, []string{"PAGER=less", "bad"}},
		{"clear keeps the minimal set", true, nil, []string{"PATH=/p", "HOME=/h", "NO_COLOR=1"}, []string{"SECRET=x"}},
		{"explicit settings win", false, []string{"PAGER=more", "X=1=2"}, []string{"PAGER=more", "X=1=2"}, []string{"PAGER=cat"}},
	} {
		got, err := BuildEnv(parent, tc.clear, tc.set)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("%s: %q missing from %q", tc.name, w, got)
			}
		}
		for _, n := range tc.not {
			if slices.Contains(got, n) {
				t.Errorf("%s: %q present", tc.name, n)
			}
		}
	}
	if got, _ := BuildEnv(nil, true, nil); !slices.Contains(got, "PATH=/usr/local/bin:/usr/bin:/bin") {
		t.Errorf("clear without PATH: %q", got)
	}
	for _, bad := range []string{"NOEQUALS", "=v", "K=a\x00b"} {
		if _, err := BuildEnv(nil, false, []string{bad}); result.AsError(err).Code != result.CodeInvalidRequest {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
