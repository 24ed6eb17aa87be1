package confine

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock through its three system calls, without a library: the one the
// sandbox used (go-landlock) restricts every thread through libpsx, whose
// cgo makes the helper a dynamically linked program, about a millisecond
// more to start on every sandboxed call. The helper needs no more than the
// calling thread: it is the one that starts the target (and the readiness
// probes), and it never runs another goroutine (runtime.LockOSThread).

// Access rights (include/uapi/linux/landlock.h).
const (
	llExecute    = unix.LANDLOCK_ACCESS_FS_EXECUTE
	llWriteFile  = unix.LANDLOCK_ACCESS_FS_WRITE_FILE
	llReadFile   = unix.LANDLOCK_ACCESS_FS_READ_FILE
	llReadDir    = unix.LANDLOCK_ACCESS_FS_READ_DIR
	llRemoveDir  = unix.LANDLOCK_ACCESS_FS_REMOVE_DIR
	llRemoveFile = unix.LANDLOCK_ACCESS_FS_REMOVE_FILE
	llMakeChar   = unix.LANDLOCK_ACCESS_FS_MAKE_CHAR
	llMakeDir    = unix.LANDLOCK_ACCESS_FS_MAKE_DIR
	llMakeReg    = unix.LANDLOCK_ACCESS_FS_MAKE_REG
	llMakeSock   = unix.LANDLOCK_ACCESS_FS_MAKE_SOCK
	llMakeFifo   = unix.LANDLOCK_ACCESS_FS_MAKE_FIFO
	llMakeBlock  = unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK
	llMakeSym    = unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	llRefer      = unix.LANDLOCK_ACCESS_FS_REFER
	llTruncate   = unix.LANDLOCK_ACCESS_FS_TRUNCATE

	// What the rules grant: reading and executing; everything a
	// directory tree allows (refer, device ioctls and Unix socket
	// connects excepted); the rights that apply to files alone.
	llRead      = llExecute | llReadFile | llReadDir
	llReadWrite = llRead | llWriteFile | llRemoveDir | llRemoveFile | llMakeChar | llMakeDir | llMakeReg |
		llMakeSock | llMakeFifo | llMakeBlock | llMakeSym | llTruncate
	llFile = llExecute | llWriteFile | llTruncate | llReadFile
)

// rulesetAttr is struct landlock_ruleset_attr up to scoped (ABI 6); the
// kernel takes the size, so older kernels read only their part.
type rulesetAttr struct {
	handledFS  uint64
	handledNet uint64
	scoped     uint64
}

// LandlockABI returns the kernel's Landlock ABI version, 0 without Landlock.
func LandlockABI() int {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(v)
}

// handledFor is what a ruleset for ABI abi handles: every filesystem right
// that ABI knows (truncate from 3, device ioctls from 5), no network
// right (--net none is the namespace's job, and Landlock's TCP rules would
// also cut the loopback the contract keeps working), and from ABI 6 the
// signal and abstract Unix socket scopes.
func handledFor(abi int) (rulesetAttr, error) {
	var a rulesetAttr
	switch {
	case abi < 3 || abi > 7:
		return a, fmt.Errorf("unsupported Landlock ABI %d", abi)
	case abi >= 5:
		a.handledFS = 1<<16 - 1
	default:
		a.handledFS = 1<<15 - 1
	}
	if abi >= 6 {
		a.scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	}
	return a, nil
}

// llRule grants access (within what the ruleset handles) beneath paths.
type llRule struct {
	access  uint64
	paths   []string
	missing bool // a path that does not exist is skipped
	// ids, one per path when given, are the identities the runner
	// checked: the rule goes on that file, opened without following a
	// symbolic link (OpenChecked), or fails.
	ids []FileID
}

// restrictFS enforces read and execute everywhere and writes only under
// writable plus the harmless character devices, on the calling thread. A
// kernel that cannot do it all is an error, never a weaker run. Since ABI 6
// it also stops signals and abstract Unix sockets from reaching processes
// outside the sandbox. no_new_privs must be set already.
//
// Each writable root and write file is granted on the file of the
// identity the runner checked (writableIDs, writeFileIDs: one each), never
// wherever its path leads by now.
func restrictFS(abi int, writable []string, writableIDs []FileID, writeFiles []string, writeFileIDs []FileID) error {
	attr, err := handledFor(abi)
	if err != nil {
		return err
	}
	if len(writableIDs) != len(writable) || len(writeFileIDs) != len(writeFiles) {
		return fmt.Errorf("bad sandbox spec: %d writable roots and %d write files, %d and %d identities",
			len(writable), len(writeFiles), len(writableIDs), len(writeFileIDs))
	}
	rules := []llRule{
		{access: llRead, paths: []string{"/"}},
		{access: llReadWrite & llFile, paths: []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}, missing: true},
		// The private /dev's POSIX shared memory and terminals.
		{access: llReadWrite, paths: []string{"/dev/shm", "/dev/pts"}, missing: true},
		// Refer lets tools move files between directories of the
		// workspace (git, package managers).
		{access: llReadWrite | llRefer, paths: writable, ids: writableIDs},
		// Files only: no make_*, remove_* or refer rights beneath them.
		{access: llReadWrite & llFile, paths: writeFiles, ids: writeFileIDs},
	}
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if e != 0 {
		return fmt.Errorf("landlock_create_ruleset: %v", e)
	}
	defer unix.Close(int(fd))
	for _, r := range rules {
		for i, p := range r.paths {
			var id *FileID
			if r.ids != nil {
				id = &r.ids[i]
			}
			if err := addPathRule(int(fd), p, id, r.access&attr.handledFS); err != nil {
				if r.missing && errors.Is(err, unix.ENOENT) {
					continue
				}
				return fmt.Errorf("landlock rule for %s: %w", p, err)
			}
		}
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); e != 0 {
		return fmt.Errorf("landlock_restrict_self: %v", e)
	}
	return nil
}

// addPathRule grants access beneath path: the file of identity id when
// one is given (OpenChecked), else wherever path leads (the helper's own
// fixed paths: /, the devices).
func addPathRule(ruleset int, path string, id *FileID, access uint64) error {
	var fd int
	var err error
	if id != nil {
		fd, err = OpenChecked(path, *id)
	} else {
		fd, err = unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	attr := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	if _, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&attr)), 0, 0, 0); e != 0 {
		return e
	}
	return nil
}
