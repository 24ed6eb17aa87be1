package agentfs

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/files"
	"github.com/agentplane/agentplane/pkg/result"
)

// EditOptions are the flags of agentfs edit.
type EditOptions struct {
	*CommonOptions
	Path         string
	Old          string
	New          string
	ReplaceAll   bool
	ExpectSHA256 string
	Fuzzy        bool
	Edits        string

	hasOld, hasNew bool
}

// editAliases are the argument names other agent tools use for the same
// edit (old_string, new_string), accepted as spellings of --old and --new
// so that a model's tool call passes through unchanged. They are aliases
// of the flags rather than flags of their own, so a request still has one
// meaning per key, unknown keys stay invalid_request, and schemas list
// only old/new. Giving a flag and its alias together is an error.
var editAliases = map[string]string{"old-string": "old", "new-string": "new"}

// NewCmdEdit builds agentfs edit. runF replaces editRun in tests.
func NewCmdEdit(env *clikit.Env, common *CommonOptions, runF func(*EditOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &EditOptions{CommonOptions: common}
	cmd := &cobra.Command{
		Use:   "edit PATH (--old STRING --new STRING | --edits JSON|@FILE)",
		Short: "Replace text in a file, refusing to guess",
		Long: "Replace --old with --new in a text file: old must match exactly once (or use --replace-all), " +
			"else old_string_not_found (with the closest near-miss and its lines as a hint) or " +
			"old_string_not_unique (with the line of every match). Line endings never block a match; " +
			"--fuzzy also accepts a unique match differing only in whitespace and re-indents the new text. " +
			"--edits applies several replacements in order, all or nothing: a JSON array of " +
			"{\"old_string\", \"new_string\", \"replace_all\"?, \"expected_count\"?}, inline or @FILE. " +
			"old_string and new_string are accepted as aliases of old and new (--old-string, --new-string).",
		Args: cobra.MaximumNArgs(1),
		Annotations: map[string]string{
			clikit.AnnotTool:           "agentfs_edit",
			clikit.AnnotToolDoc:        "Replace old with new in a text file. old must match exactly once (or set replace_all), else the call fails with old_string_not_found (with the closest near-miss and its lines) or old_string_not_unique (with the line of every match); it never guesses. Line endings never block a match. fuzzy also accepts a unique match that differs only in whitespace, and indents the new text the way the file is indented. edits applies several replacements in order, all or nothing, instead of old and new. dry_run returns the same result (new_file, diff) without changing the file. expect_sha256 (the sha256 from agentfs_read) refuses to change a file that changed since it was read.",
			clikit.AnnotHints:          clikit.Hints{Destructive: true}.String(),
			clikit.AnnotArgs:           "path",
			clikit.AnnotArgs + ".path": "the file to edit",
		},
	}
	f := cmd.Flags()
	f.Var(&onceString{s: &o.Old, name: "old"}, "old", "the exact text `STRING` to replace")
	f.Var(&onceString{s: &o.New, name: "new"}, "new", "the replacement `STRING`")
	f.BoolVar(&o.ReplaceAll, "replace-all", false, "replace every match instead of requiring exactly one")
	f.StringVar(&o.ExpectSHA256, "expect-sha256", "", "refuse (file_changed) unless the file's sha256 is `HEX`")
	f.BoolVar(&o.Fuzzy, "fuzzy", false, "also accept a unique match that differs only in whitespace or indentation")
	f.Var(editsValue{&o.Edits}, "edits", "several edits as a JSON array, or @FILE holding one")
	_ = f.SetAnnotation("edits", clikit.AnnotJSON, []string{"true"})
	clikit.MarkFlags(f, clikit.FileRef, "edits")
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if n, ok := editAliases[strings.ReplaceAll(name, "_", "-")]; ok {
			return pflag.NormalizedName(n)
		}
		return pflag.NormalizedName(name)
	})
	o.addDryRunFlag(cmd)
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		args, err := env.Positional(cmd, args, 1)
		if err != nil {
			return nil, err
		}
		o.Path = args[0]
		var fileEdits []string
		if strings.HasPrefix(o.Edits, "@") {
			fileEdits = append(fileEdits, "edits")
		}
		if err := o.refuseFileKeys(cmd, env, fileEdits...); err != nil {
			return nil, err
		}
		o.hasOld, o.hasNew = clikit.FlagChanged(cmd, "old"), clikit.FlagChanged(cmd, "new")
		switch {
		case o.Edits != "" && (o.hasOld || o.hasNew || o.ReplaceAll):
			return nil, result.Errorf(result.CodeUsage, "give either --edits or --old/--new/--replace-all, not both")
		case o.Edits == "" && (!o.hasOld || !o.hasNew):
			return nil, result.Errorf(result.CodeUsage, "edit needs --old and --new (or --edits)")
		}
		if runF != nil {
			return runF(o)
		}
		return editRun(env, o)
	})
	return cmd
}

func editRun(env *clikit.Env, o *EditOptions) (*clikit.Outcome, error) {
	edits := []files.EditSpec{{Old: o.Old, New: o.New, ReplaceAll: o.ReplaceAll}}
	if o.Edits != "" {
		var err error
		if edits, err = parseEdits(o.Edits); err != nil {
			return nil, err
		}
	}
	fsys, err := o.engine(env, true)
	if err != nil {
		return nil, err
	}
	m, err := fsys.Edit(o.Path, edits, files.EditOptions{ExpectSHA256: o.ExpectSHA256, Fuzzy: o.Fuzzy})
	if err != nil {
		return nil, err
	}
	return o.mutationOutcome(env, m), nil
}

// editsValue is --edits: JSON text (or @FILE), which a request may give as
// the array itself. Its schema is derived from files.EditSpec, the struct
// parseEdits decodes each edit into, unknown fields refused.
type editsValue struct{ s *string }

func (v editsValue) String() string     { return *v.s }
func (v editsValue) Set(s string) error { *v.s = s; return nil }
func (v editsValue) Type() string       { return "string" }

// editDocs describes each field of files.EditSpec for the schema.
var editDocs = map[string]string{
	"old_string":     "the exact text to replace",
	"new_string":     "the replacement text",
	"replace_all":    "replace every match instead of requiring exactly one",
	"expected_count": "the number of matches expected; any other number fails with count_mismatch, and that many are replaced",
}

// RequestSchema is the array of edits. The request also takes the array as
// JSON text (the flag's form), but the schema offers one shape: an anyOf
// whose branch has optional properties is what strict converters (OpenAI's
// agents SDK for MCP tools) cannot normalise.
func (v editsValue) RequestSchema() map[string]any {
	return map[string]any{
		"type": "array", "description": "several edits applied in order, all or nothing, instead of old and new",
		"items": clikit.StructSchema(files.EditSpec{}, editDocs),
	}
}

// parseEdits reads --edits: a JSON array of edits, inline or from @FILE.
// Unknown keys in an edit are refused like unknown request keys.
func parseEdits(s string) ([]files.EditSpec, error) {
	data := []byte(s)
	if name, ok := strings.CutPrefix(s, "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, result.Errorf(result.CodeUsage, "cannot read --edits file %s: %v", name, unwrapPathError(err))
		}
		data = b
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var edits []files.EditSpec
	if err := dec.Decode(&edits); err != nil {
		return nil, result.Errorf(result.CodeInvalidRequest, "--edits must be a JSON array of {old_string, new_string, replace_all, expected_count}: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, result.Errorf(result.CodeInvalidRequest, "--edits has data after its JSON array")
	}
	if len(edits) == 0 {
		return nil, result.Errorf(result.CodeInvalidRequest, "--edits is an empty list")
	}
	return edits, nil
}
