// Package launch starts the detached servers of agentplane, a session's
// server and a job's supervisor, and carries their one handshake: the
// launcher passes a pipe as fd 3 (HandshakeFD), the server writes one JSON
// line on it and closes it,
//
//	{"ok":true}                                   it serves
//	{"ok":false,"error":{"code":…,"message":…}}   it refused: a result.Error
//
// and the launcher returns either nil or that error. No sleeping and no
// polling: the read returns when the server answers or dies (end of file).
package launch

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/result"
)

// HandshakeFD is the descriptor on which a server finds the handshake pipe.
const HandshakeFD = 3

// ErrNoAnswer is what Start returns, wrapped, when the server died or did
// not answer before the context ended.
var ErrNoAnswer = errors.New("the server did not answer")

type handshake struct {
	OK    bool       `json:"ok"`
	Error *wireError `json:"error,omitempty"`
}

// wireError is a result.Error on the wire.
type wireError struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// Handshake returns the server's end of the handshake pipe.
func Handshake() *os.File { return os.NewFile(HandshakeFD, "handshake") }

// Answer completes the handshake from the server's side: err nil means it
// serves; otherwise the launcher gets err as a *result.Error (code and
// details kept). w is closed. A nil w (a server started by hand) is fine.
func Answer(w io.WriteCloser, err error) {
	if w == nil {
		return
	}
	hs := handshake{OK: err == nil}
	if err != nil {
		e := result.AsError(err)
		hs.Error = &wireError{Code: e.Code, Message: e.Message, Details: e.Details}
	}
	b, _ := json.Marshal(hs)
	_, _ = w.Write(append(b, '\n'))
	_ = w.Close()
}

// Start starts cmd as a detached server and waits for its handshake until
// ctx ends. The server gets a session of its own (no controlling terminal;
// neither a hangup nor a kill of the caller's process group reaches it),
// leaves any containment guard of the caller (proctree.Detach), and the
// handshake pipe as fd 3: cmd.ExtraFiles must be empty. cmd.Env nil means
// this process's environment.
//
// It returns the server's process and a channel closed once it has exited
// (a goroutine reaps it while this process lives); the error is the
// server's refusal (*result.Error; the server is then exiting), or
// ErrNoAnswer wrapped when it died or did not answer in time, in which case
// it has been SIGKILLed and reaped.
func Start(ctx context.Context, cmd *exec.Cmd) (*os.Process, <-chan struct{}, error) {
	if len(cmd.ExtraFiles) != 0 {
		return nil, nil, errors.New("launch: the handshake must be the server's first extra file")
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	detached, err := proctree.Detach(cmd)
	if err != nil {
		return nil, nil, err
	}
	defer detached()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer pr.Close()
	cmd.ExtraFiles = []*os.File{pw}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return nil, nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	if d, ok := ctx.Deadline(); ok {
		_ = pr.SetReadDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = pr.SetReadDeadline(time.Now()) })
	defer stop()
	line, rerr := bufio.NewReader(io.LimitReader(pr, 64<<10)).ReadBytes('\n')
	var hs handshake
	if jerr := json.Unmarshal(line, &hs); jerr == nil {
		if hs.OK {
			return cmd.Process, exited, nil
		}
		if hs.Error != nil {
			return cmd.Process, exited, &result.Error{Code: hs.Error.Code, Message: hs.Error.Message, Details: hs.Error.Details}
		}
	}
	// No answer: it died, or the deadline passed (then it must not stay
	// half-started).
	_ = cmd.Process.Kill()
	<-exited
	if rerr == nil || errors.Is(rerr, io.EOF) {
		return cmd.Process, exited, ErrNoAnswer
	}
	return cmd.Process, exited, errors.Join(ErrNoAnswer, rerr)
}
