package confine

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter covers what Landlock, the namespaces and the dropped
// capabilities do not: kernel interfaces that bypass the other layers
// (io_uring runs file operations outside the syscall path; AF_VSOCK sockets
// leave a network namespace; the key ring is not namespaced), prlimit on
// another process, and setting the setuid or setgid bit, which would let a
// root command plant a set-id program in a workspace that the user later
// runs outside the sandbox. Every decision is on a syscall number or a
// register argument, never on memory the command could change after the
// check.

// syscallRule says how one syscall is filtered.
type syscallRule struct {
	name  string
	nr    uint32
	errno unix.Errno
	// When argMask is non-zero the syscall is refused only if
	// args[argIndex] & argMask != 0; with modeOnFlags, only if moreover
	// args[flagsIndex] has O_CREAT or O_TMPFILE (the mode of an open that
	// creates nothing is meaningless). pidNonZero refuses a non-zero
	// args[argIndex] (prlimit on another process).
	argIndex    int
	argMask     uint32
	flagsIndex  int
	modeOnFlags bool
	pidNonZero  bool
	family      uint32 // socket: refuse this address family (args[0])
}

const setIDBits = unix.S_ISUID | unix.S_ISGID

const oTmpfile = 0o20000000 // __O_TMPFILE without O_DIRECTORY

// commonRules are the rules whose syscalls exist on every architecture.
func commonRules() []syscallRule {
	return []syscallRule{
		{name: "io_uring_setup", nr: unix.SYS_IO_URING_SETUP, errno: unix.ENOSYS},
		{name: "io_uring_enter", nr: unix.SYS_IO_URING_ENTER, errno: unix.ENOSYS},
		{name: "io_uring_register", nr: unix.SYS_IO_URING_REGISTER, errno: unix.ENOSYS},
		{name: "socket(AF_VSOCK)", nr: unix.SYS_SOCKET, errno: unix.EAFNOSUPPORT, family: unix.AF_VSOCK},
		{name: "socketpair(AF_VSOCK)", nr: unix.SYS_SOCKETPAIR, errno: unix.EAFNOSUPPORT, family: unix.AF_VSOCK},
		{name: "prlimit64(other pid)", nr: unix.SYS_PRLIMIT64, errno: unix.EPERM, argIndex: 0, pidNonZero: true},
		{name: "add_key", nr: unix.SYS_ADD_KEY, errno: unix.ENOSYS},
		{name: "request_key", nr: unix.SYS_REQUEST_KEY, errno: unix.ENOSYS},
		{name: "keyctl", nr: unix.SYS_KEYCTL, errno: unix.ENOSYS},
		{name: "bpf", nr: unix.SYS_BPF, errno: unix.EPERM},
		{name: "userfaultfd", nr: unix.SYS_USERFAULTFD, errno: unix.EPERM},
		{name: "perf_event_open", nr: unix.SYS_PERF_EVENT_OPEN, errno: unix.EPERM},
		{name: "kexec_load", nr: unix.SYS_KEXEC_LOAD, errno: unix.EPERM},
		{name: "open_by_handle_at", nr: unix.SYS_OPEN_BY_HANDLE_AT, errno: unix.EPERM},
		// openat2 takes its mode in a struct in user memory, which a filter
		// must not read; callers fall back to openat on ENOSYS.
		{name: "openat2", nr: unix.SYS_OPENAT2, errno: unix.ENOSYS},
		{name: "fchmod(setid)", nr: unix.SYS_FCHMOD, errno: unix.EPERM, argIndex: 1, argMask: setIDBits},
		{name: "fchmodat(setid)", nr: unix.SYS_FCHMODAT, errno: unix.EPERM, argIndex: 2, argMask: setIDBits},
		{name: "fchmodat2(setid)", nr: unix.SYS_FCHMODAT2, errno: unix.EPERM, argIndex: 2, argMask: setIDBits},
		{name: "openat(O_CREAT, setid)", nr: unix.SYS_OPENAT, errno: unix.EPERM, argIndex: 3, argMask: setIDBits, flagsIndex: 2, modeOnFlags: true},
		{name: "mknodat(setid)", nr: unix.SYS_MKNODAT, errno: unix.EPERM, argIndex: 2, argMask: setIDBits},
	}
}

// SeccompRules names what the filter refuses, for reports and docs.
func SeccompRules() []string {
	rules := filterRules()
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.name
	}
	return out
}

func filterRules() []syscallRule { return append(commonRules(), archRules()...) }

// seccomp_data offsets (include/uapi/linux/seccomp.h); the low 32 bits of
// an argument come first on the little-endian architectures supported.
const (
	offNr   = 0
	offArch = 4
)

func offArg(i int) uint32 { return 16 + 8*uint32(i) }

type bpfProg struct{ ins []unix.SockFilter }

func (p *bpfProg) stmt(code uint16, k uint32) {
	p.ins = append(p.ins, unix.SockFilter{Code: code, K: k})
}

func (p *bpfProg) jump(code uint16, k uint32, jt, jf uint8) {
	p.ins = append(p.ins, unix.SockFilter{Code: code, K: k, Jt: jt, Jf: jf})
}

const (
	ldAbs  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	jeqK   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	jgeK   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	jsetK  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	retK   = unix.BPF_RET | unix.BPF_K
	allow  = unix.SECCOMP_RET_ALLOW
	killPr = unix.SECCOMP_RET_KILL_PROCESS
)

func retErrno(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA }

// buildFilter assembles the sandbox's program.
func buildFilter() []unix.SockFilter { return buildFilterOf(filterRules()) }

// buildFilterOf assembles a program of rules. Each rule is a block entered
// when the syscall number matches; a block ends by returning its errno or
// allowing the call.
func buildFilterOf(rules []syscallRule) []unix.SockFilter {
	p := &bpfProg{}
	p.stmt(ldAbs, offArch)
	p.jump(jeqK, auditArch, 1, 0)
	p.stmt(retK, killPr) // a foreign ABI (e.g. 32-bit) could renumber syscalls
	p.stmt(ldAbs, offNr)
	if x32Bit != 0 {
		p.jump(jgeK, x32Bit, 0, 1)
		p.stmt(retK, retErrno(unix.ENOSYS))
	}
	for _, r := range rules {
		block := ruleBlock(r)
		// if nr != r.nr skip the block
		p.jump(jeqK, r.nr, 0, uint8(len(block)))
		p.ins = append(p.ins, block...)
	}
	p.stmt(retK, allow)
	return p.ins
}

// ruleBlock returns the instructions run when the syscall number matched;
// every block ends in a return, so none falls through into the next test.
func ruleBlock(r syscallRule) []unix.SockFilter {
	b := &bpfProg{}
	deny := retErrno(r.errno)
	switch {
	case r.family != 0:
		b.stmt(ldAbs, offArg(0))
		b.jump(jeqK, r.family, 0, 1)
		b.stmt(retK, deny)
		b.stmt(retK, allow)
	case r.pidNonZero:
		b.stmt(ldAbs, offArg(r.argIndex))
		b.jump(jeqK, 0, 0, 3)
		b.stmt(ldAbs, offArg(r.argIndex)+4)
		b.jump(jeqK, 0, 0, 1)
		b.stmt(retK, allow)
		b.stmt(retK, deny)
	case r.modeOnFlags:
		b.stmt(ldAbs, offArg(r.flagsIndex))
		b.jump(jsetK, unix.O_CREAT|oTmpfile, 0, 3)
		b.stmt(ldAbs, offArg(r.argIndex))
		b.jump(jsetK, r.argMask, 0, 1)
		b.stmt(retK, deny)
		b.stmt(retK, allow)
	case r.argMask != 0:
		b.stmt(ldAbs, offArg(r.argIndex))
		b.jump(jsetK, r.argMask, 0, 1)
		b.stmt(retK, deny)
		b.stmt(retK, allow)
	default:
		b.stmt(retK, deny)
	}
	return b.ins
}

// loadFilter installs the filter on the calling thread (no TSYNC: the
// helper's other threads stay as they are; the target inherits it from
// the thread that starts it). no_new_privs must be set already.
func loadFilter() error { return loadProgram(buildFilter()) }

func loadProgram(ins []unix.SockFilter) error {
	if len(ins) > 255 {
		// Jump offsets are 8 bits; the program is far below that, but a
		// rule table that grows past it must not silently mis-jump.
		return fmt.Errorf("seccomp program of %d instructions is too long", len(ins))
	}
	prog := unix.SockFprog{Len: uint16(len(ins)), Filter: &ins[0]}
	_, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog)))
	if e != 0 {
		return e
	}
	return nil
}
