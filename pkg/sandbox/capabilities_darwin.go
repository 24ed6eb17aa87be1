package sandbox

import "os"

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

// Check reports what this machine can enforce, for `agentsh sandbox check`.
// On macOS the filesystem and network rules are Seatbelt's; the per-process
// rlimits hold as on Linux; what needs cgroups, namespaces or a subreaper
// is reported as not enforced, and asking for it fails with
// sandbox_unavailable.
func Check() map[string]any {
	c := Probe()
	seatbelt := c.SandboxExec != ""
	return map[string]any{
		"platform":     "darwin",
		"root":         c.Root,
		"seatbelt":     seatbelt,
		"sandbox_exec": c.SandboxExec,
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
