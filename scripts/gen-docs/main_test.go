package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/result"
)

// TestNoDrift fails when the committed man pages or completions differ
// from what the code generates: run `go run ./scripts/gen-docs` and commit.
func TestNoDrift(t *testing.T) {
	files, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("..", "..")
	var stale []string
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || !bytes.Equal(got, want) {
			stale = append(stale, name)
		}
	}
	// Files that are committed but no longer generated are drift too.
	for _, dir := range []string{"man/man1", "completions/bash", "completions/zsh", "completions/fish"} {
		entries, _ := os.ReadDir(filepath.Join(root, dir))
		for _, e := range entries {
			if _, ok := files[dir+"/"+e.Name()]; !ok {
				stale = append(stale, dir+"/"+e.Name()+" (not generated)")
			}
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Fatalf("generated docs are stale; run 'go run ./scripts/gen-docs' and commit:\n%s", strings.Join(stale, "\n"))
	}
}

// TestManPagesHaveSections checks every page for the sections users look
// for, that each program's page documents its exit status, and that the
// pages of the programs and their operations have RESULT and EXAMPLES.
func TestManPagesHaveSections(t *testing.T) {
	files, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if !strings.HasPrefix(name, "man/") {
			continue
		}
		for _, sec := range []string{".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION", ".SH EXIT STATUS", ".SH ENVIRONMENT", ".SH FILES"} {
			if !bytes.Contains(data, []byte(sec)) {
				t.Errorf("%s lacks %s", name, sec)
			}
		}
	}
	for _, prog := range []string{"agentsh", "agentjob", "agentfs"} {
		page := files["man/man1/"+prog+".1"]
		if page == nil {
			t.Fatalf("no page for %s", prog)
		}
	}
	// The page of every operation (a command with a tool), and of every
	// program, also says what it prints and how it is called.
	for _, p := range Programs() {
		env := &clikit.Env{Program: p, In: strings.NewReader(""), Out: io.Discard, Err: io.Discard,
			LookupEnv: func(string) (string, bool) { return "", false }, Environ: func() []string { return nil }}
		root := clikit.NewRoot(env)
		var walk func(c *cobra.Command)
		walk = func(c *cobra.Command) {
			if c.Hidden || c.Name() == "help" {
				return
			}
			if c == root || c.Annotations[clikit.AnnotTool] != "" {
				name := "man/man1/" + strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1"
				page := files[name]
				if page == nil {
					t.Errorf("no page %s for %q", name, c.CommandPath())
				}
				for _, sec := range []string{".SH RESULT", ".SH EXAMPLES"} {
					if page != nil && !bytes.Contains(page, []byte(sec)) {
						t.Errorf("%s lacks %s", name, sec)
					}
				}
			}
			for _, s := range c.Commands() {
				walk(s)
			}
		}
		walk(root)
	}
}

// TestManPagesNameEveryCode checks that each program's page has an ERRORS
// section naming every code of result.Codes the program reports, and no
// code of another program only.
func TestManPagesNameEveryCode(t *testing.T) {
	files, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range Programs() {
		page := string(files["man/man1/"+p.Name+".1"])
		_, errs, ok := strings.Cut(page, ".SH ERRORS\n")
		if !ok {
			t.Errorf("%s.1 has no ERRORS section", p.Name)
			continue
		}
		errs, _, _ = strings.Cut(errs, "\n.SH ")
		named := map[string]bool{}
		for _, line := range strings.Split(errs, "\n") {
			if c, ok := strings.CutPrefix(line, ".B "); ok {
				named[c] = true
			}
		}
		mine := map[string]bool{}
		for _, c := range result.CodesOf(p.Name) {
			mine[c.Code] = true
			if !named[c.Code] {
				t.Errorf("%s.1 does not name %s", p.Name, c.Code)
			}
		}
		for c := range named {
			if !mine[c] {
				t.Errorf("%s.1 names %s, which %s does not report", p.Name, c, p.Name)
			}
		}
		if len(named) < 10 {
			t.Errorf("%s.1 names only %d codes", p.Name, len(named))
		}
	}
}
