package clikit

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentplane/agentplane/pkg/result"
)

// Schema formats.
const (
	FormatOpenAI     = "openai"
	FormatAnthropic  = "anthropic"
	FormatMCP        = "mcp"
	FormatJSONSchema = "jsonschema"
	FormatGemini     = "gemini"
)

// Formats lists the schema dialects, in the order help text names them.
var Formats = []string{FormatOpenAI, FormatAnthropic, FormatMCP, FormatJSONSchema, FormatGemini}

// Tool is one operation as a function-calling definition.
type Tool struct {
	Name        string
	Description string
	// Schema is the canonical JSON Schema of the request object (see
	// RequestSchema); the dialects are derived from it.
	Schema  map[string]any
	Hints   *Hints // nil when the command declares none
	Command *cobra.Command
}

// Tools walks a command tree and returns the operations annotated with a
// tool name, with the JSON Schema of the request each one accepts. The
// schema is derived from the same flags that applyRequest uses, so the two
// cannot disagree.
func Tools(root *cobra.Command) []Tool {
	var out []Tool
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if name := c.Annotations[AnnotTool]; name != "" {
			t := Tool{Name: name, Description: toolDescription(c), Schema: RequestSchema(c), Command: c}
			if h, err := ParseHints(c.Annotations[AnnotHints]); err == nil {
				t.Hints = &h
			}
			out = append(out, t)
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return out
}

// toolDescription is the description a model reads: the command's
// AnnotToolDoc, written for a model about its own arguments, else its
// help text with flag names turned into argument names.
func toolDescription(c *cobra.Command) string {
	if d := c.Annotations[AnnotToolDoc]; d != "" {
		return strings.TrimSpace(d)
	}
	d := strings.TrimSpace(c.Short)
	if c.Long != "" {
		d = strings.TrimSpace(c.Long)
	}
	return ArgumentText(c, d)
}

// flagRef finds a flag as help text names it: --long-name, or -c. It is
// compiled when first used (schemas and help), not at every start.
var flagRef = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(^|[^\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])\b`)
})

// ArgumentText rewrites help text for a model: every flag of c that is a
// request key is named by its key ("--since-last" becomes "since_last",
// "-c" the key of the flag it abbreviates). Other mentions are left as they
// are, for the schema tests to find.
func ArgumentText(c *cobra.Command, s string) string {
	return flagRef().ReplaceAllStringFunc(s, func(m string) string {
		sub := flagRef().FindStringSubmatch(m)
		prefix, ref := sub[1], sub[2]
		var f *pflag.Flag
		if strings.HasPrefix(ref, "--") {
			f = c.Flags().Lookup(strings.TrimPrefix(ref, "--"))
		} else {
			f = c.Flags().ShorthandLookup(strings.TrimPrefix(ref, "-"))
		}
		if f == nil || f.Hidden || hasAnnot(f, AnnotNoRequest) {
			return m
		}
		return prefix + ConfigKey(f.Name)
	})
}

// SchemaValue is a flag value that knows the JSON Schema of what a request
// gives it (a structured value such as agentfs edit's edits). The schema is
// declared on the value that parses it, so the two cannot drift.
type SchemaValue interface {
	RequestSchema() map[string]any
}

// RequestSchema builds the canonical JSON Schema of a command's request
// object, from which every dialect is derived. It holds itself to the
// intersection of what the providers accept: every object has properties
// and additionalProperties false, every array has items, there are no open
// maps (K=V pairs are arrays of strings) and no type arrays, and a value
// with two shapes is an anyOf of complete schemas. Optional keys are left
// out of required; the OpenAI dialect makes them required and nullable.
func RequestSchema(c *cobra.Command) map[string]any {
	props := map[string]any{}
	var required []string
	names, variadic := ArgNames(c)
	for i, n := range names {
		p := map[string]any{"type": "string"}
		if variadic && i == len(names)-1 {
			p = stringArray()
		} else {
			required = append(required, n)
		}
		if d := c.Annotations[AnnotArgs+"."+n]; d != "" {
			p["description"] = d
		}
		props[n] = p
	}
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || hasAnnot(f, AnnotNoRequest) {
			return
		}
		key := ConfigKey(f.Name)
		p := flagSchema(c, f)
		if variadic && f.Value.Type() == "string" && !hasAnnot(f, AnnotJSON) && f.Name == "command" {
			p = map[string]any{
				"description": "the command: a shell command line, run by bash (else sh), or an array, a program and its arguments run directly without a shell",
				"anyOf": []any{
					map[string]any{"type": "string", "description": "a shell command line"},
					map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": "a program and its arguments"},
				},
			}
		}
		props[key] = p
		if hasAnnot(f, AnnotRequired) {
			required = append(required, key)
		}
	})
	props["description"] = map[string]any{"type": "string", "description": "the human-readable intent of this call, shown in approval prompts and audit logs"}
	return ObjectSchema(props, required)
}

// ObjectSchema is a closed object schema with the given properties.
func ObjectSchema(props map[string]any, required []string) map[string]any {
	s := map[string]any{
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
	if len(required) > 0 {
		required = append([]string(nil), required...)
		sort.Strings(required)
		s["required"] = required
	}
	return s
}

func stringArray() map[string]any {
	return map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
}

func flagSchema(c *cobra.Command, f *pflag.Flag) map[string]any {
	p := map[string]any{}
	// pflag marks the argument name with backticks (`DIR`); a schema
	// reader wants plain text.
	_, desc := pflag.UnquoteUsage(f)
	// An array says it takes several values; "repeatable" is the flag's.
	desc = ArgumentText(c, strings.Replace(desc, " (repeatable)", "", 1))
	switch t := f.Value.Type(); t {
	case "bool":
		p["type"] = "boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "count":
		p["type"] = "integer"
	case "float32", "float64":
		p["type"] = "number"
	case "duration":
		p["anyOf"] = []any{
			map[string]any{"type": "number", "description": "seconds"},
			map[string]any{"type": "string", "description": "a duration such as \"90s\" or \"2m\""},
		}
	case "size":
		p["anyOf"] = []any{
			map[string]any{"type": "integer", "description": "bytes"},
			map[string]any{"type": "string", "description": "a size with a K, M or G suffix, such as \"64M\""},
		}
	case "enum":
		p["type"] = "string"
		if ev, ok := f.Value.(EnumValue); ok {
			// The empty word means "unset"; a caller leaves the key out.
			var allowed []string
			for _, a := range ev.Allowed {
				if a != "" {
					allowed = append(allowed, a)
				}
			}
			p["enum"] = allowed
		}
	case "stringArray", "stringSlice":
		p = stringArray()
		if hasAnnot(f, AnnotObject) {
			p["items"] = map[string]any{"type": "string", "description": "KEY=VALUE"}
			desc += ", each as \"KEY=VALUE\""
		}
	default:
		if sv, ok := f.Value.(SchemaValue); ok {
			for k, v := range sv.RequestSchema() {
				p[k] = v
			}
		} else {
			p["type"] = "string"
		}
	}
	// A usage that states its own default ("(default all)") knows better
	// than the zero value pflag records.
	if def := f.DefValue; def != "" && def != "[]" && def != "0" && def != "0s" && f.Value.Type() != "bool" && !strings.Contains(f.Usage, "(default") {
		desc += " (default " + def + ")"
	}
	if _, own := p["description"]; !own {
		p["description"] = desc
	}
	return p
}

// StrictSchema is the OpenAI strict-mode form of a canonical schema: every
// property of every object is required, and a property that was optional
// accepts null, which the request parser reads as "not given".
func StrictSchema(s map[string]any) map[string]any { return strictNode(s, false) }

func strictNode(s map[string]any, nullable bool) map[string]any {
	out := make(map[string]any, len(s)+1)
	for k, v := range s {
		out[k] = v
	}
	if props, ok := s["properties"].(map[string]any); ok {
		req := map[string]bool{}
		for _, r := range requiredOf(s) {
			req[r] = true
		}
		np := make(map[string]any, len(props))
		keys := make([]string, 0, len(props))
		for k, v := range props {
			np[k] = strictNode(v.(map[string]any), !req[k])
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out["properties"] = np
		out["required"] = keys
		out["additionalProperties"] = false
	}
	if items, ok := s["items"].(map[string]any); ok {
		out["items"] = strictNode(items, false)
	}
	if branches, ok := s["anyOf"].([]any); ok {
		nb := make([]any, 0, len(branches)+1)
		for _, b := range branches {
			nb = append(nb, strictNode(b.(map[string]any), false))
		}
		if nullable {
			nb = append(nb, map[string]any{"type": "null"})
		}
		out["anyOf"] = nb
		return out
	}
	if nullable {
		if t, ok := s["type"].(string); ok {
			out["type"] = []any{t, "null"}
		}
		switch e := s["enum"].(type) {
		case []string:
			ne := make([]any, 0, len(e)+1)
			for _, w := range e {
				ne = append(ne, w)
			}
			out["enum"] = append(ne, nil)
		case []any:
			out["enum"] = append(append([]any(nil), e...), nil)
		}
	}
	return out
}

func requiredOf(s map[string]any) []string {
	switch r := s["required"].(type) {
	case []string:
		return r
	case []any:
		out := make([]string, 0, len(r))
		for _, x := range r {
			if str, ok := x.(string); ok {
				out = append(out, str)
			}
		}
		return out
	}
	return nil
}

// GeminiSchema is the Gemini function-declaration form of a canonical
// schema: the OpenAPI 3.0 subset Gemini's Schema type accepts, with upper
// case type names and no additionalProperties (Gemini objects are closed).
func GeminiSchema(s map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range s {
		switch k {
		case "type":
			out["type"] = strings.ToUpper(v.(string))
		case "properties":
			props := v.(map[string]any)
			np := make(map[string]any, len(props))
			for pk, pv := range props {
				np[pk] = GeminiSchema(pv.(map[string]any))
			}
			out["properties"] = np
		case "items":
			out["items"] = GeminiSchema(v.(map[string]any))
		case "anyOf":
			var nb []any
			for _, b := range v.([]any) {
				nb = append(nb, GeminiSchema(b.(map[string]any)))
			}
			out["anyOf"] = nb
		case "description", "enum", "required":
			out[k] = v
		case "additionalProperties":
			// Gemini's Schema has no such field: its objects take only
			// the properties they declare.
		default:
			panic(fmt.Sprintf("clikit: the gemini dialect has no rendering for %q", k))
		}
	}
	return out
}

// RenderTools formats tools for a function-calling API.
func RenderTools(tools []Tool, format string) []any {
	out := make([]any, 0, len(tools))
	for _, t := range tools {
		switch format {
		case FormatOpenAI:
			out = append(out, map[string]any{
				"type": "function",
				"function": map[string]any{
					"name": t.Name, "description": t.Description, "parameters": StrictSchema(t.Schema), "strict": true,
				},
			})
		case FormatAnthropic:
			out = append(out, map[string]any{"name": t.Name, "description": t.Description, "input_schema": t.Schema})
		case FormatMCP:
			m := map[string]any{"name": t.Name, "description": t.Description, "inputSchema": t.Schema}
			if t.Hints != nil {
				m["annotations"] = t.Hints.MCP()
			}
			out = append(out, m)
		case FormatGemini:
			out = append(out, map[string]any{"name": t.Name, "description": t.Description, "parameters": GeminiSchema(t.Schema)})
		default:
			s := map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema", "title": t.Name, "description": t.Description}
			for k, v := range t.Schema {
				s[k] = v
			}
			out = append(out, s)
		}
	}
	return out
}

func addSchemaCmd(root *cobra.Command, env *Env) {
	format := FormatJSONSchema
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Print the function-calling definitions of this program's operations",
		Long: "Print the function-calling definitions of this program's operations, with the same " +
			"argument names that --request accepts: for OpenAI (function calling with strict: true: every " +
			"argument required, optional ones nullable, null meaning not given), Anthropic (input_schema), " +
			"MCP (inputSchema and tool annotations), Gemini (function declarations, an OpenAPI subset) or " +
			"plain JSON Schema. Every object is closed (additionalProperties false); K=V settings such as " +
			"env are arrays of \"K=V\" strings; a value with two shapes is an anyOf of complete schemas.",
		Args: cobra.NoArgs,
		Example: "  " + env.Program.Name + " schema --format openai > tools.json\n  " +
			env.Program.Name + " schema --format mcp -q 'tools.#.name'",
		Annotations: map[string]string{AnnotManResult: "program, format: the program and the dialect\n" +
			"tools: the function definitions, with the same argument names --request accepts"},
	}
	cmd.Flags().Var(EnumValue{S: &format, Allowed: Formats}, "format", "schema dialect: openai, anthropic, mcp, jsonschema or gemini")
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*Outcome, error) {
		env.fillHelpText()
		tools := Tools(root)
		return &Outcome{Value: result.New().
			Set("success", true).
			Set("program", env.Program.Name).
			Set("format", format).
			Set("tools", RenderTools(tools, format))}, nil
	})
	root.AddCommand(cmd)
}

// StructSchema is the closed object schema of a struct that a request
// value is decoded into (with DisallowUnknownFields): one property per
// JSON field, required unless the field is omitempty, typed from the Go
// field. docs describes each field by its JSON name; a field without one
// is a programming error.
func StructSchema(v any, docs map[string]string) map[string]any {
	t := reflect.TypeOf(v)
	props := map[string]any{}
	var required []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		var typ string
		switch ft.Kind() {
		case reflect.Bool:
			typ = "boolean"
		case reflect.String:
			typ = "string"
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			typ = "integer"
		case reflect.Float32, reflect.Float64:
			typ = "number"
		default:
			panic(fmt.Sprintf("clikit: StructSchema: field %s of %s has no schema type", f.Name, t))
		}
		doc, ok := docs[name]
		if !ok {
			panic(fmt.Sprintf("clikit: StructSchema: field %q of %s is not described", name, t))
		}
		props[name] = map[string]any{"type": typ, "description": doc}
		if !strings.Contains(opts, "omitempty") && f.Type.Kind() != reflect.Pointer {
			required = append(required, name)
		}
	}
	return ObjectSchema(props, required)
}
