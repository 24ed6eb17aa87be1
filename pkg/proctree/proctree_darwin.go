package proctree

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ReadStat reads pid's entry of the kernel's process table (sysctl
// kern.proc.pid).
func ReadStat(pid int) (Stat, error) {
	if pid <= 0 {
		return Stat{}, fmt.Errorf("proctree: no process %d", pid)
	}
	k, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		// A pid that is not in the table comes back as an empty answer,
		// which x/sys reports as EIO.
		if errors.Is(err, unix.EIO) {
			return Stat{}, &os.SyscallError{Syscall: "sysctl kern.proc.pid", Err: unix.ESRCH}
		}
		return Stat{}, err
	}
	if int(k.Proc.P_pid) != pid {
		return Stat{}, &os.SyscallError{Syscall: "sysctl kern.proc.pid", Err: unix.ESRCH}
	}
	return statOf(k), nil
}

// statOf converts one kinfo_proc. The session id is not in kinfo_proc (it
// holds a kernel pointer instead), so it is asked for with getsid; a
// process that is gone by then, or a zombie, reports 0.
func statOf(k *unix.KinfoProc) Stat {
	pid := int(k.Proc.P_pid)
	sid, err := unix.Getsid(pid)
	if err != nil {
		sid = 0
	}
	return Stat{
		PID:       pid,
		PPID:      int(k.Eproc.Ppid),
		PGID:      int(k.Eproc.Pgid),
		SID:       sid,
		State:     stateLetter(k.Proc.P_stat),
		StartTime: startTime(k.Proc.P_starttime),
	}
}

// The p_stat values of <sys/proc.h>.
const (
	sIdle  = 1
	sRun   = 2
	sSleep = 3
	sStop  = 4
	sZomb  = 5
)

// stateLetter maps p_stat to the letters of Linux's /proc/PID/stat, so
// that Stat means the same on both systems.
func stateLetter(st int8) byte {
	switch st {
	case sZomb:
		return 'Z'
	case sStop:
		return 'T'
	case sSleep:
		return 'S'
	case sRun, sIdle:
		return 'R'
	}
	return '?'
}

// startTime turns p_starttime (wall-clock time of the fork) into one
// number, microseconds since the epoch. It only ever compares with itself.
func startTime(tv unix.Timeval) uint64 {
	return uint64(tv.Sec)*1_000_000 + uint64(tv.Usec)
}

// BootID returns an identity of this boot: kern.bootsessionuuid, a UUID
// the kernel makes at every boot, or, where that sysctl is missing, the
// boot time (kern.boottime) as "SECONDS.MICROS". The UUID comes first
// because the kernel recomputes kern.boottime when the wall clock is
// stepped, which would make a live owner look like one from an earlier
// boot.
func BootID() (string, error) {
	if id, err := unix.Sysctl("kern.bootsessionuuid"); err == nil && id != "" {
		return id, nil
	}
	tv, err := unix.SysctlTimeval("kern.boottime")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d.%06d", tv.Sec, tv.Usec), nil
}

// Snapshot reads every entry of the kernel's process table (sysctl
// kern.proc.all) in one call.
func Snapshot() ([]Stat, error) {
	ks, err := unix.SysctlKinfoProcSlice("kern.proc.all")
	if err != nil {
		return nil, err
	}
	out := make([]Stat, 0, len(ks))
	for i := range ks {
		if ks[i].Proc.P_pid <= 0 {
			continue // the kernel's own entry
		}
		out = append(out, statOf(&ks[i]))
	}
	return out, nil
}

// SetSubreaper has nothing to set on macOS, which has no subreaper: an
// orphan goes to launchd. It succeeds so that callers keep one code path;
// what that loses is in the package doc.
func SetSubreaper() error { return nil }

// hasChildren reports whether the calling process has any child, live or
// zombie, without reaping it: macOS has no waitid(WNOWAIT) in x/sys, so the
// process table is asked.
func hasChildren() bool {
	ks, err := unix.SysctlKinfoProcSlice("kern.proc.all")
	if err != nil {
		return true // let the caller's snapshot decide
	}
	self := int32(os.Getpid())
	for i := range ks {
		if ks[i].Eproc.Ppid == self && ks[i].Proc.P_pid != self {
			return true
		}
	}
	return false
}

// signalSession signals every process of session sid (the Session part
// of a Tree) but never the caller's own session: an orphan that left its
// group but not its session is still reached, although launchd is its
// parent now. A pid is not reused while it names a live session, so the
// members are those of the session leader that had this pid.
func signalSession(sid int, sig syscall.Signal) {
	if sid <= 1 || sid == os.Getpid() {
		return
	}
	if own, err := unix.Getsid(0); err != nil || own == sid {
		return
	}
	Tree{Session: ID{PID: sid}}.Signal(sig)
}

// Argv returns the command line of pid, from sysctl kern.procargs2.
func Argv(pid int) ([]string, error) {
	_, argv, _, err := procArgs(pid)
	return argv, err
}

// Executable returns the file pid was started from: the path kern.procargs2
// records for the exec. Unlike Linux's /proc/PID/exe it is a path, not
// the inode, so a file renamed over it since is what is returned.
func Executable(pid int) (os.FileInfo, error) {
	path, _, _, err := procArgs(pid)
	if err != nil {
		return nil, err
	}
	return os.Stat(path)
}

// procArgs reads kern.procargs2 for pid.
func procArgs(pid int) (string, []string, []string, error) {
	b, err := unix.SysctlRaw("kern.procargs2", pid)
	if err != nil {
		return "", nil, nil, err
	}
	return parseProcArgs(pid, b)
}

// Environ returns the environment pid was started with, from
// kern.procargs2 (only for processes of the caller's user, or as root).
func Environ(pid int) ([]string, error) {
	_, _, env, err := procArgs(pid)
	return env, err
}

// The parts of <sys/proc_info.h> Cwd needs: proc_pidinfo is the
// proc_info system call with PROC_INFO_CALL_PIDINFO, and the flavor
// PROC_PIDVNODEPATHINFO fills a struct proc_vnodepathinfo, whose first
// member is the working directory's struct vnode_info_path: a 152-byte
// struct vnode_info, then the path in MAXPATHLEN bytes.
const (
	procInfoCallPidInfo  = 2
	procPidVnodePathInfo = 9
	sizeofVnodeInfo      = 152
	maxPathLen           = 1024
	sizeofVnodePathInfo  = 2 * (sizeofVnodeInfo + maxPathLen)
)

// Cwd returns pid's working directory as the kernel knows it
// (proc_pidinfo PROC_PIDVNODEPATHINFO), whatever $PWD says.
func Cwd(pid int) (string, error) {
	var buf [sizeofVnodePathInfo]byte
	n, _, errno := unix.Syscall6(unix.SYS_PROC_INFO, procInfoCallPidInfo, uintptr(pid), procPidVnodePathInfo, 0,
		uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	if errno != 0 {
		return "", &os.SyscallError{Syscall: "proc_pidinfo", Err: errno}
	}
	if int(n) < sizeofVnodeInfo+maxPathLen {
		return "", fmt.Errorf("proctree: short proc_pidinfo answer for pid %d", pid)
	}
	path := unix.ByteSliceToString(buf[sizeofVnodeInfo : sizeofVnodeInfo+maxPathLen])
	if path == "" {
		return "", fmt.Errorf("proctree: no working directory for pid %d", pid)
	}
	return path, nil
}

// Children is not known here: macOS keeps no such lists.
func Children(pid, threads int) ([]int, error) {
	return nil, fmt.Errorf("proctree: no children lists on macOS")
}
