package confine

import "golang.org/x/sys/unix"

// SeccompArch: this architecture has a filter.
const SeccompArch = true

const auditArch = unix.AUDIT_ARCH_X86_64

// x32Bit marks the x32 ABI's syscall numbers, which reach the same kernel
// entry points under other numbers; they are refused wholesale.
const x32Bit = 0x40000000

// archRules covers the older syscalls amd64 still has beside the *at ones.
func archRules() []syscallRule {
	return []syscallRule{
		{name: "chmod(setid)", nr: unix.SYS_CHMOD, errno: unix.EPERM, argIndex: 1, argMask: setIDBits},
		{name: "creat(setid)", nr: unix.SYS_CREAT, errno: unix.EPERM, argIndex: 1, argMask: setIDBits},
		{name: "open(O_CREAT, setid)", nr: unix.SYS_OPEN, errno: unix.EPERM, argIndex: 2, argMask: setIDBits, flagsIndex: 1, modeOnFlags: true},
		{name: "mknod(setid)", nr: unix.SYS_MKNOD, errno: unix.EPERM, argIndex: 1, argMask: setIDBits},
	}
}
