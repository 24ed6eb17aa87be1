package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"unsafe"

	"github.com/agentplane/agentplane/pkg/result"
	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

func (h *helper) run(argv []string) int {
	sp := h.sp
	for _, dir := range sp.Cgroups {
		// The whole process moves; everything it starts stays inside.
		pid := strconv.Itoa(os.Getpid())
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0); err != nil {
			return h.fail(exitSetupFailed, result.CodeSandboxFailed, "cannot join cgroup %s: %v", dir, unwrap(err))
		}
	}
	if sp.NetNone {
		if err := loopbackUp(); err != nil {
			return h.fail(exitSetupFailed, result.CodeSandboxFailed, "cannot bring up the loopback interface: %v", err)
		}
	}
	if len(sp.DenyDirs)+len(sp.DenyFiles) > 0 {
		if err := hidePaths(sp.DenyDirs, sp.DenyFiles); err != nil {
			return h.fail(exitSetupFailed, result.CodeSandboxFailed, "%v", err)
		}
	}
	if sp.DropCaps {
		if err := dropBoundingSet(); err != nil {
			return h.fail(exitSetupFailed, result.CodeSandboxFailed, "cannot drop capabilities: %v", err)
		}
	}
	if sp.ClearAmbient {
		// A non-root target then starts with no capabilities at all, in
		// its user namespace too, so it cannot undo the mounts.
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
			return h.fail(exitSetupFailed, result.CodeSandboxFailed, "cannot clear ambient capabilities: %v", err)
		}
	}
	if sp.UID >= 0 {
		if err := switchUser(sp.UID, sp.GID, sp.Groups); err != nil {
			return h.fail(exitSetupFailed, result.CodeSandboxFailed, "cannot switch to uid %d: %v", sp.UID, err)
		}
	}
	if sp.DropCaps {
		if err := limitCaps(); err != nil {
			return h.fail(exitSetupFailed, result.CodeSandboxFailed, "cannot drop capabilities: %v", err)
		}
	}
	// Set on every sandboxed run: a setuid or file-capability binary then
	// runs without gaining anything.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return h.fail(exitSetupFailed, result.CodeSandboxFailed, "cannot set no_new_privs: %v", err)
	}
	if sp.LandlockABI > 0 {
		if err := restrictFS(sp.LandlockABI, sp.Writable, sp.WriteFiles); err != nil {
			return h.fail(exitSetupFailed, result.CodeSandboxFailed, "cannot apply the Landlock policy: %v", err)
		}
	}
	return h.exec(argv)
}

// loopbackUp sets IFF_UP on lo, which a new network namespace starts
// without, so that servers on 127.0.0.1 work.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// hidePaths covers denied directories with an empty read-only tmpfs and
// denied files with /dev/null, in the mount namespace the helper was
// started in. Landlock cannot carve a hole in an allowed tree; mounts can.
// The command cannot lift them: Landlock forbids mount changes, and root
// loses CAP_SYS_ADMIN with the bounding set.
func hidePaths(dirs, files []string) error {
	// Private first, so that nothing mounted here shows up outside.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("cannot make the mount namespace private: %v", err)
	}
	for _, d := range dirs {
		flags := uintptr(unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
		if err := unix.Mount("agentplane-deny", d, "tmpfs", flags, "size=4k,nr_inodes=1,mode=0555"); err != nil {
			return fmt.Errorf("cannot hide %s: %v", d, err)
		}
	}
	for _, f := range files {
		if err := unix.Mount("/dev/null", f, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("cannot hide %s: %v", f, err)
		}
	}
	return nil
}

// dropBoundingSet removes every capability but keptCaps from the bounding
// set, which limits what any later execve can grant, root included.
func dropBoundingSet() error {
	last := 63
	if v, err := readTrim("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(v); err == nil {
			last = n
		}
	}
	keep := map[int]bool{}
	for _, c := range keptCaps() {
		keep[c] = true
	}
	for c := 0; c <= last; c++ {
		if keep[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("capability %d: %v", c, err)
		}
	}
	return unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
}

// limitCaps reduces this thread's permitted and effective sets to keptCaps
// and empties the inheritable set, which execve would otherwise add to a
// root program's permitted set.
func limitCaps() error {
	var mask [2]uint32
	for _, c := range keptCaps() {
		mask[c/32] |= 1 << (c % 32)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	for i := range data {
		data[i].Permitted &= mask[i]
		data[i].Effective &= mask[i]
		data[i].Inheritable = 0
	}
	return unix.Capset(&hdr, &data[0])
}

// switchUser drops to uid/gid. The raw syscalls act on this thread, which
// is the one that execs.
func switchUser(uid, gid int, groups []int) error {
	gs := make([]uint32, len(groups))
	for i, g := range groups {
		gs[i] = uint32(g)
	}
	var gp *uint32
	if len(gs) > 0 {
		gp = &gs[0]
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gs)), uintptr(unsafe.Pointer(gp)), 0); e != 0 {
		return fmt.Errorf("setgroups: %v", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("setresgid: %v", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("setresuid: %v", e)
	}
	return nil
}

// landlockConfig picks the go-landlock preset for an ABI, without network
// rules: --net none is the namespace's job, and Landlock's TCP rules would
// also cut the loopback the contract keeps working.
func landlockConfig(abi int) (landlock.Config, error) {
	var c landlock.Config
	switch abi {
	case 3:
		c = landlock.V3
	case 4:
		c = landlock.V4
	case 5:
		c = landlock.V5
	case 6:
		c = landlock.V6
	case 7:
		c = landlock.V7
	default:
		return c, fmt.Errorf("unsupported Landlock ABI %d", abi)
	}
	c.HandledAccessNet = 0
	return c, nil
}

// restrictFS enforces read and execute everywhere and writes only under
// writable plus the harmless character devices. The config is strict (not
// best effort): a kernel that cannot do it is an error, never a weaker run.
// Since ABI 6 it also stops signals and abstract UNIX sockets from reaching
// processes outside the sandbox.
func restrictFS(abi int, writable, writeFiles []string) error {
	cfg, err := landlockConfig(abi)
	if err != nil {
		return err
	}
	rules := []landlock.Rule{
		landlock.RODirs("/"),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty").IgnoreIfMissing(),
	}
	if len(writable) > 0 {
		// Refer lets tools move files between directories of the
		// workspace (git, package managers), which RWDirs leaves out.
		rules = append(rules, landlock.RWDirs(writable...).WithRefer())
	}
	if len(writeFiles) > 0 {
		// Files only: no make_*, remove_* or refer rights beneath them.
		rules = append(rules, landlock.RWFiles(writeFiles...))
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return err
	}
	if fd < 0 {
		return errors.New("landlock produced no ruleset")
	}
	defer unix.Close(fd)
	return llsyscall.LandlockRestrictSelf(fd, flags)
}
