// Package fsflags declares agentfs's boundary, the operator's confinement
// of every path: --root, --deny and --max-file-size. It is a package of its
// own so that the MCP server of each program, which takes the operator's
// settings of all three, declares the same flags without linking agentfs.
package fsflags

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
)

// Boundary is what the boundary flags set.
type Boundary struct {
	Root        string
	Deny        []string
	MaxFileSize int64
}

// AddFlags adds the boundary flags to fs: the operator's (configurable,
// never a tool argument), and a request may only tighten them.
func AddFlags(fs *pflag.FlagSet, b *Boundary) {
	fs.StringVar(&b.Root, "root", "", "confine every path to `DIR`: it must resolve, symlinks followed, inside it "+
		"(a request may only name a root inside the configured one)")
	fs.Var(&globList{list: &b.Deny}, "deny", "refuse paths matching `GLOB` (repeatable; ** matches any depth, e.g. '**/.env', '**/.git/**'; "+
		"a request's globs add to the configured ones)")
	fs.Var(clikit.SizeValue{N: &b.MaxFileSize}, "max-file-size", "refuse files larger than `SIZE` (0 = no limit; a request can only lower it)")
	clikit.MarkFlags(fs, clikit.Configurable, "root", "deny", "max-file-size")
	clikit.MarkFlags(fs, clikit.TightenOnly, "root", "deny", "max-file-size")
	clikit.MarkFlags(fs, clikit.Operator, "root", "deny", "max-file-size")
}

// globList is a repeatable string flag whose list the tightening pass can
// reset; pflag's own string array keeps that state private.
type globList struct{ list *[]string }

func (g *globList) String() string { return "[" + strings.Join(*g.list, ",") + "]" }

// Set adds one glob.
func (g *globList) Set(s string) error {
	if s == "" {
		return fmt.Errorf("empty glob")
	}
	*g.list = append(*g.list, s)
	return nil
}

// Type makes requests give the flag as an array of strings.
func (g *globList) Type() string { return "stringArray" }
