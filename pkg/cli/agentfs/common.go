package agentfs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/fsflags"
	"github.com/agentplane/agentplane/pkg/cli/sandboxflags"
	"github.com/agentplane/agentplane/pkg/files"
	"github.com/agentplane/agentplane/pkg/result"
)

// Output modes of --output.
const (
	OutputFull = "full"
	OutputDiff = "diff"
	OutputNone = "none"
)

// CommonOptions are the flags every verb shares (persistent on the root).
type CommonOptions struct {
	// rules are the sandbox_lock floor's file rules (fileRules), once
	// read.
	rules *sandboxflags.FileRules
	// fsys is the engine of the call (engine), whose Recovered the result
	// reports.
	fsys *files.FS
	fsflags.Boundary
	Output     string
	MaxContent int64
	StateDir   string
	// DryRun is --dry-run of write, edit, insert and undo: the same result
	// without touching the file (files.FS.DryRun).
	DryRun bool
}

// addDryRunFlag gives a mutating verb --dry-run.
func (c *CommonOptions) addDryRunFlag(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&c.DryRun, "dry-run", false, "report the same result (texts, diff, hashes) without changing the file or its undo history")
}

func addCommonFlags(root *cobra.Command, env *clikit.Env) *CommonOptions {
	c := &CommonOptions{Output: OutputFull, MaxContent: files.DefaultMaxContent}
	pf := root.PersistentFlags()
	fsflags.AddFlags(pf, &c.Boundary)
	pf.Var(clikit.EnumValue{S: &c.Output, Allowed: []string{OutputFull, OutputDiff, OutputNone}}, "output",
		"what a change reports: full (texts before and after and the diff), diff (the diff only) or none")
	pf.Var(clikit.SizeValue{N: &c.MaxContent}, "max-content", "leave out the texts before and after past `SIZE` (the diff stays)")
	clikit.AddStateDirFlag(root, &c.StateDir)
	clikit.MarkFlags(pf, clikit.Configurable, "output", "max-content")
	clikit.MarkFlags(pf, clikit.TightenOnly, "max-content")
	boundary := clikit.MarkedOn(pf, clikit.TightenOnly)

	prepare := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		onCmdline := map[string]bool{}
		for _, n := range boundary {
			onCmdline[n] = clikit.FlagChanged(cmd, n)
		}
		if err := prepare(cmd, args); err != nil {
			return err
		}
		if env.RequestFile == "" {
			return nil
		}
		return c.tightenFromRequest(cmd, env, boundary, onCmdline, prepare)
	}
	return c
}

// tightenFromRequest keeps a request from loosening the operator's limits.
// clikit gives a request precedence over the environment and config file,
// which is right for ordinary flags but would let a model's tool call
// replace the configured root or deny list. So the limits the command line
// did not set are reset and the configuration is applied again on its own;
// the effective limit is then the tighter of the request's and the
// configuration's.
func (c *CommonOptions) tightenFromRequest(cmd *cobra.Command, env *clikit.Env, boundary []string, onCmdline map[string]bool,
	prepare func(*cobra.Command, []string) error) error {
	req := *c
	req.Deny = append([]string(nil), c.Deny...)
	var reset []*pflag.Flag
	for _, n := range boundary {
		f := cmd.Flags().Lookup(n)
		if f == nil || onCmdline[n] || !f.Changed {
			continue
		}
		f.Changed = false
		switch n {
		case "root":
			c.Root = ""
		case "deny":
			c.Deny = nil
		case "max-file-size":
			c.MaxFileSize = 0
		case "max-content":
			c.MaxContent = files.DefaultMaxContent
		default:
			return result.Errorf(result.CodeInternal, "--%s is marked tighten-only but has no tightening rule", n)
		}
		reset = append(reset, f)
	}
	if len(reset) == 0 {
		return nil
	}
	saved := env.RequestFile
	env.RequestFile = ""
	err := prepare(cmd, nil)
	env.RequestFile = saved
	if err != nil {
		return err
	}
	for _, f := range reset {
		switch f.Name {
		case "root":
			if c.Root == "" {
				c.Root = req.Root
			} else if req.Root != c.Root {
				if !inside(req.Root, c.Root) {
					return result.Errorf(result.CodeOutsideRoot, "the request's root %s is not inside the configured root %s", req.Root, c.Root).
						With("hint", "a request may narrow --root, never widen it")
				}
				c.Root = req.Root
			}
		case "deny":
			seen := map[string]bool{}
			for _, g := range c.Deny {
				seen[g] = true
			}
			for _, g := range req.Deny {
				if !seen[g] {
					c.Deny = append(c.Deny, g)
					seen[g] = true
				}
			}
		case "max-file-size":
			c.MaxFileSize = tighterLimit(c.MaxFileSize, req.MaxFileSize)
		case "max-content":
			c.MaxContent = tighterLimit(c.MaxContent, req.MaxContent)
		}
		f.Changed = true
	}
	return nil
}

// tighterLimit is the smaller of two limits where 0 means none.
func tighterLimit(a, b int64) int64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// inside reports whether dir resolves (symlinks followed) inside root.
func inside(dir, root string) bool {
	resolve := func(p string) (string, bool) {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", false
		}
		r, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return "", false
		}
		return r, true
	}
	d, ok1 := resolve(dir)
	r, ok2 := resolve(root)
	if !ok1 || !ok2 {
		return false
	}
	rel, err := filepath.Rel(r, d)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// refuseFileKeys refuses, under --root or --deny, the request keys that
// name a file agentfs itself opens outside both (the flags marked
// clikit.LocalFile, and an --edits given as @FILE, named by extra): a
// request carrying a model's arguments could otherwise copy any file it
// cannot read into the workspace. Unconfined, read reaches that file
// anyway; the same flags on the command line are the person's own.
//
// Under a sandbox_lock floor that holds files (a filesystem sandbox or
// hidden paths), the same flags are refused on the command line too
// (sandbox_locked): whoever chose them, a model's flags included, would
// read a hidden file into the workspace with them, as agentsh refuses
// --stdin-file there.
func (c *CommonOptions) refuseFileKeys(cmd *cobra.Command, env *clikit.Env, extra ...string) error {
	names := append(clikit.MarkedOn(cmd.Flags(), clikit.LocalFile), extra...)
	rules, err := c.fileRules(env)
	if err != nil {
		return err
	}
	if rules.Held {
		for _, f := range names {
			if clikit.FlagChanged(cmd, f) {
				return result.Errorf(result.CodeSandboxLocked, "--%s names a file agentfs would open outside the locked sandbox; give the content inline", f).
					With("hint", "the operator's config sets sandbox_lock")
			}
		}
	}
	if c.Root == "" && len(c.Deny) == 0 {
		return nil
	}
	for _, f := range names {
		if env.FromRequest(f) {
			key := clikit.ConfigKey(f)
			return result.Errorf(result.CodeInvalidRequest, "request key %q names a file agentfs would open outside --root and --deny; give the content inline", key).
				With("key", key)
		}
	}
	return nil
}

// engine builds the files engine for one call. Only a mutation opens the
// state directory, for its undo history.
func (c *CommonOptions) engine(env *clikit.Env, mutates bool) (*files.FS, error) {
	rules, err := c.fileRules(env)
	if err != nil {
		return nil, err
	}
	fsys := &files.FS{Root: c.Root, Deny: c.Deny, MaxFileSize: c.MaxFileSize, MaxContent: c.MaxContent, DryRun: c.DryRun,
		MayChange: rules.MayChange, Hidden: rules.Hidden}
	if mutates {
		d, err := env.OpenStateDir(c.StateDir)
		if err != nil {
			return nil, err
		}
		fsys.HistoryDir = d.Join("history")
	}
	// The undo histories hold the earlier content of files agentfs
	// changed, denied ones too, and the secret key and the sessions'
	// tokens are the environment's: under a rule none is read or changed
	// through agentfs, the call's own state (also for a read, which
	// opens none) nor the user's default one that a flag or variable
	// moves the call away from.
	if c.Root != "" || len(c.Deny) > 0 || len(rules.Hidden) > 0 {
		for _, dir := range sandboxflags.StateDirs(env, c.StateDir) {
			fsys.Histories = append(fsys.Histories, filepath.Join(dir, "history"))
			fsys.Hidden = append(fsys.Hidden, sandboxflags.StateSecrets(dir)...)
		}
	}
	c.fsys = fsys
	return fsys, nil
}

// putBack adds to a result the files of a killed change set that the
// call put back as they were before its own change (files.FS.Recovered).
func (c *CommonOptions) putBack(obj *result.Object) *result.Object {
	if c.fsys != nil && len(c.fsys.Recovered) > 0 {
		obj.Set("put_back", c.fsys.Recovered)
	}
	return obj
}

// fileRules reads the operator's sandbox_lock floor once per call: agentfs
// changes files itself, outside any sandbox, so under the lock it holds
// itself to the writable roots and hidden paths the sandbox would give a
// command (sandboxflags.Files).
func (c *CommonOptions) fileRules(env *clikit.Env) (sandboxflags.FileRules, error) {
	if c.rules == nil {
		rules, err := sandboxflags.Files(env, c.StateDir)
		if err != nil {
			return rules, err
		}
		c.rules = &rules
	}
	return *c.rules, nil
}

// mutationFields adds a change report to obj, leaving out what --output
// asks to leave out.
func (c *CommonOptions) mutationFields(obj *result.Object, m *files.Mutation) *result.Object {
	obj.Set("path", m.Path)
	if m.Action != "" {
		obj.Set("action", m.Action)
	}
	if m.MoveTo != "" {
		obj.Set("move_to", m.MoveTo)
	}
	obj.Set("created", m.Created)
	obj.Set("changed", m.Changed)
	if m.Deleted {
		obj.Set("deleted", true)
	}
	if c.Output == OutputFull && !m.ContentOmitted {
		obj.Set("original_file", m.OriginalFile)
		obj.Set("new_file", m.NewFile)
	}
	obj.Set("sha256_before", m.SHA256Before)
	obj.Set("sha256_after", m.SHA256After)
	if c.Output != OutputNone {
		obj.Set("diff", m.Diff)
	}
	obj.Set("diff_stats", m.DiffStats)
	obj.Set("content_omitted", m.ContentOmitted)
	if m.Binary {
		obj.Set("binary", true)
	}
	if m.Edits != nil {
		obj.Set("edits", m.Edits)
	}
	return obj
}

// mutationOutcome renders a single-file change as the command's result.
func (c *CommonOptions) mutationOutcome(env *clikit.Env, m *files.Mutation) *clikit.Outcome {
	obj := c.mutationFields(result.New().Set("success", true), m)
	if c.DryRun {
		obj.Set("dry_run", true)
	}
	return done(env, c.putBack(obj))
}

// done finishes a successful result: the caller's stated intent is echoed
// so that audit logs of the output carry it.
func done(env *clikit.Env, obj *result.Object) *clikit.Outcome {
	if env.Description != "" {
		obj.Set("description", env.Description)
	}
	return &clikit.Outcome{Value: obj, Exit: ExitOK}
}

// textInput reads a verb's text from the named file or else stdin. Stdin is
// refused when it already carried the request.
func textInput(env *clikit.Env, file, what string) ([]byte, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, result.Errorf(result.CodeUsage, "cannot read %s: %v", file, unwrapPathError(err))
		}
		return b, nil
	}
	if env.RequestFile == "-" {
		return nil, result.Errorf(result.CodeUsage, "no %s: stdin carried the request", what)
	}
	b, err := io.ReadAll(env.In)
	if err != nil {
		return nil, result.Errorf(result.CodeIOError, "cannot read stdin: %v", err)
	}
	return b, nil
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// onceString is a string flag that refuses a second value, so that a
// request giving both a flag's name and its alias (old and old_string) is
// an error instead of a silent choice.
type onceString struct {
	s    *string
	name string
	set  bool
}

func (o *onceString) String() string { return *o.s }

// Set stores the value once.
func (o *onceString) Set(s string) error {
	if o.set {
		return fmt.Errorf("--%s given twice (directly or by its alias)", o.name)
	}
	*o.s, o.set = s, true
	return nil
}

// Type names the value kind for help and schemas.
func (o *onceString) Type() string { return "string" }

// parseMode reads a permission like 0644 or 644, always octal.
func parseMode(s string) (os.FileMode, error) {
	m, err := strconv.ParseUint(strings.TrimPrefix(s, "0o"), 8, 32)
	if err != nil || m > 0o777 {
		return 0, result.Errorf(result.CodeUsage, "--mode wants octal permission bits from 0 to 0777 like 0644, not %q", s)
	}
	return os.FileMode(m), nil
}
