//go:build linux && !amd64 && !arm64

package sandbox

import "golang.org/x/sys/unix"

// seccompArch: no filter is written for this architecture, so a sandbox
// that needs one is refused as unavailable.
const seccompArch = false

const auditArch = 0

const x32Bit = 0

func archRules() []syscallRule { return nil }

var _ = unix.EPERM
