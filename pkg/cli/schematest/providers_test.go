package schematest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/mcpserver"
)

// The rules below are the providers' published limits on tool schemas,
// checked node by node. scripts/test-examples also loads the same output
// into the providers' own SDK converters (npm); these checks need nothing
// but Go and say exactly which node breaks which rule.

// openAIStrictKeywords are the keywords OpenAI's structured outputs accept
// in strict mode that this generator may use (the published list also has
// pattern, format, minimum and friends, which it never emits).
var openAIStrictKeywords = []string{"type", "description", "properties", "required", "additionalProperties", "items", "anyOf", "enum"}

// checkOpenAIStrict reports where s breaks OpenAI's strict mode: every
// object closed, with every property required; optional values nullable
// through a type array or an anyOf branch; no keyword outside the list;
// arrays with items; no anyOf at the root.
func checkOpenAIStrict(path string, s map[string]any, root bool) []string {
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, path+": "+fmt.Sprintf(format, args...)) }
	for k := range s {
		if !slices.Contains(openAIStrictKeywords, k) {
			fail("keyword %q is not supported in strict mode", k)
		}
	}
	if _, ok := s["anyOf"]; ok && root {
		fail("the root may not be an anyOf")
	}
	types := typeList(s["type"])
	if _, ok := s["anyOf"]; !ok && len(types) == 0 {
		fail("no type")
	}
	if len(types) > 2 || (len(types) == 2 && !slices.Contains(types, "null")) {
		fail("type %v: a type array may only add null", types)
	}
	if slices.Contains(types, "object") {
		props, _ := s["properties"].(map[string]any)
		if props == nil {
			fail("an object without properties")
		}
		if s["additionalProperties"] != false {
			fail("additionalProperties is %v, want false", s["additionalProperties"])
		}
		var keys []string
		for k := range props {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		req := stringsOf(s["required"])
		sort.Strings(req)
		if !slices.Equal(keys, req) {
			fail("required %v, want every property %v", req, keys)
		}
		for _, k := range keys {
			bad = append(bad, checkOpenAIStrict(path+"."+k, props[k].(map[string]any), false)...)
		}
	}
	if slices.Contains(types, "array") {
		items, _ := s["items"].(map[string]any)
		if items == nil {
			fail("an array without items")
		} else {
			bad = append(bad, checkOpenAIStrict(path+"[]", items, false)...)
		}
	}
	if e, ok := s["enum"].([]any); ok && slices.Contains(types, "null") && !slices.Contains(e, any(nil)) {
		fail("a nullable enum without null among its values")
	}
	if branches, ok := s["anyOf"].([]any); ok {
		if len(branches) < 2 {
			fail("an anyOf of %d branches", len(branches))
		}
		for i, b := range branches {
			bad = append(bad, checkOpenAIStrict(fmt.Sprintf("%s|%d", path, i), b.(map[string]any), false)...)
		}
	}
	return bad
}

// geminiKeywords are the fields of Gemini's Schema type (an OpenAPI 3.0
// subset) this generator may use.
var geminiKeywords = []string{"type", "description", "properties", "required", "items", "anyOf", "enum", "nullable", "format"}

var geminiTypes = []string{"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT"}

// checkGemini reports where s breaks Gemini's function declarations: upper
// case single types, no additionalProperties, no ARRAY without items, no
// OBJECT without properties, anyOf branches that are complete schemas (a
// type each, nothing typed beside the anyOf), required keys that exist.
func checkGemini(path string, s map[string]any) []string {
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, path+": "+fmt.Sprintf(format, args...)) }
	for k := range s {
		if !slices.Contains(geminiKeywords, k) {
			fail("field %q is not in Gemini's Schema", k)
		}
	}
	t, isString := s["type"].(string)
	if branches, ok := s["anyOf"].([]any); ok {
		if _, typed := s["type"]; typed {
			fail("a type beside anyOf")
		}
		for _, k := range []string{"items", "properties", "enum"} {
			if _, ok := s[k]; ok {
				fail("%s beside anyOf", k)
			}
		}
		for i, b := range branches {
			bm := b.(map[string]any)
			if _, ok := bm["type"].(string); !ok {
				fail("anyOf branch %d has no type", i)
			}
			bad = append(bad, checkGemini(fmt.Sprintf("%s|%d", path, i), bm)...)
		}
		return bad
	}
	if !isString || !slices.Contains(geminiTypes, t) {
		fail("type %v is not one of %v", s["type"], geminiTypes)
	}
	switch t {
	case "ARRAY":
		items, _ := s["items"].(map[string]any)
		if items == nil {
			fail("an ARRAY without items")
		} else {
			bad = append(bad, checkGemini(path+"[]", items)...)
		}
	case "OBJECT":
		props, _ := s["properties"].(map[string]any)
		if len(props) == 0 {
			fail("an OBJECT without properties")
		}
		for _, r := range stringsOf(s["required"]) {
			if _, ok := props[r]; !ok {
				fail("required %q is not a property", r)
			}
		}
		for k, p := range props {
			bad = append(bad, checkGemini(path+"."+k, p.(map[string]any))...)
		}
	}
	if _, ok := s["enum"]; ok && t != "STRING" {
		fail("enum on %s", t)
	}
	return bad
}

// checkClosed reports where a canonical (MCP, Anthropic, JSON Schema)
// schema leaves an object open, a map open-ended, an array untyped or a
// value with two types in a type array instead of an anyOf.
func checkClosed(path string, s map[string]any) []string {
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, path+": "+fmt.Sprintf(format, args...)) }
	if _, ok := s["type"].([]any); ok {
		fail("a type array; two shapes are an anyOf of complete schemas")
	}
	if branches, ok := s["anyOf"].([]any); ok {
		for i, b := range branches {
			if _, typed := b.(map[string]any)["type"].(string); !typed {
				fail("anyOf branch %d has no type", i)
			}
			bad = append(bad, checkClosed(fmt.Sprintf("%s|%d", path, i), b.(map[string]any))...)
		}
	}
	switch s["type"] {
	case "object":
		props, _ := s["properties"].(map[string]any)
		if len(props) == 0 || s["additionalProperties"] != false {
			fail("an open object (properties %d, additionalProperties %v)", len(props), s["additionalProperties"])
		}
		for k, p := range props {
			bad = append(bad, checkClosed(path+"."+k, p.(map[string]any))...)
		}
	case "array":
		items, _ := s["items"].(map[string]any)
		if items == nil {
			fail("an array without items")
		} else {
			bad = append(bad, checkClosed(path+"[]", items)...)
		}
	}
	return bad
}

func typeList(v any) []string {
	switch t := v.(type) {
	case string:
		return []string{t}
	case []any:
		return stringsOf(t)
	}
	return nil
}

func stringsOf(v any) []string {
	var out []string
	switch t := v.(type) {
	case []any:
		for _, x := range t {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	case []string:
		out = append(out, t...)
	}
	return out
}

func TestSchemasFollowProviderRules(t *testing.T) {
	for program := range programs {
		v, _ := runInProcess(t, program, "schema", "--format", clikit.FormatOpenAI)
		for _, raw := range v["tools"].([]any) {
			fn := raw.(map[string]any)["function"].(map[string]any)
			if fn["strict"] != true {
				t.Errorf("openai %s: strict is %v, want true", fn["name"], fn["strict"])
			}
			for _, e := range checkOpenAIStrict(fmt.Sprint(fn["name"]), fn["parameters"].(map[string]any), true) {
				t.Errorf("openai strict: %s", e)
			}
		}
		for name, s := range toolSchemas(t, program, clikit.FormatGemini) {
			for _, e := range checkGemini(name, s.(map[string]any)) {
				t.Errorf("gemini: %s", e)
			}
		}
		for _, format := range []string{clikit.FormatMCP, clikit.FormatAnthropic, clikit.FormatJSONSchema} {
			for name, s := range toolSchemas(t, program, format) {
				for _, e := range checkClosed(name, s.(map[string]any)) {
					t.Errorf("%s: %s", format, e)
				}
			}
		}
	}
}

// TestProviderRulesCanFail feeds the checks the shapes the providers
// rejected before (an open env map, an untyped edits value, a type array
// beside items) to make sure they are caught.
func TestProviderRulesCanFail(t *testing.T) {
	var openEnv, typeArray map[string]any
	_ = json.Unmarshal([]byte(`{"type":"object","additionalProperties":false,"required":["env"],"properties":{"env":{"type":"object","additionalProperties":{"type":"string"}}}}`), &openEnv)
	_ = json.Unmarshal([]byte(`{"type":"object","additionalProperties":false,"properties":{"command":{"type":["string","array"],"items":{"type":"string"}}}}`), &typeArray)
	if len(checkOpenAIStrict("env", openEnv, true)) == 0 {
		t.Error("strict check accepted an open map")
	}
	if len(checkOpenAIStrict("command", typeArray, true)) == 0 {
		t.Error("strict check accepted an optional key and a two-type array")
	}
	if len(checkClosed("env", openEnv)) == 0 || len(checkClosed("command", typeArray)) == 0 {
		t.Error("closed check accepted an open map or a type array")
	}
	gem := clikit.GeminiSchema(map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "array"}}})
	if len(checkGemini("x", gem)) == 0 {
		t.Error("gemini check accepted an ARRAY without items")
	}
	if len(checkGemini("o", map[string]any{"type": "OBJECT"})) == 0 {
		t.Error("gemini check accepted an OBJECT without properties")
	}
}

// flagMention finds CLI syntax in text meant for a model.
var flagMention = regexp.MustCompile(`(^|[\s(,'"])(--[a-z][a-z0-9-]*|-[a-zA-Z]\b)`)

// TestDescriptionsSpeakOfArguments: tool and argument descriptions name
// arguments, never CLI flags (a model calling a tool has no flags).
func TestDescriptionsSpeakOfArguments(t *testing.T) {
	var walk func(where string, s map[string]any)
	walk = func(where string, s map[string]any) {
		if d, _ := s["description"].(string); flagMention.MatchString(d) {
			t.Errorf("%s: description mentions a flag (%q): %s", where, flagMention.FindString(d), d)
		}
		if props, ok := s["properties"].(map[string]any); ok {
			for k, p := range props {
				walk(where+"."+k, p.(map[string]any))
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			walk(where+"[]", items)
		}
		if br, ok := s["anyOf"].([]any); ok {
			for i, b := range br {
				walk(fmt.Sprintf("%s|%d", where, i), b.(map[string]any))
			}
		}
	}
	for program := range programs {
		v, _ := runInProcess(t, program, "schema", "--format", clikit.FormatMCP)
		for _, raw := range v["tools"].([]any) {
			tool := raw.(map[string]any)
			name := fmt.Sprint(tool["name"])
			if d := fmt.Sprint(tool["description"]); flagMention.MatchString(d) || strings.Contains(d, "exit status") {
				t.Errorf("%s: tool description speaks of the CLI (%q): %s", name, flagMention.FindString(d), d)
			}
			walk(name, tool["inputSchema"].(map[string]any))
			ann, _ := tool["annotations"].(map[string]any)
			for _, k := range []string{"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"} {
				if _, ok := ann[k].(bool); !ok {
					t.Errorf("%s: annotation %s is %v, want a boolean", name, k, ann[k])
				}
			}
		}
	}
}

// TestServedDescriptionsNameServedArguments: over MCP the server removes
// the operator's and its own keys from each tool; no description the host
// shows may tell the model to use one of them.
func TestServedDescriptionsNameServedArguments(t *testing.T) {
	for name, p := range programs {
		set, err := mcpserver.Describe(p(), mcpserver.DescribeOptions{Executable: "/bin/" + name})
		if err != nil {
			t.Fatal(err)
		}
		env := &clikit.Env{Program: p(), In: strings.NewReader(""), Out: &strings.Builder{}, Err: &strings.Builder{}}
		all := map[string]map[string]any{}
		for _, tool := range clikit.Tools(clikit.NewRoot(env)) {
			all[tool.Name] = tool.Schema["properties"].(map[string]any)
		}
		for _, spec := range set.Tools {
			served := spec.InputSchema["properties"].(map[string]any)
			texts := []string{spec.Description}
			for _, prop := range served {
				if d, ok := prop.(map[string]any)["description"].(string); ok {
					texts = append(texts, d)
				}
			}
			for key := range all[spec.Name] {
				// Single words such as stream or memory are ordinary
				// English in a description; the ones checked are names.
				if _, ok := served[key]; ok || !strings.Contains(key, "_") && !slices.Contains([]string{"follow", "tee", "sandbox", "policy", "approved", "workspace"}, key) {
					continue
				}
				word := regexp.MustCompile(`(^|[^\w])` + regexp.QuoteMeta(key) + `($|[^\w])`)
				for _, text := range texts {
					if word.MatchString(text) {
						t.Errorf("%s: a description names %q, which the MCP server does not offer: %s", spec.Name, key, text)
					}
				}
			}
		}
	}
}
