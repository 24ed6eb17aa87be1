package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Capabilities is what this machine can enforce, as far as can be told
// without starting a process. Prepare checks a policy against it; tests
// pass a doctored one to simulate a machine without sandbox-exec.
type Capabilities struct {
	Root bool // effective uid 0
	// SandboxExec is the path of sandbox-exec, or "" when it is missing.
	SandboxExec string
}

// Probe inspects the machine: whether agentsh runs as root and whether
// sandbox-exec is there. It starts nothing.
func Probe() Capabilities {
	c := Capabilities{Root: os.Geteuid() == 0}
	if st, err := os.Stat(SeatbeltExec); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		c.SandboxExec = SeatbeltExec
	}
	return c
}

// probeFor is Probe: it is cheap on macOS.
func probeFor(Policy) Capabilities { return Probe() }

// Check reports what this machine can enforce, for `agentsh sandbox check`.
// On macOS the filesystem and network rules are Seatbelt's; the per-process
// rlimits hold as on Linux; what needs cgroups, namespaces or a subreaper
// is reported as not enforced, and asking for it fails with
// sandbox_unavailable. Unlike Probe, Check starts one process: sandbox-exec
// with an allow-all profile, since a process that is itself inside a
// Seatbelt sandbox may not apply another (seatbelt_error says why).
func Check() map[string]any {
	c := Probe()
	seatbelt := c.SandboxExec != ""
	var seatbeltErr any
	if seatbelt {
		// sandbox-exec is there; whether it may apply a profile is known
		// only by trying (inside another Seatbelt sandbox it may not).
		if err := trySeatbelt(c.SandboxExec); err != nil {
			seatbelt, seatbeltErr = false, err.Error()
		}
	}
	return map[string]any{
		"platform":       "darwin",
		"root":           c.Root,
		"seatbelt":       seatbelt,
		"seatbelt_error": seatbeltErr,
		"sandbox_exec":   c.SandboxExec,
		// No subreaper: orphans go to launchd and are found through their
		// process group and session only (see pkg/proctree).
		"process_tree": "process_group_and_session",
		"enforceable": map[string]any{
			ModeReadOnly:       seatbelt,
			ModeWorkspaceWrite: seatbelt,
			"net_none":         seatbelt,
			"net_proxy":        false,
			"deny_read":        seatbelt,
			"memory":           false,
			"pids":             false,
			"cpu_time":         "rlimit_cpu",
			"file_size":        "rlimit_fsize",
			"nofile":           "rlimit_nofile",
			"user":             false,
			"no_new_privs":     false,
		},
	}
}

// trySeatbelt applies a profile that allows everything to true(1).
func trySeatbelt(sandboxExec string) error {
	out, err := exec.Command(sandboxExec, "-p", "(version 1)\n(allow default)\n", "--", "/usr/bin/true").CombinedOutput()
	if err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			return fmt.Errorf("%v: %s", err, msg)
		}
		return err
	}
	return nil
}
