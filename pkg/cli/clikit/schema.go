package clikit

import (
	"sort"
	"strings"

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
)

// Tool is one operation as a function-calling definition.
type Tool struct {
	Name        string
	Description string
	Schema      map[string]any // JSON Schema of the request object
	Command     *cobra.Command
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
			out = append(out, Tool{Name: name, Description: toolDescription(c), Schema: RequestSchema(c), Command: c})
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return out
}

func toolDescription(c *cobra.Command) string {
	d := strings.TrimSpace(c.Short)
	if c.Long != "" {
		d = strings.TrimSpace(c.Long)
	}
	return d
}

// RequestSchema builds the JSON Schema of a command's request object.
func RequestSchema(c *cobra.Command) map[string]any {
	props := map[string]any{}
	var required []string
	names, variadic := ArgNames(c)
	for i, n := range names {
		p := map[string]any{"type": "string"}
		if variadic && i == len(names)-1 {
			p = map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
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
		p := flagSchema(f)
		if variadic && f.Value.Type() == "string" && !hasAnnot(f, AnnotJSON) && f.Name == "command" {
			p = map[string]any{
				"type":        []any{"string", "array"},
				"items":       map[string]any{"type": "string"},
				"description": usageText(f) + " (a string runs through the shell; an array is an argv run directly)",
			}
		}
		props[key] = p
		if hasAnnot(f, AnnotRequired) {
			required = append(required, key)
		}
	})
	props["description"] = map[string]any{"type": "string", "description": "the human-readable intent of this call, shown in approval prompts and audit logs"}
	s := map[string]any{
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
	if len(required) > 0 {
		sort.Strings(required)
		s["required"] = required
	}
	return s
}

func flagSchema(f *pflag.Flag) map[string]any {
	p := map[string]any{}
	// pflag marks the argument name with backticks (`DIR`); a schema
	// reader wants plain text.
	_, desc := pflag.UnquoteUsage(f)
	switch t := f.Value.Type(); t {
	case "bool":
		p["type"] = "boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "count":
		p["type"] = "integer"
	case "float32", "float64":
		p["type"] = "number"
	case "duration":
		p["type"] = []any{"number", "string"}
		desc += " (seconds, or Go syntax such as \"90s\" or \"2m\")"
	case "size":
		p["type"] = []any{"integer", "string"}
		desc += " (bytes, or with a K/M/G suffix such as \"64M\")"
	case "enum":
		p["type"] = "string"
		if ev, ok := f.Value.(EnumValue); ok {
			p["enum"] = append([]string(nil), ev.Allowed...)
		}
	case "stringArray", "stringSlice":
		if hasAnnot(f, AnnotObject) {
			p["type"] = "object"
			p["additionalProperties"] = map[string]any{"type": "string"}
		} else {
			p["type"] = "array"
			p["items"] = map[string]any{"type": "string"}
		}
	default:
		if hasAnnot(f, AnnotJSON) {
			p["type"] = []any{"array", "object", "string"}
		} else {
			p["type"] = "string"
		}
	}
	// A usage that states its own default ("(default all)") knows better
	// than the zero value pflag records.
	if f.DefValue != "" && f.DefValue != "[]" && f.Value.Type() != "bool" && !strings.Contains(f.Usage, "(default") {
		desc += " (default " + f.DefValue + ")"
	}
	p["description"] = desc
	return p
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
					"name": t.Name, "description": t.Description, "parameters": t.Schema,
				},
			})
		case FormatAnthropic:
			out = append(out, map[string]any{"name": t.Name, "description": t.Description, "input_schema": t.Schema})
		case FormatMCP:
			out = append(out, map[string]any{"name": t.Name, "description": t.Description, "inputSchema": t.Schema})
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
			"argument names that --request accepts, for OpenAI, Anthropic, MCP or plain JSON Schema.",
		Args: cobra.NoArgs,
		Example: "  " + env.Program.Name + " schema --format openai > tools.json\n  " +
			env.Program.Name + " schema --format mcp -q 'tools.#.name'",
		Annotations: map[string]string{AnnotManResult: "program, format: the program and the dialect\n" +
			"tools: the function definitions, with the same argument names --request accepts"},
	}
	cmd.Flags().Var(EnumValue{S: &format, Allowed: []string{FormatOpenAI, FormatAnthropic, FormatMCP, FormatJSONSchema}}, "format", "schema dialect: openai, anthropic, mcp or jsonschema")
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*Outcome, error) {
		tools := Tools(root)
		return &Outcome{Value: result.New().
			Set("success", true).
			Set("program", env.Program.Name).
			Set("format", format).
			Set("tools", RenderTools(tools, format))}, nil
	})
	root.AddCommand(cmd)
}

func usageText(f *pflag.Flag) string {
	_, u := pflag.UnquoteUsage(f)
	return u
}
