package clikit

import (
	"testing"

	"github.com/spf13/cobra"
)

func TestHintsDeclaredInFull(t *testing.T) {
	for _, h := range []Hints{{}, {ReadOnly: true, Idempotent: true}, {Destructive: true, OpenWorld: true}, {true, true, true, true}} {
		got, err := ParseHints(h.String())
		if err != nil || got != h {
			t.Errorf("%+v: round trip gave %+v, %v", h, got, err)
		}
	}
	for _, bad := range []string{"", "read-only destructive idempotent", "read-only no-destructive idempotent open-world sideways",
		"read-only read-only no-destructive idempotent open-world", "readonly no-destructive idempotent open-world"} {
		if _, err := ParseHints(bad); err == nil {
			t.Errorf("ParseHints(%q) accepted a declaration that does not say all four", bad)
		}
	}
	// A read-only tool is never reported destructive, whatever was declared.
	if m := (Hints{ReadOnly: true, Destructive: true}).MCP(); m["destructiveHint"] != false || m["readOnlyHint"] != true {
		t.Errorf("MCP() = %v", m)
	}
}

func TestArgumentText(t *testing.T) {
	c := &cobra.Command{Use: "x"}
	c.Flags().StringP("command", "c", "", "")
	c.Flags().Bool("since-last", false, "")
	c.Flags().Bool("pretty", false, "")
	_ = c.Flags().SetAnnotation("pretty", AnnotNoRequest, []string{"true"})
	for in, want := range map[string]string{
		"with --since-last, read -c's output": "with since_last, read command's output",
		"(--since-last)":                      "(since_last)",
		"--pretty and --nope stay":            "--pretty and --nope stay", // not request keys: left for the tests to find
		"a well-known name, x-y":              "a well-known name, x-y",
	} {
		if got := ArgumentText(c, in); got != want {
			t.Errorf("ArgumentText(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStrictAndGeminiDialects(t *testing.T) {
	s := ObjectSchema(map[string]any{
		"path": map[string]any{"type": "string"},
		"mode": map[string]any{"type": "string", "enum": []string{"a", "b"}},
		"wait": map[string]any{"anyOf": []any{map[string]any{"type": "number"}, map[string]any{"type": "string"}}},
		"list": map[string]any{"type": "array", "items": ObjectSchema(map[string]any{"x": map[string]any{"type": "integer"}}, nil)},
	}, []string{"path"})
	st := StrictSchema(s)
	if r := st["required"].([]string); len(r) != 4 {
		t.Errorf("strict required %v", r)
	}
	props := st["properties"].(map[string]any)
	if tp := props["path"].(map[string]any)["type"]; tp != "string" {
		t.Errorf("a required key became nullable: %v", tp)
	}
	if e := props["mode"].(map[string]any)["enum"].([]any); len(e) != 3 || e[2] != nil {
		t.Errorf("nullable enum %v", e)
	}
	if br := props["wait"].(map[string]any)["anyOf"].([]any); len(br) != 3 {
		t.Errorf("nullable anyOf %v", br)
	}
	item := props["list"].(map[string]any)["items"].(map[string]any)
	if r := item["required"].([]string); len(r) != 1 || item["properties"].(map[string]any)["x"].(map[string]any)["type"].([]any)[1] != "null" {
		t.Errorf("nested object not strict: %v", item)
	}
	// The canonical schema is left as it was.
	if _, ok := s["properties"].(map[string]any)["mode"].(map[string]any)["enum"].([]string); !ok {
		t.Error("StrictSchema changed its input")
	}
	g := GeminiSchema(s)
	if g["type"] != "OBJECT" || g["additionalProperties"] != nil {
		t.Errorf("gemini %v", g)
	}
	defer func() {
		if recover() == nil {
			t.Error("GeminiSchema rendered a keyword it has no rule for")
		}
	}()
	GeminiSchema(map[string]any{"type": "string", "pattern": "x"})
}
