// Command gen-docs writes the man pages (man/man1) and the bash, zsh and
// fish completions (completions/) of the three programs from their cobra
// trees. The output is reproducible (a fixed date), committed, and checked
// for drift by this package's test.
//
//	go run ./scripts/gen-docs [-o DIR]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentplane/agentplane/pkg/cli/agentfs"
	"github.com/agentplane/agentplane/pkg/cli/agentjob"
	"github.com/agentplane/agentplane/pkg/cli/agentsh"
	"github.com/agentplane/agentplane/pkg/cli/clikit"
)

func main() {
	out := flag.String("o", ".", "directory that receives man/ and completions/")
	flag.Parse()
	files, err := Generate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen-docs:", err)
		os.Exit(1)
	}
	for name, data := range files {
		p := filepath.Join(*out, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "gen-docs:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen-docs:", err)
			os.Exit(1)
		}
	}
	fmt.Fprintf(os.Stderr, "gen-docs: wrote %d files\n", len(files))
}

// Programs lists the three programs.
func Programs() []*clikit.Program {
	return []*clikit.Program{agentsh.Program(), agentjob.Program(), agentfs.Program()}
}

// Generate returns every generated file by its path relative to the
// repository root.
func Generate() (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, p := range Programs() {
		for _, page := range clikit.GenerateMan(p) {
			files["man/man1/"+page.Name] = page.Text
		}
		env := &clikit.Env{Program: p, In: strings.NewReader(""), Out: io.Discard, Err: io.Discard,
			LookupEnv: func(string) (string, bool) { return "", false }, Environ: func() []string { return nil }}
		root := clikit.NewRoot(env)
		var bash, zsh, fish bytes.Buffer
		if err := root.GenBashCompletionV2(&bash, true); err != nil {
			return nil, err
		}
		if err := root.GenZshCompletion(&zsh); err != nil {
			return nil, err
		}
		if err := root.GenFishCompletion(&fish, true); err != nil {
			return nil, err
		}
		files["completions/bash/"+p.Name] = bash.Bytes()
		files["completions/zsh/_"+p.Name] = zsh.Bytes()
		files["completions/fish/"+p.Name+".fish"] = fish.Bytes()
	}
	return files, nil
}
