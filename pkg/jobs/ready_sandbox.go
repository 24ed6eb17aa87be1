package jobs

import (
	"context"
	"os"
	"os/exec"

	"github.com/agentplane/agentplane/pkg/sandbox"
)

// A sandboxed job's readiness probes run inside its sandbox: the sandbox
// helper, PID 1 of the job's namespaces, runs --ready-cmd with the job's
// confinement and dials --ready-tcp and --ready-http from the job's
// network namespace (which under --net none the host cannot reach). The
// supervisor talks to it over a control socket made for each run.

// sandboxProbe arranges the control socket on cmd (before its Args are
// built from sv.sandbox) when the job has a probe the helper must run. It
// returns the control and a function to call once cmd has started.
func (sv *supervisor) sandboxProbe(cmd *exec.Cmd) (ctl *sandbox.Control, started func(), err error) {
	p := sv.spec.Ready
	if sv.sandbox == nil {
		return nil, func() {}, nil
	}
	if p.Cmd == "" && p.TCP == "" && p.HTTP == "" {
		sv.sandbox.Control = false
		return nil, func() {}, nil
	}
	ctl, child, err := sandbox.NewControl()
	if err != nil {
		return nil, nil, err
	}
	sv.sandbox.Control = true
	cmd.ExtraFiles = append([]*os.File{child}, cmd.ExtraFiles...)
	return ctl, func() { child.Close() }, nil
}

// probeInSandbox is one readiness attempt through the helper.
func (sv *supervisor) probeInSandbox(ctx context.Context, ctl *sandbox.Control) bool {
	p := sv.spec.Ready
	switch {
	case p.HTTP != "":
		return ctl.Probe(ctx, sandbox.ProbeHTTP, p.HTTP, nil)
	case p.TCP != "":
		return ctl.Probe(ctx, sandbox.ProbeTCP, p.TCP, nil)
	case p.Cmd != "":
		shell := sv.spec.ShellProgram
		if shell == "" {
			shell = "sh"
		}
		return ctl.Probe(ctx, sandbox.ProbeCmd, "", []string{shell, "-c", p.Cmd})
	}
	return false
}
