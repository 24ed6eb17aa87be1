package launch

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
)

// TestMain makes this test binary a server when LAUNCH_TEST_SERVER says
// how to behave.
func TestMain(m *testing.M) {
	switch os.Getenv("LAUNCH_TEST_SERVER") {
	case "":
		os.Exit(m.Run())
	case "ok":
		Answer(Handshake(), nil)
		time.Sleep(time.Hour) // a server keeps serving; the test kills it
	case "refuse":
		Answer(Handshake(), result.Errorf("shell_failed", "the shell did not start").With("hint", "see the log"))
	case "die":
		os.Exit(3)
	case "hang":
		time.Sleep(time.Hour)
	}
	os.Exit(0)
}

func server(how string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "LAUNCH_TEST_SERVER="+how)
	return cmd
}

func TestStart(t *testing.T) {
	ctx := context.Background()
	p, exited, err := Start(ctx, server("ok"))
	if err != nil {
		t.Fatal(err)
	}
	if sid, _ := sessionOf(p.Pid); sid != p.Pid {
		t.Errorf("the server does not lead its own session (sid %d)", sid)
	}
	_ = p.Kill()
	<-exited

	_, _, err = Start(ctx, server("refuse"))
	var re *result.Error
	if !errors.As(err, &re) || re.Code != "shell_failed" || re.Message != "the shell did not start" || re.Details["hint"] != "see the log" {
		t.Fatalf("refusal: %#v", err)
	}

	if _, _, err = Start(ctx, server("die")); !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("a server that died: %v", err)
	}

	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	p, exited, err = Start(tctx, server("hang"))
	if !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("a server that never answered: %v", err)
	}
	select {
	case <-exited: // killed and reaped, not left half-started
	default:
		t.Fatalf("the silent server %d still runs", p.Pid)
	}
}

// TestStartDropsCallersMarks: a detached server is not part of the job or
// the guarded command that started it, so it carries neither's mark (the
// job's supervisor mark, the guard token) and a kill of the caller's job
// by its mark spares it.
func TestStartDropsCallersMarks(t *testing.T) {
	cmd := server("ok")
	cmd.Env = append(cmd.Env, proctree.EnvJobMark+"=123.456", proctree.EnvToken+"=tok")
	p, exited, err := Start(context.Background(), cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Kill(); <-exited }()
	env, err := proctree.Environ(p.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, proctree.EnvJobMark+"=") || strings.HasPrefix(kv, proctree.EnvToken+"=") {
			t.Fatalf("the server carries its caller's mark %s", kv)
		}
	}
}
