package confine

import "golang.org/x/sys/unix"

// SeccompArch: this architecture has a filter.
const SeccompArch = true

const auditArch = unix.AUDIT_ARCH_AARCH64

// arm64 has no second syscall ABI to refuse.
const x32Bit = 0

// archRules is empty: arm64 has only the *at syscalls.
func archRules() []syscallRule { return nil }
