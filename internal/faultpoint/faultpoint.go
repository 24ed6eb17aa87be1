// Package faultpoint lets fault-injection tests stop a program at a named
// step and kill it there. It is compiled into the real binaries, so the
// tests attack the code that ships, and it is inert unless the environment
// variable Env names a step.
//
// Env holds a comma-separated list of NAME or NAME=ACTION. At Hit(NAME) the
// process carries out ACTION on itself: "kill" (the default) is SIGKILL, the
// crash with no clean-up at all; "stop" is SIGSTOP, which freezes the
// process there so the test can look at the state, act while it is frozen
// and then SIGKILL or SIGCONT it; "hang" blocks the calling goroutine there
// for ever, the process running on (not stopped: a parent that resumes its
// stopped helpers, proctree.ResumeStops, would undo a stop), until the
// test kills it; "late" is not carried out by Hit: the code at the step
// asks Late and puts the step off itself, to make certain an order of
// events that the kernel allows but seldom gives. A name may carry a count, NAME#N, to act on
// the N-th hit only (1-based), for steps that run repeatedly such as a log
// trim.
//
// The names are declared where the steps are (the Hit calls), and a test
// names them the same way; nothing else reads Env.
package faultpoint

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Env is the environment variable that arms fault points.
const Env = "AGENTPLANE_FAULTPOINT"

// hits counts the hits of points armed with #N. It lives only in processes
// whose environment arms a point.
var (
	hitsMu sync.Mutex
	hits   map[string]int
)

// Hit acts on the calling process if Env names step; otherwise it returns
// at once (one environment lookup).
func Hit(step string) {
	spec := os.Getenv(Env)
	if spec == "" {
		return
	}
	for _, item := range strings.Split(spec, ",") {
		name, action, _ := strings.Cut(strings.TrimSpace(item), "=")
		name, nth, counted := strings.Cut(name, "#")
		if name != step {
			continue
		}
		if counted {
			want, err := strconv.Atoi(nth)
			if err != nil || !reached(step, want) {
				continue
			}
		}
		if action == "late" {
			continue
		}
		if action == "hang" {
			for {
				time.Sleep(time.Hour)
			}
		}
		sig := syscall.SIGKILL
		if action == "stop" {
			sig = syscall.SIGSTOP
		}
		raise(sig)
		if sig == syscall.SIGKILL {
			select {} // the signal is on its way; never run past the step
		}
		return
	}
}

// Late reports whether Env names step with the action "late" (no count).
func Late(step string) bool {
	spec := os.Getenv(Env)
	if spec == "" {
		return false
	}
	for _, item := range strings.Split(spec, ",") {
		if name, action, _ := strings.Cut(strings.TrimSpace(item), "="); name == step && action == "late" {
			return true
		}
	}
	return false
}

// reached counts one more hit of step and reports whether it is the want-th.
func reached(step string, want int) bool {
	hitsMu.Lock()
	defer hitsMu.Unlock()
	if hits == nil {
		hits = map[string]int{}
	}
	hits[step]++
	return hits[step] == want
}
