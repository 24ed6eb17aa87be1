// Package early starts, while the program's packages are still being
// initialised, the work of a one-shot agentsh call that does not need
// them: catching SIGINT and SIGTERM, and the containment guard's watchdog
// (its cgroup, its fork and exec). Initialising agentsh's packages takes
// about 1.5 ms; started here, on a goroutine of its own, the guard is
// ready by the time main is, instead of about a millisecond after the
// call would start its command.
//
// It starts only for a process that is agentsh (argv[0] named so, not a
// test binary) running a one-shot call (OneShot); anything else gets the
// guard later, from the run itself, and the signals from clikit.Main.
// This package imports only what the guard needs, so that it is
// initialised before the program's larger packages.
package early

import (
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentplane/agentplane/pkg/proctree"
	"github.com/agentplane/agentplane/pkg/sandbox/spawn"
)

var (
	// Signals receives SIGINT and SIGTERM from the start of a one-shot
	// call (nil otherwise); clikit.Main then catches none itself. They are
	// caught on the guard's goroutine once the watchdog has started, and
	// the command starts only after both (Guard waits for the two): the
	// runtime's first signal.Notify parks a thread of its own and starts
	// another, about 0.3 ms in all, which a fork in progress delays by
	// about a millisecond, and which on the main goroutine (during
	// initialisation, or in Main while the guard's goroutine held the
	// signal table) stalled the call for as long. A signal before then
	// ends agentsh as one during the runtime's start does: no command has
	// started, and the watchdog removes the empty cgroup.
	Signals chan os.Signal

	guard  *proctree.Pending
	helper *spawn.Helper
)

func init() {
	if !agentsh(os.Args[0]) || !OneShot(os.Args[1:]) {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return // the run starts its guard itself, and says why it cannot
	}
	// On a goroutine of their own, beside the rest of the packages'
	// initialisation: the guard's cgroup, then, when the call asks for a
	// sandbox, its helper, started there on a goroutine of its own, and
	// meanwhile the watchdog, then the signals.
	var onCgroup func(fd int)
	if asked, netns := Sandboxed(os.Args[1:]); asked {
		if helper = spawn.New(netns, exe, "agentsh"); helper != nil {
			onCgroup = helper.Start
		}
	}
	Signals = make(chan os.Signal, 1)
	proctree.Seal()
	guard = proctree.StartGuardAsync([]string{exe, proctree.WatchdogCommand}, onCgroup, func() {
		signal.Notify(Signals, syscall.SIGINT, syscall.SIGTERM)
	})
}

// Helper returns the sandbox's helper started at initialisation, once
// (nil if none was, or on a later call): the run hands itself to it
// (sandbox.Prepared.Adopt) or discards it.
func Helper() *spawn.Helper {
	h := helper
	helper = nil
	return h
}

// Sandboxed guesses, from the arguments alone (before "--"), whether a
// one-shot call asks for a sandbox whose helper can start at
// initialisation, and whether it gets a network namespace: a sandbox mode
// other than none, a limit, a hidden path, --user or --net none; not
// --net proxy or --allow-host, whose helper needs the proxy at its start.
// A wrong guess costs a helper started in vain (the run discards one
// whose namespaces or program are not its sandbox's), or one not started
// ahead: the sandbox's defaults from the configuration are not seen here.
func Sandboxed(args []string) (asked, netns bool) {
	net := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		name, value, inline := strings.Cut(a, "=")
		if !inline && i+1 < len(args) {
			value = args[i+1]
		}
		switch name {
		case "--sandbox":
			asked = asked || value != "none"
		case "--net":
			net = value
		case "--allow-host":
			return false, false
		case "--deny-read", "--memory", "--cpu-time", "--pids", "--file-size", "--nofile", "--user":
			asked = true
		}
	}
	switch net {
	case "none":
		return true, true
	case "proxy":
		return false, false
	}
	return asked, false
}

// agentsh reports whether argv0 names agentsh (an installed or renamed
// copy such as agentsh-1.2, not a test binary).
func agentsh(argv0 string) bool {
	base := filepath.Base(argv0)
	return strings.HasPrefix(base, "agentsh") && !strings.HasSuffix(base, ".test")
}

// Guard returns the watchdog started at initialisation, once (nil if none
// was, or on a later call): the caller releases it.
func Guard() *proctree.Pending {
	g := guard
	guard = nil
	return g
}

// StartGuard starts agentsh's watchdog in the background. Both it and
// the watchdog started at initialisation seal agentsh first
// (proctree.Seal): the command, as the same user, must not take a copy of
// agentsh's ends of the watchdog's and the keeper's streams.
func StartGuard() *proctree.Pending {
	proctree.Seal()
	exe, err := os.Executable()
	if err != nil {
		return proctree.StartGuardAsync(nil, nil, nil) // which fails, saying so
	}
	return proctree.StartGuardAsync([]string{exe, proctree.WatchdogCommand}, nil, nil)
}

// OneShot guesses, from the arguments alone, whether args are a one-shot
// run rather than a hidden entry point, a subcommand, a help request or a
// call in a session (whose server has a guard of its own): the first
// argument, and a --session among the arguments before "--". A wrong
// guess costs one watchdog started in vain, or one started later, never a
// call without one: a run whose watchdog was not started starts it itself.
func OneShot(args []string) bool {
	if len(args) == 0 || strings.HasPrefix(args[0], "__") {
		return false
	}
	switch args[0] {
	case "session", "sandbox", "check", "audit", "mcp", "help", "completion", "--help", "-h", "--version":
		return false
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--session" || strings.HasPrefix(a, "--session=") {
			return false
		}
	}
	return true
}
