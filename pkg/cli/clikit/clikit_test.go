package clikit

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/internal/testkit"
	"github.com/agentplane/agentplane/pkg/result"
)

type testOpts struct {
	Name    string
	Count   int
	Wait    time.Duration
	Size    int64
	Flag    bool
	Env     []string
	Mode    string
	Edits   string
	Command string
}

// testProgram builds a small program with one operation of every flag kind.
func testProgram(o *testOpts, got *[]string) *Program {
	return &Program{
		Name: "tprog",
		ExitCode: func(code string) int {
			if code == result.CodeUsage || code == result.CodeInvalidRequest {
				return 2
			}
			return 1
		},
		Build: func(root *cobra.Command, env *Env) {
			c := &cobra.Command{Use: "op", Annotations: map[string]string{AnnotTool: "tprog_op", AnnotArgs: "path"}}
			f := c.Flags()
			f.StringVar(&o.Name, "name", "", "a name")
			f.IntVar(&o.Count, "count", 0, "a count")
			f.Var(DurationValue{D: &o.Wait}, "wait", "a duration")
			f.Var(SizeValue{N: &o.Size}, "max-size", "a size")
			f.BoolVar(&o.Flag, "flag", false, "a switch")
			f.StringArrayVar(&o.Env, "env", nil, "K=V")
			_ = f.SetAnnotation("env", AnnotObject, []string{"true"})
			f.Var(EnumValue{S: &o.Mode, Allowed: []string{"a", "b"}}, "mode", "a mode")
			f.StringVar(&o.Edits, "edits", "", "json edits")
			_ = f.SetAnnotation("edits", AnnotJSON, []string{"true"})
			_ = f.SetAnnotation("count", AnnotConfig, []string{"true"})
			_ = f.SetAnnotation("wait", AnnotConfig, []string{"true"})
			c.RunE = env.Action(func(cmd *cobra.Command, args []string) (*Outcome, error) {
				a, err := env.Positional(cmd, args, 1)
				if err != nil {
					return nil, err
				}
				*got = a
				return &Outcome{Value: result.New().Set("success", true).Set("path", a[0]).Set("description", env.Description)}, nil
			})
			root.AddCommand(c)
		},
	}
}

func runProg(t *testing.T, stdin string, environ map[string]string, args ...string) (*testOpts, []string, string, int) {
	t.Helper()
	o := &testOpts{}
	var got []string
	var out, errb bytes.Buffer
	env := &Env{
		Program: testProgram(o, &got), In: strings.NewReader(stdin), Out: &out, Err: &errb,
		LookupEnv: func(k string) (string, bool) { v, ok := environ[k]; return v, ok },
		Environ:   func() []string { return nil },
	}
	env.Ctx = t.Context()
	code := Run(env, args)
	if n := strings.Count(out.String(), "\n"); n != 1 && !strings.Contains(strings.Join(args, " "), "--help") {
		t.Fatalf("stdout has %d lines, want exactly one JSON object:\n%s", n, out.String())
	}
	return o, got, out.String(), code
}

func TestRequestAppliesFlagsAndPositional(t *testing.T) {
	req := `{"path":"a.txt","name":"n","count":3,"wait":1.5,"max_size":"2K","flag":true,"env":{"B":"2","A":"1"},"mode":"b","edits":[{"old_string":"x"}],"description":"why"}`
	o, got, out, code := runProg(t, req, nil, "op", "--request", "-")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	if got[0] != "a.txt" || o.Name != "n" || o.Count != 3 || o.Wait != 1500*time.Millisecond || o.Size != 2048 || !o.Flag || o.Mode != "b" {
		t.Fatalf("options %+v args %v", o, got)
	}
	if strings.Join(o.Env, ",") != "A=1,B=2" {
		t.Fatalf("env %v", o.Env)
	}
	if gjson.Get(o.Edits, "0.old_string").String() != "x" {
		t.Fatalf("edits %q", o.Edits)
	}
	if gjson.Get(out, "description").String() != "why" {
		t.Fatalf("description not kept: %s", out)
	}
}

func TestFlagsOverrideRequest(t *testing.T) {
	o, got, _, code := runProg(t, `{"path":"r","name":"from-request","count":1}`, nil, "op", "--request", "-", "--name", "from-flag", "cli")
	if code != 0 || o.Name != "from-flag" || o.Count != 1 || got[0] != "cli" {
		t.Fatalf("code %d opts %+v args %v", code, o, got)
	}
}

func TestRequestErrors(t *testing.T) {
	cases := []struct{ name, req, code, msg string }{
		{"unknown key", `{"path":"x","nope":1}`, "invalid_request", `unknown key "nope"`},
		{"hyphenated key", `{"path":"x","max-size":1}`, "invalid_request", "unknown key"},
		{"global flag key", `{"path":"x","pretty":true}`, "invalid_request", "unknown key"},
		{"bool type", `{"path":"x","flag":"yes"}`, "invalid_request", "expected a boolean"},
		{"int type", `{"path":"x","count":1.5}`, "invalid_request", "expected an integer"},
		{"int string", `{"path":"x","count":"3"}`, "invalid_request", "expected an integer"},
		{"negative duration", `{"path":"x","wait":-1}`, "invalid_request", "negative"},
		{"enum", `{"path":"x","mode":"c"}`, "invalid_request", "must be one of"},
		{"null for an unknown key", `{"path":"x","nope":null}`, "invalid_request", `unknown key "nope"`},
		{"null element", `{"path":"x","env":[null]}`, "invalid_request", "array of strings"},
		{"env array of numbers", `{"path":"x","env":[1]}`, "invalid_request", "array of strings"},
		{"path type", `{"path":5}`, "invalid_request", "expected a string"},
		{"not an object", `[1,2]`, "invalid_request", "JSON object"},
		{"malformed", `{"path":`, "invalid_request", "not valid JSON"},
		{"trailing data", `{"path":"x"} {}`, "invalid_request", "after its JSON object"},
		{"empty", ``, "invalid_request", "empty"},
		{"missing positional", `{"name":"x"}`, "invalid_request", "missing path"},
		{"description type", `{"path":"x","description":3}`, "invalid_request", "expected a string"},
		// A host that shows the first of two equal keys for approval must
		// not see the second one run.
		{"duplicate key", `{"path":"x","path":"y"}`, "invalid_request", `key "path" is given twice`},
		{"duplicate nested key", `{"path":"x","env":[],"edits":[{"a":1,"a":2}]}`, "invalid_request", `key "a" is given twice`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, out, code := runProg(t, c.req, nil, "op", "--request", "-")
			if code != 2 {
				t.Errorf("exit %d, want 2: %s", code, out)
			}
			if got := gjson.Get(out, "error.code").String(); got != c.code {
				t.Errorf("code %q, want %q: %s", got, c.code, out)
			}
			if !strings.Contains(gjson.Get(out, "error.message").String(), c.msg) {
				t.Errorf("message %q lacks %q", gjson.Get(out, "error.message").String(), c.msg)
			}
			if gjson.Get(out, "success").Bool() {
				t.Error("success true on an error")
			}
		})
	}
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agentplane", "config.toml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("count = 1\nwait = \"7s\"\n[tprog]\ncount = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{"XDG_CONFIG_HOME": dir}
	o, _, out, _ := runProg(t, "", base, "op", "p")
	if o.Count != 2 || o.Wait != 7*time.Second {
		t.Fatalf("file: count %d wait %v: %s", o.Count, o.Wait, out)
	}
	env := map[string]string{"XDG_CONFIG_HOME": dir, "AGENTPLANE_COUNT": "3"}
	if o, _, _, _ = runProg(t, "", env, "op", "p"); o.Count != 3 {
		t.Fatalf("shared env: count %d", o.Count)
	}
	env["TPROG_COUNT"] = "4"
	if o, _, _, _ = runProg(t, "", env, "op", "p"); o.Count != 4 {
		t.Fatalf("program env: count %d", o.Count)
	}
	if o, _, _, _ = runProg(t, "", env, "op", "p", "--count", "5"); o.Count != 5 {
		t.Fatalf("flag: count %d", o.Count)
	}
	// A flag without the config annotation is never read from the environment.
	env["TPROG_NAME"] = "sneaky"
	if o, _, _, _ = runProg(t, "", env, "op", "p"); o.Name != "" {
		t.Fatalf("unconfigurable flag read from env: %q", o.Name)
	}
	// A broken config file is an error, not silently ignored.
	if err := os.WriteFile(cfg, []byte("count = [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, out, code := runProg(t, "", base, "op", "p")
	if code == 0 || gjson.Get(out, "error.code").String() != "invalid_config" {
		t.Fatalf("broken config: exit %d %s", code, out)
	}
}

func TestQueryAndUsage(t *testing.T) {
	_, _, out, code := runProg(t, "", nil, "op", "x", "-q", "path")
	if code != 0 || out != "x\n" {
		t.Fatalf("query: %d %q", code, out)
	}
	_, _, out, code = runProg(t, "", nil, "op", "--count", "zz", "x")
	if code != 2 || gjson.Get(out, "error.code").String() != "usage_error" {
		t.Fatalf("bad int: %d %s", code, out)
	}
	_, _, out, code = runProg(t, "", nil, "nope")
	if code != 2 || gjson.Get(out, "error.code").String() != "usage_error" {
		t.Fatalf("unknown command: %d %s", code, out)
	}
	_, _, out, code = runProg(t, "", nil, "op", "a", "b")
	if code != 2 || gjson.Get(out, "error.code").String() != "usage_error" {
		t.Fatalf("extra arg: %d %s", code, out)
	}
}

// TestRequestNullIsNotGiven: OpenAI's strict mode makes every key required
// and a model sends null for those it leaves out; null means "not given",
// so the default (or the config's value) applies.
func TestRequestNullIsNotGiven(t *testing.T) {
	o, got, out, code := runProg(t, `{"path":"x","name":null,"count":null,"wait":null,"max_size":null,"flag":null,"env":null,"mode":null,"edits":null,"description":null}`, nil, "op", "--request", "-")
	if code != 0 || got[0] != "x" || o.Name != "" || o.Count != 0 || o.Flag || len(o.Env) != 0 {
		t.Fatalf("code %d opts %+v args %v: %s", code, o, got, out)
	}
	// A required key left out is the request's fault: invalid_request.
	_, _, out, code = runProg(t, `{"path":null}`, nil, "op", "--request", "-")
	if code != 2 || gjson.Get(out, "error.code").String() != "invalid_request" {
		t.Fatalf("a null required key: %d %s", code, out)
	}
}

func TestSchemaMatchesRequestKeys(t *testing.T) {
	for _, format := range []string{"openai", "anthropic", "mcp", "jsonschema"} {
		_, _, out, code := runProg(t, "", nil, "schema", "--format", format)
		if code != 0 {
			t.Fatalf("%s: %s", format, out)
		}
		tool := gjson.Get(out, "tools.0")
		var schema gjson.Result
		switch format {
		case "openai":
			schema = tool.Get("function.parameters")
		case "anthropic":
			schema = tool.Get("input_schema")
		case "mcp":
			schema = tool.Get("inputSchema")
		default:
			schema = tool
		}
		props := schema.Get("properties")
		for _, k := range []string{"path", "name", "count", "wait", "max_size", "flag", "env", "mode", "edits", "description"} {
			if !props.Get(k).Exists() {
				t.Errorf("%s: property %s missing", format, k)
			}
		}
		if props.Get("pretty").Exists() || props.Get("request").Exists() {
			t.Errorf("%s: output flags leak into the schema", format)
		}
		if format == "openai" {
			if n := len(schema.Get("required").Array()); n != len(props.Map()) {
				t.Errorf("%s: %d of %d properties required: %s", format, n, len(props.Map()), schema.Get("required").Raw)
			}
			if props.Get("count.type").Raw != `["integer","null"]` || props.Get("path.type").String() != "string" {
				t.Errorf("%s: optional keys are not nullable, or required ones are: %s", format, props.Raw)
			}
			continue
		}
		if schema.Get("required.0").String() != "path" {
			t.Errorf("%s: required %s", format, schema.Get("required").Raw)
		}
		if props.Get("env.type").String() != "array" || props.Get("env.items.type").String() != "string" || props.Get("count.type").String() != "integer" {
			t.Errorf("%s: types %s", format, props.Raw)
		}
	}
}

func TestParseDurationAndSize(t *testing.T) {
	for in, want := range map[string]time.Duration{"90s": 90 * time.Second, "2m": 2 * time.Minute, "5": 5 * time.Second, "0.5": 500 * time.Millisecond, "0": 0} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "-1", "-2s", "soon", "NaN", "1e300"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) accepted", bad)
		}
	}
	for in, want := range map[string]int64{"10": 10, "64M": 64 << 20, "1G": 1 << 30, "2k": 2048, "3MiB": 3 << 20} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "-1", "5X", "M", "99999999999G"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

// FuzzRequest feeds arbitrary documents to the request path: it must never
// panic, and must print exactly one JSON object with a stable code.
func FuzzRequest(f *testing.F) {
	for _, s := range []string{`{"path":"a"}`, `{"count":1,"path":"x"}`, `[]`, `{`, `{"env":{"A":"1"},"path":"p"}`, `{"wait":"1s","path":"p"}`, "\x00", `{"edits":[{}],"path":"p"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, req string) {
		_, _, out, code := runProg(t, req, nil, "op", "--request", "-")
		if !gjson.Valid(out) {
			t.Fatalf("invalid JSON output: %q", out)
		}
		if code != 0 && gjson.Get(out, "error.code").String() == "" {
			t.Fatalf("failure without a code: %s", out)
		}
		if code != 0 && code != 2 {
			t.Fatalf("exit %d", code)
		}
	})
}

// TestVersionShowsRevision: the revision is read only for --version, and
// --version still shows all of versionString; other calls never need it.
func TestVersionShowsRevision(t *testing.T) {
	for args, want := range map[string]bool{"--version": true, "--version=true": true, "--pretty --version": true,
		"op x": false, "op -- --version": false, "": false} {
		if got := wantsVersion(strings.Fields(args)); got != want {
			t.Errorf("wantsVersion(%q) = %v, want %v", args, got, want)
		}
	}
	_, _, out, code := runProg(t, "", nil, "--version")
	if code != 0 || out != "tprog version "+versionString()+"\n" {
		t.Fatalf("--version: exit %d, %q; want %q", code, out, "tprog version "+versionString())
	}
}

// TestSystemConfigBaseLayer: the system-wide config file gives the
// settings the user's file (or --config's) leaves unset, and no variable
// moves it: HOME, XDG_CONFIG_HOME and AGENTPLANE_CONFIG change which user
// file is read, never whether the system one is.
func TestSystemConfigBaseLayer(t *testing.T) {
	dir := t.TempDir()
	sys := filepath.Join(dir, "etc", "config.toml")
	user := filepath.Join(dir, "home", ".config", "agentplane", "config.toml")
	testkit.WriteFiles(t, map[string]string{sys: "count = 7\nwait = \"3s\"\n", user: "count = 2\n"})
	for _, c := range []struct {
		name    string
		environ map[string]string
		count   int
		wait    time.Duration
	}{
		{"the user's file over the system's", map[string]string{"HOME": filepath.Join(dir, "home")}, 2, 3 * time.Second},
		{"HOME moved away", map[string]string{"HOME": filepath.Join(dir, "elsewhere")}, 7, 3 * time.Second},
		{"XDG_CONFIG_HOME and AGENTPLANE_CONFIG moved", map[string]string{"XDG_CONFIG_HOME": filepath.Join(dir, "x"),
			"AGENTPLANE_CONFIG": user}, 2, 3 * time.Second},
	} {
		o := &testOpts{}
		var got []string
		var out bytes.Buffer
		env := &Env{Program: testProgram(o, &got), In: strings.NewReader(""), Out: &out, Err: io.Discard, SystemConfig: sys,
			LookupEnv: func(k string) (string, bool) { v, ok := c.environ[k]; return v, ok }, Environ: func() []string { return nil }}
		env.Ctx = t.Context()
		if code := Run(env, []string{"op", "p"}); code != 0 {
			t.Fatalf("%s: exit %d: %s", c.name, code, out.String())
		}
		if o.Count != c.count || o.Wait != c.wait {
			t.Errorf("%s: count %d wait %s, want %d and %s", c.name, o.Count, o.Wait, c.count, c.wait)
		}
		files := env.ConfigFiles()
		if last := files[len(files)-1]; last.Path != sys || !last.System {
			t.Errorf("%s: config files %v end without the system file", c.name, files)
		}
	}
	// A relative HOME names no user file: it would be read below the
	// working directory.
	for _, home := range []string{".", "home", ""} {
		env := &Env{SystemConfig: sys, LookupEnv: func(k string) (string, bool) {
			if k == "HOME" {
				return home, true
			}
			return "", false
		}}
		if files := env.ConfigFiles(); len(files) != 1 || !files[0].System {
			t.Errorf("HOME=%q: config files %v, want the system file alone", home, files)
		}
	}
}
