package agentfs

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/files"
	"github.com/agentplane/agentplane/pkg/result"
)

// ReadOptions are the flags of agentfs read.
type ReadOptions struct {
	*CommonOptions
	Path     string
	Offset   int
	Limit    int
	Numbered bool
	MaxBytes int64
}

// NewCmdRead builds agentfs read. runF replaces readRun in tests.
func NewCmdRead(env *clikit.Env, common *CommonOptions, runF func(*ReadOptions) (*clikit.Outcome, error)) *cobra.Command {
	o := &ReadOptions{CommonOptions: common}
	cmd := &cobra.Command{
		Use:   "read PATH",
		Short: "Read a text file, or some of its lines",
		Long: "Read a text file, or the lines --offset (1-based) to --offset+--limit-1, with the sha256 of the " +
			"whole file to pass back as --expect-sha256. A binary file reports only its facts (binary: true).",
		Args: cobra.MaximumNArgs(1),
		Annotations: map[string]string{
			clikit.AnnotTool:           "agentfs_read",
			clikit.AnnotToolDoc:        "Read a text file, or limit lines from line offset (1-based), with the sha256 of the whole file to pass back as expect_sha256 when changing it. bom is true when the file starts with a byte-order mark (the content is given without it). A binary file reports only its facts (binary: true).",
			clikit.AnnotHints:          clikit.Hints{ReadOnly: true, Idempotent: true}.String(),
			clikit.AnnotArgs:           "path",
			clikit.AnnotArgs + ".path": "the file to read",
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Offset, "offset", 0, "first `LINE` to return, 1-based (default 1)")
	f.IntVar(&o.Limit, "limit", 0, "return at most `LINES` lines (default all)")
	f.BoolVar(&o.Numbered, "numbered", false, "prefix each line with its number, like cat's numbered output")
	f.Var(clikit.SizeValue{N: &o.MaxBytes}, "max-bytes", "cut the content at `N` bytes, at a line end when possible (truncated: true)")
	cmd.RunE = env.Action(func(cmd *cobra.Command, args []string) (*clikit.Outcome, error) {
		args, err := env.Positional(cmd, args, 1)
		if err != nil {
			return nil, err
		}
		o.Path = args[0]
		if o.Offset < 0 || o.Limit < 0 {
			return nil, result.Errorf(result.CodeUsage, "--offset and --limit must not be negative")
		}
		if runF != nil {
			return runF(o)
		}
		return readRun(env, o)
	})
	return cmd
}

type readResult struct {
	Success bool `json:"success"`
	*files.ReadResult
	Description string `json:"description,omitempty"`
}

func readRun(env *clikit.Env, o *ReadOptions) (*clikit.Outcome, error) {
	fsys, err := o.engine(env, false)
	if err != nil {
		return nil, err
	}
	r, err := fsys.Read(o.Path, files.ReadOptions{Offset: o.Offset, Limit: o.Limit, Numbered: o.Numbered, MaxBytes: int(o.MaxBytes)})
	if err != nil {
		return nil, err
	}
	return &clikit.Outcome{Value: readResult{Success: true, ReadResult: r, Description: env.Description}}, nil
}
