package clikit

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentplane/agentplane/pkg/result"
)

// Annotations that feed the man pages.
const (
	// AnnotManResult describes the command's JSON result fields, one
	// "field: meaning" per line.
	AnnotManResult = "agentplane/man.result"
	// AnnotManNotes is free text for a NOTES section.
	AnnotManNotes = "agentplane/man.notes"
)

// ManDate is the fixed date written into generated man pages, so that
// regenerating them is reproducible and a drift test can compare bytes.
const ManDate = "2026-11-29"

// ManPage is one generated page.
type ManPage struct {
	Name string // file name, e.g. agentsh-session-start.1
	Text []byte
}

// GenerateMan renders a man page for every runnable, visible command of the
// program's tree.
func GenerateMan(p *Program) []ManPage {
	env := &Env{Program: p, In: strings.NewReader(""), Out: io.Discard, Err: io.Discard,
		LookupEnv: func(string) (string, bool) { return "", false }, Environ: func() []string { return nil }}
	root := NewRoot(env)
	var pages []ManPage
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		pages = append(pages, ManPage{Name: strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1", Text: manPage(p, c)})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return pages
}

// roff escapes text for a man page body.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, ".") || strings.HasPrefix(line, "'") {
			b.WriteString(`\&`)
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func manPage(p *Program, c *cobra.Command) []byte {
	var b bytes.Buffer
	title := strings.ToUpper(strings.ReplaceAll(c.CommandPath(), " ", "-"))
	fmt.Fprintf(&b, ".TH %s 1 %q \"agentplane %s\" \"agentplane manual\"\n", title, ManDate, Version)
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", roff(strings.ReplaceAll(c.CommandPath(), " ", "-")), roff(c.Short))
	fmt.Fprintf(&b, ".SH SYNOPSIS\n.nf\n%s\n.fi\n", roff(synopsis(c)))
	desc := c.Long
	if desc == "" {
		desc = c.Short
	}
	fmt.Fprintf(&b, ".SH DESCRIPTION\n%s\n", roff(desc))
	if c.HasAvailableSubCommands() {
		b.WriteString(".SH COMMANDS\n")
		for _, s := range c.Commands() {
			if !s.IsAvailableCommand() || s.Name() == "help" {
				continue
			}
			fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", roff(s.Name()), roff(s.Short))
		}
	}
	writeFlags(&b, "OPTIONS", c.LocalFlags())
	writeFlags(&b, "GLOBAL OPTIONS", c.InheritedFlags())
	if tool := c.Annotations[AnnotTool]; tool != "" {
		fmt.Fprintf(&b, ".SH REQUEST\nThe operation can also be given as one JSON object with \\fB\\-\\-request FILE\\fR "+
			"(\\fB\\-\\fR for stdin) whose keys are the long flag names with underscores%s, plus \\fBdescription\\fR. "+
			"Unknown keys are an \\fBinvalid_request\\fR error; flags beside a request override it. "+
			"\\fB%s schema\\fR prints the tool definition \\fB%s\\fR.\n",
			argsNote(c), roff(p.Name), roff(tool))
	}
	if r := c.Annotations[AnnotManResult]; r != "" {
		b.WriteString(".SH RESULT\nOne JSON object on stdout. Fields:\n")
		for _, line := range strings.Split(strings.TrimSpace(r), "\n") {
			k, v, _ := strings.Cut(line, ":")
			fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", roff(strings.TrimSpace(k)), roff(strings.TrimSpace(v)))
		}
	}
	if len(p.ExitStatus) > 0 {
		b.WriteString(".SH EXIT STATUS\n")
		for _, e := range p.ExitStatus {
			fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", roff(e[0]), roff(e[1]))
		}
	}
	if !c.HasParent() {
		writeErrors(&b, p)
	}
	writeEnvironment(&b, p, c)
	b.WriteString(".SH FILES\n.TP\n.B $XDG_CONFIG_HOME/agentplane/config.toml\n" +
		"The user's configuration (default \\fI~/.config/agentplane/config.toml\\fR, none when HOME is not an absolute path); top\\-level keys apply to every program, a [" +
		roff(p.Name) + "] table to this one. Never read from the working directory.\n" +
		".TP\n.B " + DefaultSystemConfig + "\nThe system\\-wide configuration, the base layer under the user's file (or the one " +
		"\\fB\\-\\-config\\fR names); no variable moves it, so a sandbox_lock set here holds whatever HOME, XDG_CONFIG_HOME " +
		"or AGENTPLANE_CONFIG a call runs with.\n")
	if c.Flags().Lookup("state-dir") != nil {
		b.WriteString(".TP\n.B $XDG_STATE_HOME/agentplane\nThe state directory (one environment): " +
			"\\fB\\-\\-state\\-dir\\fR, else \\fB$AGENTPLANE_STATE_DIR\\fR, else \\fI$XDG_STATE_HOME/agentplane\\fR, " +
			"else \\fI~/.local/state/agentplane\\fR (the user database's home when HOME is not an absolute path: never below the working directory). Created 0700 with a secret key that authenticates handles.\n")
	}
	if n := c.Annotations[AnnotManNotes]; n != "" {
		fmt.Fprintf(&b, ".SH NOTES\n%s\n", roff(strings.TrimSpace(n)))
	}
	if c.Example != "" {
		fmt.Fprintf(&b, ".SH EXAMPLES\n.nf\n%s\n.fi\n", roff(strings.Trim(c.Example, "\n")))
	}
	var see []string
	if c.HasParent() {
		see = append(see, strings.ReplaceAll(c.Parent().CommandPath(), " ", "-")+"(1)")
	}
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() && s.Name() != "help" {
			see = append(see, strings.ReplaceAll(s.CommandPath(), " ", "-")+"(1)")
		}
	}
	if len(see) > 0 {
		fmt.Fprintf(&b, ".SH SEE ALSO\n%s\n", roff(strings.Join(see, ", ")))
	}
	return b.Bytes()
}

func argsNote(c *cobra.Command) string {
	names, _ := ArgNames(c)
	if len(names) == 0 {
		return ""
	}
	return " (the arguments are the keys " + roff(strings.Join(names, ", ")) + ")"
}

func synopsis(c *cobra.Command) string {
	use := c.UseLine()
	if c.HasAvailableSubCommands() && !c.Runnable() {
		use = c.CommandPath() + " COMMAND [flags]"
	}
	return use
}

func writeFlags(b *bytes.Buffer, section string, fs *pflag.FlagSet) {
	var flags []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			flags = append(flags, f)
		}
	})
	if len(flags) == 0 {
		return
	}
	fmt.Fprintf(b, ".SH %s\n", section)
	for _, f := range flags {
		name, usage := pflag.UnquoteUsage(f)
		head := "\\fB\\-\\-" + roff(f.Name) + "\\fR"
		if f.Shorthand != "" {
			head = "\\fB\\-" + roff(f.Shorthand) + "\\fR, " + head
		}
		if name != "" {
			head += " \\fI" + roff(name) + "\\fR"
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" && f.DefValue != "0s" {
			usage += " (default " + f.DefValue + ")"
		}
		usage += markNote(f)
		fmt.Fprintf(b, ".TP\n%s\n%s\n", head, roff(usage))
	}
}

// writeErrors lists the error codes the program reports, from the one
// table in pkg/result, with their meanings.
func writeErrors(b *bytes.Buffer, p *Program) {
	codes := result.CodesOf(p.Name)
	if len(codes) == 0 {
		return
	}
	b.WriteString(".SH ERRORS\nA failure is \\fB\"success\": false\\fR with \\fBerror.code\\fR, one of:\n")
	for _, c := range codes {
		fmt.Fprintf(b, ".TP\n.B %s\n%s (exit status %d)\n", roff(c.Code), roff(c.Meaning), p.ExitCode(c.Code))
	}
}

// markNote is the man text of a flag's ownership marks.
func markNote(f *pflag.Flag) string {
	var notes []string
	if HasMark(f, Operator) {
		notes = append(notes, "the operator's setting: never an MCP tool argument")
	}
	if HasMark(f, NoRequest) {
		notes = append(notes, "never a request key")
	}
	if HasMark(f, TightenOnly) {
		notes = append(notes, "a request may only tighten it")
	}
	if HasMark(f, ServerOwned) {
		notes = append(notes, "the MCP server's: never a tool argument")
	}
	if HasMark(f, LocalFile) {
		notes = append(notes, "opened by the program itself: never an MCP tool argument")
	}
	if HasMark(f, FileRef) {
		notes = append(notes, "@FILE is opened by the program itself: never over MCP")
	}
	if HasMark(f, Floor) {
		notes = append(notes, "under sandbox_lock the configured value is a floor")
	}
	if len(notes) == 0 {
		return ""
	}
	return " [" + strings.Join(notes, "; ") + "]"
}

func writeEnvironment(b *bytes.Buffer, p *Program, c *cobra.Command) {
	var lines []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if !hasAnnot(f, AnnotConfig) {
			return
		}
		n := EnvNames(p.Name, f.Name)
		lines = append(lines, fmt.Sprintf(".TP\n.B %s, %s\nDefault for \\fB\\-\\-%s\\fR (config key \\fB%s\\fR).\n",
			roff(n[0]), roff(n[1]), roff(f.Name), roff(ConfigKey(f.Name))))
	})
	sort.Strings(lines)
	b.WriteString(".SH ENVIRONMENT\nFlags override environment variables, which override the config file, which overrides the built\\-in defaults.\n")
	b.WriteString(".TP\n.B AGENTPLANE_CONFIG\nThe config file to read instead of the user's.\n")
	for _, l := range lines {
		b.WriteString(l)
	}
}

// Doc is the man-page text of one command: its EXAMPLES and its RESULT
// fields ("field: meaning" per line).
type Doc struct {
	Example string
	Result  string
}

// AnnotateDocs attaches docs to the commands of a tree, keyed by the
// command path below the root ("" for the root, "session start", …),
// without overriding what a command set itself.
func AnnotateDocs(root *cobra.Command, docs map[string]Doc) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.TrimPrefix(strings.TrimPrefix(c.CommandPath(), root.Name()), " ")
		if d, ok := docs[path]; ok {
			if c.Example == "" {
				c.Example = d.Example
			}
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			if c.Annotations[AnnotManResult] == "" {
				c.Annotations[AnnotManResult] = d.Result
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}
