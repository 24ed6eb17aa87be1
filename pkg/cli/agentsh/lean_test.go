package agentsh

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
)

func testRoot(build func(*cobra.Command, *clikit.Env)) *cobra.Command {
	p := Program()
	p.Build = build
	env := &clikit.Env{Program: p, In: strings.NewReader(""), Out: io.Discard, Err: io.Discard,
		LookupEnv: func(string) (string, bool) { return "", false }, Environ: func() []string { return nil }}
	return clikit.NewRoot(env)
}

// TestTreeNames: treeNames names every command below the root, with its
// aliases, and the ones cobra adds when the tree executes; a subcommand
// added without it would be run as a program by a one-shot tree.
func TestTreeNames(t *testing.T) {
	root := testRoot(build)
	root.InitDefaultHelpCmd()
	got := map[string]bool{cobra.ShellCompRequestCmd: true, cobra.ShellCompNoDescRequestCmd: true, "completion": true}
	for _, c := range root.Commands() {
		got[c.Name()] = true
		for _, a := range c.Aliases {
			got[a] = true
		}
	}
	for n := range got {
		if !treeNames[n] {
			t.Errorf("command %q is missing from treeNames", n)
		}
	}
	for n := range treeNames {
		if !got[n] {
			t.Errorf("treeNames has %q, which the tree does not", n)
		}
	}
}

// TestNeedsSubcommands reads arguments the way cobra does: flags and their
// values are skipped, and the first other argument decides.
func TestNeedsSubcommands(t *testing.T) {
	root := testRoot(func(r *cobra.Command, env *clikit.Env) { buildWith(r, env, nil, nil, []string{"--", "true"}) })
	if len(root.Commands()) != 1 || root.Commands()[0].Name() != "schema" {
		var names []string
		for _, c := range root.Commands() {
			names = append(names, c.Name())
		}
		t.Fatalf("one-shot tree has %v, want only clikit's schema", names)
	}
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--", "true"}, false},
		{[]string{"true"}, false},
		{[]string{"ls", "-la"}, false},
		{[]string{"-c", "make test"}, false},
		{[]string{"-c", "session"}, false},          // -c's value, not a subcommand
		{[]string{"--cwd", "session", "ls"}, false}, // --cwd's value
		{[]string{"--cwd=/tmp", "ls"}, false},
		{[]string{"-q", "stdout", "--", "git", "status"}, false},
		{[]string{"-qstdout", "ls"}, false},
		{[]string{"--pretty", "ls"}, false},
		{[]string{"--pretty", "session", "list"}, true},
		{[]string{"--cwd", "/tmp", "session", "list"}, true},
		{[]string{"-q", "session", "session", "start"}, true},
		{[]string{"session", "start"}, true},
		{[]string{"mcp"}, true},
		{[]string{"audit"}, true},
		{[]string{"check", "-c", "rm -rf /"}, true},
		{[]string{"sandbox", "status"}, true},
		{[]string{"schema"}, true},
		{[]string{"help"}, true},
		{[]string{cobra.ShellCompRequestCmd, "sess"}, true},
		{[]string{"--help"}, true},
		{[]string{"-h"}, true},
		{[]string{"--cwd", "/tmp", "-h"}, true},
		{[]string{"--version"}, true},
		{[]string{"--pretty"}, false}, // no command: a usage error either way
		{[]string{"--", "session"}, false},
		{[]string{"--bogus", "session", "list"}, true}, // cobra reports the flag
	} {
		if got := needsSubcommands(root, tc.args); got != tc.want {
			t.Errorf("needsSubcommands(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestOneShot: Main starts the watchdog early only for what looks like a
// one-shot run; a session call's server has a guard of its own, so its
