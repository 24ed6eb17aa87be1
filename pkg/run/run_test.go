package run

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/capture"
	"github.com/agentplane/agentplane/pkg/result"
)

func env() []string { return []string{"PATH=/usr/local/bin:/usr/bin:/bin"} }

func TestRunTable(t *testing.T) {
	cases := []struct {
		name   string
		req    Request
		status string
		exit   int
		signal string
		stdout string
		stderr string
	}{
		{"exit code", Request{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}, StatusCompleted, 3, "", "out\n", "err\n"},
		{"stdin data", Request{Argv: []string{"cat"}, Stdin: []byte("fed")}, StatusCompleted, 0, "", "fed", ""},
		{"stdin default is empty", Request{Argv: []string{"sh", "-c", "read x; echo $?"}}, StatusCompleted, 0, "", "1\n", ""},
		{"signal", Request{Argv: []string{"sh", "-c", "kill -TERM $$"}}, StatusCompleted, 128 + 15, "SIGTERM", "", ""},
		{"timeout", Request{Argv: []string{"sh", "-c", "echo a; exec sleep 30"}, Timeout: 200 * time.Millisecond, KillAfter: time.Second}, StatusTimeout, 128 + 15, "SIGTERM", "a\n", ""},
		{"timeout then kill", Request{Argv: []string{"sh", "-c", "trap '' TERM; echo a; { while :; do sleep 1; done; } 2>/dev/null"}, Timeout: 200 * time.Millisecond, KillAfter: 200 * time.Millisecond}, StatusTimeout, 128 + 9, "SIGKILL", "a\n", ""},
		{"merge", Request{Argv: []string{"sh", "-c", "echo a; echo b >&2"}, Merge: true}, StatusCompleted, 0, "", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.req.Env = env()
			c.req.MaxOutput = 1000
			c.req.Drain = time.Second
			res, err := Run(context.Background(), c.req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != c.status || res.ExitCode != c.exit || res.Signal != c.signal {
				t.Fatalf("status %s exit %d signal %q, want %s %d %q", res.Status, res.ExitCode, res.Signal, c.status, c.exit, c.signal)
			}
			if c.req.Merge {
				out := string(res.Output.Snapshot().Head)
				if out != "a\nb\n" && out != "b\na\n" {
					t.Fatalf("merged output %q", out)
				}
				return
			}
			if got := string(res.Stdout.Snapshot().Head); got != c.stdout {
				t.Fatalf("stdout %q, want %q", got, c.stdout)
			}
			if got := string(res.Stderr.Snapshot().Head); got != c.stderr {
				t.Fatalf("stderr %q, want %q", got, c.stderr)
			}
		})
	}
}

func TestRunCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan *Result, 1)
	started := make(chan int, 1)
	go func() {
		r, err := Run(ctx, Request{Argv: []string{"sleep", "30"}, Env: env(), KillAfter: time.Second,
			OnStart: func(pid int) { started <- pid }})
		if err != nil {
			t.Error(err)
		}
		res <- r
	}()
	<-started
	cancel()
	r := <-res
	if r.Status != StatusCancelled || r.Signal != "SIGTERM" {
		t.Fatalf("status %s signal %s", r.Status, r.Signal)
	}
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		req  Request
		code string
	}{
		{Request{Argv: []string{"no-such-program-xyz"}, Env: env()}, result.CodeCommandNotFound},
		{Request{Argv: []string{noexec}, Env: env()}, result.CodeCommandNotExecutable},
		{Request{Argv: []string{dir}, Env: env()}, result.CodeCommandNotExecutable},
		{Request{Argv: []string{"true"}, Env: env(), Dir: filepath.Join(dir, "missing")}, result.CodeCwdNotFound},
		{Request{Argv: []string{"true"}, Env: env(), StdinFile: filepath.Join(dir, "missing")}, result.CodeStdinFile},
		{Request{Argv: []string{"true"}, Env: env(), StdinFile: dir}, result.CodeStdinFile},
		{Request{Argv: nil}, result.CodeInvalidRequest},
		// PATH comes from the command's environment, not ours.
		{Request{Argv: []string{"true"}, Env: []string{"PATH=" + dir}}, result.CodeCommandNotFound},
	}
	for _, c := range cases {
		_, err := Run(context.Background(), c.req)
		if got := result.AsError(err); got == nil || got.Code != c.code {
			t.Errorf("%v: error %v, want code %s", c.req.Argv, err, c.code)
		}
	}
}

func TestBoundedCapture(t *testing.T) {
	res, err := Run(context.Background(), Request{Argv: []string{"sh", "-c", "seq 1 100000"}, Env: env(), MaxOutput: 100, Keep: capture.KeepEnd})
	if err != nil {
		t.Fatal(err)
	}
	snap := res.Stdout.Snapshot()
	if snap.Total != 588895 || !snap.Truncated() || !strings.HasSuffix(string(snap.Tail), "100000\n") || len(snap.Head)+len(snap.Tail) != 100 {
		t.Fatalf("total %d truncated %v head %d tail %q", snap.Total, snap.Truncated(), len(snap.Head), snap.Tail)
	}
}
