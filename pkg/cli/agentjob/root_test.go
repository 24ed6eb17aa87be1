package agentjob

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/cli/clikit"
	"github.com/agentplane/agentplane/pkg/jobs"
	"github.com/agentplane/agentplane/pkg/result"
)

// TestStatusViewMatchesObject: a job in a list is rendered exactly like
// the same job on its own, minus "success".
func TestStatusViewMatchesObject(t *testing.T) {
	code, sig, ended := 3, "SIGTERM", "2026-01-01T00:00:00.000Z"
	for _, s := range []jobs.Status{
		{Handle: "job_a", Status: jobs.StatusRunning, PID: 7, Command: "sleep 1", Cwd: "/w", StartedAt: ended},
		{Handle: "job_b", Name: "web", Status: jobs.StatusFailed, ExitCode: &code, Signal: &sig, Command: []string{"x", "y"},
			EndedAt: &ended, Ready: true, Restarts: 2, StdoutBytes: 5, StderrBytes: 6, Description: "d", Reason: "ready_timeout"},
		{Handle: "job_c", Status: jobs.StatusLost, LostReason: jobs.LostSupervisorDied, OrphanPID: 99},
	} {
		one, err := result.Marshal(statusObject(result.New(), s))
		if err != nil {
			t.Fatal(err)
		}
		many, err := result.Marshal(statusList([]jobs.Status{s}))
		if err != nil {
			t.Fatal(err)
		}
		want := append(append([]byte("["), one...), ']')
		if !bytes.Equal(many, want) {
			t.Errorf("list renders\n%s\nbut status renders\n%s", many, want)
		}
		if !json.Valid(many) {
			t.Errorf("invalid JSON %s", many)
		}
	}
}

// TestNewCmdStartParsesFlags checks start's flag and argument parsing
// without running anything.
func TestNewCmdStartParsesFlags(t *testing.T) {
	var got *StartOptions
	p := &clikit.Program{Name: "agentjob", ExitCode: exitCode, Build: func(root *cobra.Command, env *clikit.Env) {
		dir := new(string)
		clikit.AddStateDirFlag(root, dir)
		root.AddCommand(NewCmdStart(env, dir, func(o *StartOptions) (*clikit.Outcome, error) {
			got = o
			return &clikit.Outcome{Value: result.New().Set("success", true)}, nil
		}))
	}}
	var out bytes.Buffer
	env := &clikit.Env{Program: p, In: strings.NewReader(""), Out: &out, Err: io.Discard, Ctx: context.Background(),
		LookupEnv: func(string) (string, bool) { return "", false }, Environ: func() []string { return nil }}
	code := clikit.Run(env, []string{"--state-dir", "st", "start", "--name", "web", "--ready-http", "http://127.0.0.1:1/",
		"--wait-ready", "--restart", "on-failure", "--max-restarts", "3", "--log-limit", "1K", "--env", "A=1",
		"--timeout", "90", "--", "prog", "--flag", "arg"})
	if code != 0 || got == nil {
		t.Fatalf("exit %d, output %s", code, out.String())
	}
	if got.Name != "web" || got.ReadyHTTP != "http://127.0.0.1:1/" || !got.WaitReady || got.Restart != "on-failure" ||
		got.MaxRestarts != 3 || got.LogLimit != 1024 || len(got.Vars) != 1 || got.Timeout != 90*time.Second || got.StateDir != "st" {
		t.Fatalf("parsed %+v", got)
	}
	if len(got.Argv) != 3 || got.Argv[0] != "prog" || got.Argv[1] != "--flag" {
		t.Fatalf("argv %q: flags after the program belong to it", got.Argv)
	}
}
