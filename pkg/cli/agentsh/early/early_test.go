package early

import "testing"

// TestOneShot: the watchdog starts early only for what looks like a
// one-shot run; a session call's server has a guard of its own, so its
// client starting one (a cgroup and a process) is pure cost, and a hidden
// entry point (the sandbox helper, a session server) is no call at all.
func TestOneShot(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--", "true"}, true},
		{[]string{"-c", "make test"}, true},
		{[]string{"--cwd", "/tmp", "ls"}, true},
		{[]string{"-c", "echo --session"}, true},         // the command's text
		{[]string{"--", "prog", "--session", "x"}, true}, // the program's argument
		{[]string{"--request", "-"}, true},
		{[]string{"--session", "h", "-c", "true"}, false},
		{[]string{"--session=h", "-c", "true"}, false},
		{[]string{"--pretty", "--session", "h", "-c", "true"}, false},
		{[]string{"session", "start"}, false},
		{[]string{"mcp"}, false},
		{[]string{"--state-dir", "d", "--session", "ses_x", "-c", "true"}, false},
		{[]string{"--help"}, false},
		{[]string{"__session-serve", "d", "1"}, false}, // a hidden entry point
		{nil, false},
	} {
		if got := OneShot(tc.args); got != tc.want {
			t.Errorf("OneShot(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestAgentsh: the early start is for agentsh itself, renamed or not, and
// never for a test binary.
func TestAgentsh(t *testing.T) {
	for argv0, want := range map[string]bool{"agentsh": true, "/usr/local/bin/agentsh": true, "agentsh-1.2": true,
		"/tmp/x/agentsh.test": false, "agentjob": false, "sh": false} {
		if got := agentsh(argv0); got != want {
			t.Errorf("agentsh(%q) = %v, want %v", argv0, got, want)
		}
	}
}
