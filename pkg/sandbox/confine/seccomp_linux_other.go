//go:build linux && !amd64 && !arm64

package confine

import "golang.org/x/sys/unix"

// SeccompArch: no filter is written for this architecture, so a sandbox
// that needs one is refused as unavailable.
const SeccompArch = false

const auditArch = 0

const x32Bit = 0

func archRules() []syscallRule { return nil }

var _ = unix.EPERM
