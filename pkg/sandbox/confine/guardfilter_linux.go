package confine

import (
	"errors"

	"golang.org/x/sys/unix"
)

// The runtime policy guard traces the command's tree with ptrace, which
// follows every fork, vfork and clone unless the caller asks the kernel
// not to: clone(CLONE_UNTRACED) makes a child its tracer never sees, free
// to exec anything. clone3 takes its flags in memory a filter cannot
// read, so it is refused as a whole (ENOSYS: glibc and most runtimes then
// fall back to clone, whose flags are a register).
//
// A decision is made on the argv the kernel copied onto the new image's
// stack, which the program reads later, as it starts. process_vm_writev
// would let another process of the tree rewrite it in between (git
// status decided, git push run), so it is refused too (EPERM). The same
// write through /proc/PID/mem is an open and a write, which no filter can
// tell from others; a sandbox's read-only /proc refuses it.

// cloneFlagsArg is the argument of clone that holds the flags on the
// architectures with a filter (amd64, arm64).
const cloneFlagsArg = 0

func guardRules() []syscallRule {
	return []syscallRule{
		{name: "clone(CLONE_UNTRACED)", nr: unix.SYS_CLONE, errno: unix.EPERM, argIndex: cloneFlagsArg, argMask: unix.CLONE_UNTRACED},
		{name: "clone3", nr: unix.SYS_CLONE3, errno: unix.ENOSYS},
		{name: "process_vm_writev", nr: unix.SYS_PROCESS_VM_WRITEV, errno: unix.EPERM},
	}
}

// GuardRules names what the guard's filter refuses, for reports and docs.
func GuardRules() []string {
	var out []string
	for _, r := range guardRules() {
		out = append(out, r.name)
	}
	return out
}

// LoadGuardFilter installs the guard's filter on the calling thread (the
// one that starts the traced command, which inherits it; the guard itself
// never makes these calls). Without CAP_SYS_ADMIN the kernel wants
// no_new_privs first, which costs a traced command nothing: a tracer
// without CAP_SYS_PTRACE already makes set-id and file-capability
// programs run without their privileges.
func LoadGuardFilter() error {
	if !SeccompArch {
		return errors.New("no seccomp filter for this architecture")
	}
	ins := buildFilterOf(guardRules())
	err := loadProgram(ins)
	if errors.Is(err, unix.EACCES) {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return err
		}
		err = loadProgram(ins)
	}
	return err
}
