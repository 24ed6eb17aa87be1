package mcpserver_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentplane/agentplane/pkg/cli/agentfs"
	"github.com/agentplane/agentplane/pkg/cli/agentjob"
	"github.com/agentplane/agentplane/pkg/cli/agentsh"
	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/cli/mcpcmd"
	"github.com/agentplane/agentplane/pkg/mcpserver"
)

func programRoots() map[string][]clikit.Tool {
	out := map[string][]clikit.Tool{}
	for _, p := range []*clikit.Program{agentsh.Program(), agentjob.Program(), agentfs.Program()} {
		env := &clikit.Env{Program: p, In: strings.NewReader(""), Out: io.Discard, Err: io.Discard,
			LookupEnv: func(string) (string, bool) { return "", false }, Environ: func() []string { return nil }}
		out[p.Name] = clikit.Tools(clikit.NewRoot(env))
	}
	return out
}

// marked returns, for each tool, the flags of its command carrying m.
func marked(t clikit.Tool, m clikit.Mark) []*pflag.Flag {
	var out []*pflag.Flag
	seen := map[string]bool{}
	for _, fs := range []*pflag.FlagSet{t.Command.Flags(), t.Command.InheritedFlags()} {
		fs.VisitAll(func(f *pflag.Flag) {
			if clikit.HasMark(f, m) && !seen[f.Name] {
				seen[f.Name] = true
				out = append(out, f)
			}
		})
	}
	return out
}

// TestOperatorListIsTheMarks derives the operator's settings from the
// flags marked clikit.Operator in the three programs and checks that the
// MCP command's declarations (mcpcmd.OperatorFlags, plus clikit's own
// --config and --state-dir) are exactly those: a flag marked Operator
// somewhere else would not be the server's. And no tool offers one as an
// argument.
func TestOperatorListIsTheMarks(t *testing.T) {
	set := map[string]bool{}
	for _, p := range []*clikit.Program{agentsh.Program(), agentjob.Program(), agentfs.Program()} {
		env := &clikit.Env{Program: p, In: strings.NewReader(""), Out: io.Discard, Err: io.Discard,
			LookupEnv: func(string) (string, bool) { return "", false }, Environ: func() []string { return nil }}
		for _, n := range clikit.MarkedFlags(clikit.NewRoot(env), clikit.Operator) {
			set[n] = true
		}
		ts, err := mcpserver.Describe(p, mcpserver.DescribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range ts.Tools {
			props, _ := tool.InputSchema["properties"].(map[string]any)
			for _, k := range tool.Operator {
				if _, ok := props[k]; ok {
					t.Errorf("%s offers the operator's %s as an argument", tool.Name, k)
				}
			}
		}
	}
	var marks []string
	for n := range set {
		marks = append(marks, n)
	}
	sort.Strings(marks)
	var dir string
	bare := clikit.NewRoot(&clikit.Env{Program: &clikit.Program{Name: "bare",
		Build: func(root *cobra.Command, _ *clikit.Env) { clikit.AddStateDirFlag(root, &dir) }},
		In: strings.NewReader(""), Out: io.Discard, Err: io.Discard})
	own := clikit.MarkedFlags(bare, clikit.Operator)
	if strings.Join(own, " ") != "config state-dir" {
		t.Errorf("clikit's own operator flags: %v", own)
	}
	list := append(own, mcpcmd.OperatorFlags()...)
	sort.Strings(list)
	if strings.Join(marks, " ") != strings.Join(list, " ") {
		t.Errorf("flags marked Operator:\n  %v\nmcpcmd.OperatorFlags() and clikit's:\n  %v", marks, list)
	}
	// The server takes a flag for each but those marked NotForwarded.
	served := strings.Join(mcpcmd.ServerFlags(), " ")
	for _, n := range []string{"approved", "sandbox-lock", "config", "state-dir"} {
		if strings.Contains(" "+served+" ", " "+n+" ") {
			t.Errorf("the server forwards --%s: %s", n, served)
		}
	}
	for _, n := range []string{"sandbox", "allow-host", "user-caches", "policy", "root", "max-file-size"} {
		if !strings.Contains(" "+served+" ", " "+n+" ") {
			t.Errorf("the server does not forward --%s: %s", n, served)
		}
	}
}

// TestMarkedKeysRefused attacks the marks: every flag a tool's command
// marks Operator, NoRequest, LocalFile or ServerOwned is refused as an MCP tool argument, and every
// NoRequest flag is refused as a --request key by the program itself.
func TestMarkedKeysRefused(t *testing.T) {
	dir := t.TempDir()
	s := start(t, "agentsh", dir, "--all")
	tried := 0
	for prog, tools := range programRoots() {
		for _, tool := range tools {
			base := map[string]any{}
			refused := append(marked(tool, clikit.Operator), marked(tool, clikit.NoRequest)...)
			refused = append(refused, marked(tool, clikit.LocalFile)...)
			for _, f := range append(refused, marked(tool, clikit.ServerOwned)...) {
				key := clikit.ConfigKey(f.Name)
				args := map[string]any{key: "x"}
				for k, v := range base {
					args[k] = v
				}
				res, m := s.call(testCtx(t), tool.Name, args)
				e, _ := m["error"].(map[string]any)
				if !res.IsError || e["code"] != "invalid_request" {
					t.Errorf("MCP %s with %q: isError=%v result %v", tool.Name, key, res.IsError, m)
				}
				tried++
			}
			for _, f := range marked(tool, clikit.NoRequest) {
				key := clikit.ConfigKey(f.Name)
				req := filepath.Join(t.TempDir(), "req.json")
				if err := os.WriteFile(req, []byte(`{"`+key+`": "x"}`), 0o600); err != nil {
					t.Fatal(err)
				}
				argv := append(strings.Fields(tool.Command.CommandPath())[1:], "--request", req)
				cmd := exec.Command(filepath.Join(binDir, prog), argv...)
				cmd.Dir = dir
				cmd.Env = testEnv(t)
				out, _ := cmd.Output()
				if !strings.Contains(string(out), `"code":"invalid_request"`) {
					t.Errorf("%s %v with request key %q: %s", prog, argv, key, out)
				}
				tried++
			}
		}
	}
	if tried < 50 {
		t.Fatalf("only %d refusals tried: are the marks there?", tried)
	}
}

// TestHelpNamesMarkedKeys: each program's mcp help names every argument
// its tools refuse by a mark (ServerOwned, LocalFile, FileRef), because
// the lists are derived from those marks, and names no other.
func TestHelpNamesMarkedKeys(t *testing.T) {
	for _, p := range []*clikit.Program{agentsh.Program(), agentjob.Program(), agentfs.Program()} {
		env := &clikit.Env{Program: p, In: strings.NewReader(""), Out: io.Discard, Err: io.Discard,
			LookupEnv: func(string) (string, bool) { return "", false }, Environ: func() []string { return nil }}
		root := clikit.NewRoot(env)
		mcp, _, err := root.Find([]string{"mcp"})
		if err != nil || mcp.Name() != "mcp" {
			t.Fatalf("%s has no mcp command: %v", p.Name, err)
		}
		long := strings.Join(strings.Fields(mcp.Long), " ")
		want := map[string]bool{}
		for _, tool := range clikit.Tools(root) {
			for _, m := range []clikit.Mark{clikit.ServerOwned, clikit.LocalFile, clikit.FileRef} {
				for _, f := range marked(tool, m) {
					want[clikit.ConfigKey(f.Name)] = true
				}
			}
		}
		if len(want) == 0 {
			t.Fatalf("%s: no marked keys at all", p.Name)
		}
		names := func(k string) bool {
			return regexp.MustCompile(`(^|[^a-z_])` + regexp.QuoteMeta(k) + `([^a-z_]|$)`).MatchString(long)
		}
		for k := range want {
			if !names(k) {
				t.Errorf("%s mcp --help does not name %s:\n%s", p.Name, k, long)
			}
		}
		for _, k := range []string{"stdin_file", "save_output", "content_file", "patch_file", "stream", "tee", "exit_zero"} {
			if !want[k] && names(k) {
				t.Errorf("%s mcp --help names %s, which none of its tools refuses", p.Name, k)
			}
		}
	}
}
