package agentfs

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/files"
	"github.com/agentplane/agentplane/pkg/result"
)

// WriteOptions are the flags of agentfs write.
type WriteOptions struct {
	*CommonOptions
	Path         string
	Content      string
	ContentFile  string
	Append       bool
	ExpectSHA256 string
	ExpectAbsent bool
	Mode         string
	NoMkdir      bool

	hasContent bool
}

// NewCmdWrite builds agentfs write. runF replaces writeRun in tests.
func NewCmdWrite(env *clikit.Env, common *CommonOptions, runF func(*WriteOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &WriteOptions{CommonOptions: common}
	cmd := &cobra.Command{
		Use:   "write PATH (--content STRING | --content-file FILE | < STDIN)",
		Short: "Write a file atomically",
		Long: "Replace (or with --append extend) a file's content atomically, creating it and its parent " +
			"directories. The file keeps its mode; writing through a symlink updates its target. " +
			"--content-file is read by agentfs itself and is not subject to --root or --deny (so under either, a request may not name it).",
		Args: cobra.MaximumNArgs(1),
		Annotations: map[string]string{
			clikit.AnnotTool:           "agentfs_write",
			clikit.AnnotToolDoc:        "Write content to a file atomically (or with append, add it to the end), creating the file and its parent directories. The file keeps its mode and writing through a symlink updates its target. expect_sha256 refuses to overwrite a file that changed since it was read, expect_absent one that exists. dry_run returns the same result (new_file, diff) without writing.",
			clikit.AnnotHints:          clikit.Hints{Destructive: true}.String(),
			clikit.AnnotArgs:           "path",
			clikit.AnnotArgs + ".path": "the file to write",
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Content, "content", "", "the new content `STRING`")
	f.StringVar(&o.ContentFile, "content-file", "", "take the new content from `FILE`")
	clikit.MarkFlags(f, clikit.LocalFile, "content-file")
	f.BoolVar(&o.Append, "append", false, "add the content at the end instead of replacing")
	f.StringVar(&o.ExpectSHA256, "expect-sha256", "", "refuse (file_changed) unless the file's sha256 is `HEX`")
	f.BoolVar(&o.ExpectAbsent, "expect-absent", false, "refuse (file_exists) if the file exists")
	f.StringVar(&o.Mode, "mode", "", "permission bits in octal, like 0644 (default: keep the file's, 0644 for a new file)")
	f.BoolVar(&o.NoMkdir, "no-mkdir", false, "refuse (file_not_found) instead of creating missing parent directories")
	clikit.MarkFlags(f, clikit.Numeric, "mode")
	o.addDryRunFlag(cmd)
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		args, err := env.Positional(cmd, args, 1)
		if err != nil {
			return nil, err
		}
		o.Path = args[0]
		if err := o.refuseFileKeys(cmd, env); err != nil {
			return nil, err
		}
		o.hasContent = clikit.FlagChanged(cmd, "content")
		if o.hasContent && o.ContentFile != "" {
			return nil, result.Errorf(result.CodeUsage, "give either --content or --content-file, not both")
		}
		if o.ExpectSHA256 != "" && o.ExpectAbsent {
			return nil, result.Errorf(result.CodeUsage, "give either --expect-sha256 or --expect-absent, not both")
		}
		if runF != nil {
			return runF(o)
		}
		return writeRun(env, o)
	})
	return cmd
}

func writeRun(env *clikit.Env, o *WriteOptions) (*clikit.Outcome, error) {
	opt := files.WriteOptions{Append: o.Append, ExpectSHA256: o.ExpectSHA256, ExpectAbsent: o.ExpectAbsent, NoMkdir: o.NoMkdir}
	if o.Mode != "" {
		m, err := parseMode(o.Mode)
		if err != nil {
			return nil, err
		}
		opt.Mode = m
	}
	content := []byte(o.Content)
	if !o.hasContent {
		var err error
		if content, err = textInput(env, o.ContentFile, "content (give --content, --content-file or stdin)"); err != nil {
			return nil, err
		}
	}
	fsys, err := o.engine(env, true)
	if err != nil {
		return nil, err
	}
	m, err := fsys.Write(o.Path, content, opt)
	if err != nil {
		return nil, err
	}
	return o.mutationOutcome(env, m), nil
}
