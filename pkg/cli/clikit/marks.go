package clikit

import (
	"sort"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Mark is a rule declared on a flag itself. Every place that needs to know
// who owns a flag (the request parser, the schemas, the MCP server's
// refusal list, agentfs's tighten-only limits, the sandbox_lock floor, the
// man pages) reads these
// marks instead of keeping a list of names.
type Mark string

// The marks.
const (
	// Configurable: the flag's default may come from the environment or
	// the config file. Flags without it are per-call only.
	Configurable Mark = AnnotConfig
	// NoRequest: never a request key (nor, so, a tool argument); only the
	// command line, the environment or the config file set it.
	NoRequest Mark = AnnotNoRequest
	// Operator: the operator's setting (the sandbox and its limits, the
	// command policy, agentfs's root and deny list, where state lives). An
	// MCP tool call naming it is refused; the MCP server has a flag of the
	// same name that forwards the operator's value to every call (unless
	// NotForwarded).
	Operator Mark = "agentplane/operator"
	// TightenOnly: a request may make the configured value stricter but
	// never looser (agentfs's root, deny list and size limits).
	TightenOnly Mark = "agentplane/tighten-only"
	// Floor: under sandbox_lock, the configured value is a floor that a
	// flag or a request may tighten but never loosen (the sandbox, the
	// network, the limits, the writable, allowed and hidden paths).
	Floor Mark = "agentplane/floor"
	// NotForwarded: an Operator setting the MCP server takes no flag for
	// and never passes on: approval is a human's, given per call, and the
	// sandbox lock is read from the configuration by every call itself.
	NotForwarded Mark = "agentplane/not-forwarded"
	// LocalFile: the flag names a file the program opens itself, outside
	// any sandbox and root (agentsh --stdin-file and --save-output, agentfs
	// --content-file and --patch-file). Right for the person at the shell,
	// but a tool call could read past --deny-read and --root or write
	// outside the sandbox with it: the MCP server refuses it as an argument,
	// and agentsh refuses it as a request key when the call is sandboxed,
	// and also as a flag when sandbox_lock holds a filesystem sandbox or
	// hidden paths.
	LocalFile Mark = "agentplane/local-file"
	// FileRef: a value of the flag that starts with @ names a file the
	// program reads itself (agentfs --edits @FILE), which is LocalFile's
	// risk for that form alone: the MCP server refuses such a value.
	FileRef Mark = "agentplane/file-ref"
	// ServerOwned: the flag changes how a call reports rather than what it
	// does, so the MCP server owns it: it sets it itself (agentsh --stream,
	// for progress), or it has no meaning over MCP (follow modes never end;
	// --tee and --exit-zero concern a terminal and a shell's exit status).
	// A tool call naming it is refused.
	ServerOwned Mark = "agentplane/server-owned"
	// Numeric: a string flag whose syntax is a number (agentfs's octal
	// --mode), so a request may give it as a JSON number. Other string
	// flags refuse numbers: a command or a path is text.
	Numeric Mark = "agentplane/numeric"
)

// Marker is what holds flags: a *pflag.FlagSet.
type Marker interface {
	SetAnnotation(name, key string, values []string) error
}

// MarkFlags puts mark m on the named flags of fs. It panics on a name fs
// does not have: a mark on nothing is a programming error that would
// otherwise silently drop a rule.
func MarkFlags(fs Marker, m Mark, names ...string) {
	for _, n := range names {
		if err := fs.SetAnnotation(n, string(m), []string{"true"}); err != nil {
			panic("clikit.MarkFlags: " + err.Error())
		}
	}
}

// HasMark reports whether f carries mark m.
func HasMark(f *pflag.Flag, m Mark) bool {
	return f != nil && hasAnnot(f, string(m))
}

// MarkedFlags returns the names of the flags carrying m anywhere in the
// tree under root (local and persistent flags), sorted, each once.
func MarkedFlags(root *cobra.Command, m Mark) []string {
	seen := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.LocalFlags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if HasMark(f, m) {
					seen[f.Name] = true
				}
			})
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// MarkedOn returns the names of the flags of fs carrying m, in fs's order.
func MarkedOn(fs *pflag.FlagSet, m Mark) []string {
	var out []string
	fs.VisitAll(func(f *pflag.Flag) {
		if HasMark(f, m) {
			out = append(out, f.Name)
		}
	})
	return out
}
