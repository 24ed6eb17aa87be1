//go:build !linux

package execguard

import (
	"fmt"
	"os"

	"github.com/agentplane/agentplane/pkg/result"
)

// Available reports whether runtime enforcement can work on this platform
// (policy_unavailable when it cannot).
func Available() error {
	return result.Errorf(result.CodePolicyUnavailable,
		"runtime enforcement of the policy needs Linux ptrace; use --policy-enforce static to rely on the check before the call only")
}

// Main is the guard; without ptrace it refuses to run anything.
func Main(args []string) int {
	fmt.Fprintln(os.Stderr, "agentplane: runtime policy enforcement is not available on this platform")
	return exitRefused
}
