package agentfs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
)

// runEdit parses an edit call with the given environment and request and
// returns the options editRun would get, or the printed failure.
func runEdit(t *testing.T, environ map[string]string, request string, args ...string) (*EditOptions, string, int) {
	t.Helper()
	var got *EditOptions
	p := Program()
	p.Build = func(root *cobra.Command, env *clikit.Env) {
		common := addCommonFlags(root, env)
		root.AddCommand(NewCmdEdit(env, common, func(o *EditOptions) (*clikit.Outcome, error) {
			got = o
			return &clikit.Outcome{Value: map[string]bool{"success": true}}, nil
		}))
	}
	if request != "" {
		f := filepath.Join(t.TempDir(), "req.json")
		if err := os.WriteFile(f, []byte(request), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--request", f)
	}
	var out bytes.Buffer
	env := &clikit.Env{
		Program: p, In: strings.NewReader(""), Out: &out, Err: &bytes.Buffer{},
		LookupEnv: func(k string) (string, bool) { v, ok := environ[k]; return v, ok },
		Environ:   func() []string { return nil },
		Ctx:       context.Background(),
	}
	code := clikit.Run(env, append([]string{"edit"}, args...))
	return got, out.String(), code
}

func TestEditAliases(t *testing.T) {
	noConfig := map[string]string{"HOME": t.TempDir()}
	o, out, code := runEdit(t, noConfig, `{"path":"f","old_string":"a","new_string":"b","replace_all":true}`)
	if code != 0 || o == nil {
		t.Fatalf("exit %d: %s", code, out)
	}
	if o.Path != "f" || o.Old != "a" || o.New != "b" || !o.ReplaceAll {
		t.Fatalf("options %+v", o)
	}
	_, out, code = runEdit(t, noConfig, `{"path":"f","old":"a","old_string":"a","new":"b"}`)
	if code != ExitUsage || gjson.Get(out, "error.code").String() != "invalid_request" {
		t.Fatalf("flag and alias together: exit %d: %s", code, out)
	}
}

func TestRequestTightensOnly(t *testing.T) {
	base := t.TempDir()
	inner := filepath.Join(base, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"HOME":                  t.TempDir(),
		"AGENTFS_ROOT":          base,
		"AGENTPLANE_DENY":       "**/.env",
		"AGENTFS_MAX_FILE_SIZE": "1M",
	}
	cases := []struct {
		name, request string
		args          []string
		wantCode      string
		root          string
		deny          []string
		maxFile       int64
	}{
		{name: "configured only", request: `{"path":"f","old":"a","new":"b"}`, root: base, deny: []string{"**/.env"}, maxFile: 1 << 20},
		{name: "narrower", request: `{"path":"f","old":"a","new":"b","root":"` + inner + `","deny":["*.key"],"max_file_size":1024}`,
			root: inner, deny: []string{"**/.env", "*.key"}, maxFile: 1024},
		{name: "larger size is capped", request: `{"path":"f","old":"a","new":"b","max_file_size":"1G"}`, root: base, deny: []string{"**/.env"}, maxFile: 1 << 20},
		{name: "wider root refused", request: `{"path":"f","old":"a","new":"b","root":"/"}`, wantCode: "outside_root"},
		{name: "command line is the operator", request: `{"path":"f","old":"a","new":"b"}`, args: []string{"--root", "/"}, root: "/", deny: []string{"**/.env"}, maxFile: 1 << 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, out, code := runEdit(t, env, c.request, c.args...)
			if c.wantCode != "" {
				if got := gjson.Get(out, "error.code").String(); got != c.wantCode || code != ExitFailed {
					t.Fatalf("exit %d, %s; want %s", code, out, c.wantCode)
				}
				return
			}
			if code != 0 || o == nil {
				t.Fatalf("exit %d: %s", code, out)
			}
			if o.Root != c.root || !reflect.DeepEqual(o.Deny, c.deny) || o.MaxFileSize != c.maxFile {
				t.Fatalf("root %q deny %q max %d; want %q %q %d", o.Root, o.Deny, o.MaxFileSize, c.root, c.deny, c.maxFile)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]os.FileMode{"0644": 0o644, "644": 0o644, "0o600": 0o600, "0": 0, "777": 0o777} {
		if got, err := parseMode(in); err != nil || got != want {
			t.Errorf("parseMode(%q) = %o, %v; want %o", in, got, err, want)
		}
	}
	for _, in := range []string{"", "999", "1777", "rw-r--r--", "-1"} {
		if _, err := parseMode(in); err == nil {
			t.Errorf("parseMode(%q) accepted", in)
		}
	}
}
