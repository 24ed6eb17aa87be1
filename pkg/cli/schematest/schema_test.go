// Package schematest checks the function-calling definitions the three
// programs print: every tool schema, in every format, is a valid JSON Schema
// (draft 2020-12), and every example call in the docs validates against its
// tool's schema and runs through the real program.
package schematest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentplane/agentplane/pkg/cli/agentfs"
	"github.com/agentplane/agentplane/pkg/cli/agentjob"
	"github.com/agentplane/agentplane/pkg/cli/agentsh"
	"github.com/agentplane/agentplane/pkg/cli/clikit"
)

const metaschemaURL = "https://json-schema.org/draft/2020-12/schema"

var programs = map[string]func() *clikit.Program{
	"agentsh":  agentsh.Program,
	"agentjob": agentjob.Program,
	"agentfs":  agentfs.Program,
}

var formats = []string{clikit.FormatOpenAI, clikit.FormatAnthropic, clikit.FormatMCP, clikit.FormatJSONSchema}

// repoRoot is where docs/ and examples/ live, relative to this package.
const repoRoot = "../../.."

// runInProcess drives a program the way Main does, with empty environment
// and config so the user's settings cannot change what is printed.
func runInProcess(t *testing.T, program string, args ...string) (map[string]any, int) {
	t.Helper()
	var out, errb bytes.Buffer
	home := t.TempDir()
	environ := map[string]string{"HOME": home, "XDG_CONFIG_HOME": home, "AGENTPLANE_STATE_DIR": filepath.Join(home, "state")}
	env := &clikit.Env{
		Program: programs[program](), In: strings.NewReader(""), Out: &out, Err: &errb,
		LookupEnv: func(k string) (string, bool) { v, ok := environ[k]; return v, ok },
		Environ:   func() []string { return nil },
		Ctx:       t.Context(),
	}
	code := clikit.Run(env, args)
	var v map[string]any
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("%s %v: stdout is not one JSON object: %v\n%s\nstderr: %s", program, args, err, out.String(), errb.String())
	}
	return v, code
}

// toolSchemas returns each tool's request schema as printed in format.
func toolSchemas(t *testing.T, program, format string) map[string]any {
	t.Helper()
	v, code := runInProcess(t, program, "schema", "--format", format)
	if code != 0 || v["success"] != true {
		t.Fatalf("%s schema --format %s: exit %d, %v", program, format, code, v)
	}
	tools, _ := v["tools"].([]any)
	if len(tools) == 0 {
		t.Fatalf("%s schema --format %s: no tools", program, format)
	}
	out := map[string]any{}
	for _, raw := range tools {
		tool, _ := raw.(map[string]any)
		var name, desc any
		var schema any
		switch format {
		case clikit.FormatOpenAI:
			if tool["type"] != "function" {
				t.Errorf("%s openai: tool type %v, want function", program, tool["type"])
			}
			fn, _ := tool["function"].(map[string]any)
			name, desc, schema = fn["name"], fn["description"], fn["parameters"]
		case clikit.FormatAnthropic:
			name, desc, schema = tool["name"], tool["description"], tool["input_schema"]
		case clikit.FormatMCP:
			name, desc, schema = tool["name"], tool["description"], tool["inputSchema"]
		case clikit.FormatGemini:
			name, desc, schema = tool["name"], tool["description"], tool["parameters"]
		default:
			name, desc, schema = tool["title"], tool["description"], tool
			if tool["$schema"] != metaschemaURL {
				t.Errorf("%s jsonschema %v: $schema %v, want %s", program, name, tool["$schema"], metaschemaURL)
			}
		}
		n, _ := name.(string)
		if !strings.HasPrefix(n, program+"_") {
			t.Errorf("%s %s: tool name %q lacks the program prefix", program, format, n)
		}
		if d, _ := desc.(string); d == "" {
			t.Errorf("%s %s %s: no description", program, format, n)
		}
		s, _ := schema.(map[string]any)
		if s == nil || (s["type"] != "object" && s["type"] != "OBJECT") {
			t.Errorf("%s %s %s: schema is not an object schema: %v", program, format, n, schema)
		}
		props, _ := s["properties"].(map[string]any)
		for key, p := range props {
			d, _ := p.(map[string]any)["description"].(string)
			if strings.Count(d, "(default") > 1 {
				t.Errorf("%s %s: %s states its default twice: %q", n, format, key, d)
			}
		}
		if _, dup := out[n]; dup {
			t.Errorf("%s %s: tool %q listed twice", program, format, n)
		}
		out[n] = schema
	}
	return out
}

// compile checks doc against the 2020-12 metaschema and compiles it.
func compile(t *testing.T, meta *jsonschema.Schema, loc string, doc any) *jsonschema.Schema {
	t.Helper()
	// Round-trip through the library's decoder so numbers are json.Number.
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := meta.Validate(v); err != nil {
		t.Errorf("%s is not valid against the 2020-12 metaschema: %v", loc, err)
		return nil
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(loc, v); err != nil {
		t.Fatalf("%s: %v", loc, err)
	}
	s, err := c.Compile(loc)
	if err != nil {
		t.Errorf("%s does not compile: %v", loc, err)
		return nil
	}
	return s
}

func metaschema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	m, err := jsonschema.NewCompiler().Compile(metaschemaURL)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// compiledTools compiles every tool schema of every program (jsonschema format).
func compiledTools(t *testing.T) map[string]*jsonschema.Schema {
	t.Helper()
	meta := metaschema(t)
	out := map[string]*jsonschema.Schema{}
	for program := range programs {
		for name, doc := range toolSchemas(t, program, clikit.FormatJSONSchema) {
			out[name] = compile(t, meta, "urn:agentplane:"+name, doc)
		}
	}
	return out
}

func TestSchemasAreValidJSONSchema(t *testing.T) {
	meta := metaschema(t)
	for program := range programs {
		var names []string
		for _, format := range formats {
			t.Run(program+"/"+format, func(t *testing.T) {
				tools := toolSchemas(t, program, format)
				var got []string
				for name, doc := range tools {
					compile(t, meta, "urn:agentplane:"+format+":"+name, doc)
					got = append(got, name)
				}
				slices.Sort(got)
				if names == nil {
					names = got
				} else if !slices.Equal(names, got) {
					t.Errorf("%s lists tools %v, another format %v", format, got, names)
				}
			})
		}
	}
}

// TestSchemaRejectsWhatTheProgramRejects makes sure the checks above and
// below can fail: a broken schema is refused by the metaschema, and an
// unknown key, a missing required key or a wrongly typed value by the tools.
func TestSchemaRejectsWhatTheProgramRejects(t *testing.T) {
	broken := map[string]any{"type": "objekt", "properties": map[string]any{"x": map[string]any{"type": 3}}}
	if err := metaschema(t).Validate(broken); err == nil {
		t.Errorf("the metaschema accepted %v", broken)
	}
	tools := compiledTools(t)
	for _, bad := range []struct{ tool, req string }{
		{"agentsh_run", `{"command": "true", "no_such_key": 1}`},
		{"agentsh_run", `{"command": "true", "timeout": true}`},
		{"agentfs_read", `{}`},
		{"agentjob_logs", `{"job": "x", "stream": "sideways"}`},
	} {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(bad.req))
		if err != nil {
			t.Fatal(err)
		}
		if tools[bad.tool].Validate(v) == nil {
			t.Errorf("%s accepted %s", bad.tool, bad.req)
		}
	}
}

// example is one line of docs/examples/requests.jsonl.
type example struct {
	Program string          `json:"program"`
	Tool    string          `json:"tool"`
	Request json.RawMessage `json:"request"`
	// Error, when set, is the documented error code the call must fail with.
	Error string `json:"error"`
	// Expect, when set, lists result fields and their values, for calls
	// that report a failure without an error code (a command that timed out).
	Expect map[string]any `json:"expect"`
	line   int
}

func readExamples(t *testing.T) []example {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "docs/examples/requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []example
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "//") {
			continue
		}
		var e example
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("requests.jsonl:%d: %v", n, err)
		}
		e.line = n
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("requests.jsonl has no examples")
	}
	return out
}

// transcriptCalls reads the tool calls the Python agent loop replays: they
// are example calls too, with arguments as a JSON string as a model emits them.
func transcriptCalls(t *testing.T) []example {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "examples/python/transcript_calls.json"))
	if err != nil {
		t.Fatal(err)
	}
	var calls []struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	if err := json.Unmarshal(b, &calls); err != nil {
		t.Fatal(err)
	}
	var out []example
	for i, c := range calls {
		program, _, _ := strings.Cut(c.Name, "_")
		out = append(out, example{Program: program, Tool: c.Name, Request: json.RawMessage(c.Arguments), line: i + 1})
	}
	return out
}

func validate(t *testing.T, tools map[string]*jsonschema.Schema, where string, e example) {
	t.Helper()
	s, ok := tools[e.Tool]
	if !ok {
		t.Errorf("%s: no tool %q", where, e.Tool)
		return
	}
	if s == nil {
		return // already reported
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(e.Request))
	if err != nil {
		t.Errorf("%s: request is not JSON: %v", where, err)
		return
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("%s: request does not validate against %s: %v", where, e.Tool, err)
	}
}

func TestExampleCallsValidate(t *testing.T) {
	tools := compiledTools(t)
	for _, e := range readExamples(t) {
		validate(t, tools, fmt.Sprintf("docs/examples/requests.jsonl:%d", e.line), e)
	}
	for _, e := range transcriptCalls(t) {
		validate(t, tools, fmt.Sprintf("examples/python/transcript_calls.json call %d", e.line), e)
	}
}

// commandPaths maps each tool name to the subcommand words that run it.
func commandPaths(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for name, p := range programs {
		env := &clikit.Env{Program: p(), In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}}
		for _, tool := range clikit.Tools(clikit.NewRoot(env)) {
			words := strings.Fields(tool.Command.CommandPath())
			if len(words) == 0 || words[0] != name {
				t.Fatalf("tool %s: command path %v", tool.Name, words)
			}
			out[tool.Name] = words[1:]
		}
	}
	return out
}

// buildPrograms builds the three programs once, or uses AGENTPLANE_BIN.
func buildPrograms(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("AGENTPLANE_BIN"); dir != "" {
		return dir
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/", "github.com/agentplane/agentplane/cmd/...")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// TestExampleCallsRun runs every line of requests.jsonl, in order and in
// one environment (later lines use the jobs, sessions and files that
// earlier ones made), through the real program with --request -.
func TestExampleCallsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the programs")
	}
	examples := readExamples(t)
	paths := commandPaths(t)
	bin := buildPrograms(t)
	work, home := t.TempDir(), t.TempDir()
	state := filepath.Join(home, "state")
	environ := append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "AGENTPLANE_STATE_DIR="+state,
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	run := func(program string, stdin []byte, args ...string) (map[string]any, int, string) {
		cmd := exec.Command(filepath.Join(bin, program), args...)
		cmd.Dir, cmd.Env, cmd.Stdin = work, environ, bytes.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", program, err)
		}
		// Streaming operations (events) print NDJSON whose last line is
		// the result; every other line must be JSON too.
		var v map[string]any
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		for _, l := range lines {
			v = nil
			if jerr := json.Unmarshal([]byte(l), &v); jerr != nil {
				t.Fatalf("%s %v: stdout line is not a JSON object: %v\n%s", program, args, jerr, out.String())
			}
		}
		return v, code, errb.String()
	}
	t.Cleanup(func() {
		// Leave nothing running: stop every job and session the examples made.
		if v, _, _ := run("agentjob", nil, "list"); v != nil {
			jobs, _ := v["jobs"].([]any)
			for _, j := range jobs {
				h, _ := j.(map[string]any)["handle"].(string)
				run("agentjob", nil, "stop", h)
			}
		}
		if v, _, _ := run("agentsh", nil, "session", "list"); v != nil {
			ss, _ := v["sessions"].([]any)
			for _, s := range ss {
				h, _ := s.(map[string]any)["session"].(string)
				run("agentsh", nil, "session", "stop", h)
			}
		}
	})
	for _, e := range examples {
		words, ok := paths[e.Tool]
		if !ok {
			t.Errorf("requests.jsonl:%d: no tool %q", e.line, e.Tool)
			continue
		}
		if !strings.HasPrefix(e.Tool, e.Program+"_") {
			t.Errorf("requests.jsonl:%d: tool %s is not %s's", e.line, e.Tool, e.Program)
			continue
		}
		args := append(slices.Clone(words), "--request", "-")
		v, code, stderr := run(e.Program, e.Request, args...)
		where := fmt.Sprintf("requests.jsonl:%d (%s %s)", e.line, e.Program, strings.Join(args, " "))
		if e.Expect != nil {
			for k, want := range e.Expect {
				if fmt.Sprint(v[k]) != fmt.Sprint(want) {
					t.Errorf("%s: %s is %v, want %v\n%v", where, k, v[k], want, v)
				}
			}
			continue
		}
		if e.Error == "" {
			if v["success"] != true || code != 0 {
				t.Errorf("%s: exit %d, want success: %v\nstderr: %s", where, code, v, stderr)
			}
			continue
		}
		errObj, _ := v["error"].(map[string]any)
		if v["success"] != false || errObj["code"] != e.Error || code == 0 {
			t.Errorf("%s: exit %d, %v; want the documented error %s", where, code, v, e.Error)
		}
	}
}
