package confine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The mount namespace is where most of the confinement is drawn, as
// bubblewrap draws it: the whole tree read-only with the writable roots
// bound read-write on top (so chmod, chown, utimes and setxattr outside them
// fail with EROFS whatever the capabilities), a fresh /proc for the new PID
// namespace (no /proc/PID/root of any process outside), a minimal /dev
// (no block devices to read a deny-read file around the filesystem),
// agentplane's control files bound read-only, its secrets and the host's
// Unix sockets covered, and a cgroup filesystem of the run's own (read-only,
// so that limits cannot be left; showing no other run's cgroups). The helper builds it as PID 1 of the new namespaces and
// before it gives up its capabilities; nothing in it propagates outside.

// devNodes are the character devices a command may use; everything else
// in the host's /dev is absent.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

type clonedMount struct {
	path string
	fd   int
	// id is the identity the runner checked for the directory at path,
	// which the mount goes onto (bindWritable); zero for the helper's own
	// mount points.
	id FileID
}

// setupMounts builds the command's view of the filesystem. beforeReadOnly
// runs just before the root turns read-only, which fails while a file is
// open for writing on it: the helper moves its status file aside then, to
// a detached copy of its directory's mount, which setupMounts attaches
// below a temp area's cover (see keepDetached).
func setupMounts(sp Spec, beforeReadOnly func() (clonedMount, error)) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("cannot make the mount namespace private: %w", err)
	}
	// Detached copies of what must survive the read-only remount or the
	// new /dev: the writable roots with their own flags, and the devices.
	var writable, devs []clonedMount
	defer func() {
		for _, c := range append(writable, devs...) {
			_ = unix.Close(c.fd)
		}
	}()
	if sp.ReadOnlyRoot {
		if len(sp.WritableIDs) != len(sp.Writable) {
			return fmt.Errorf("bad sandbox spec: %d writable roots, %d identities", len(sp.Writable), len(sp.WritableIDs))
		}
		for i, w := range sp.Writable {
			fd, err := cloneChecked(w, sp.WritableIDs[i])
			if err != nil {
				return fmt.Errorf("cannot clone writable root %s: %w", w, unwrap(err))
			}
			writable = append(writable, clonedMount{path: w, fd: fd, id: sp.WritableIDs[i]})
		}
	}
	if !sp.ReadOnlyRoot && sp.TempDir != "" && len(sp.TempAreas) > 0 {
		// Only the run's own TMPDIR comes back through the covers.
		fd, err := unix.OpenTree(unix.AT_FDCWD, sp.TempDir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err == nil {
			err = restrictDetached(fd)
		}
		if err != nil {
			return fmt.Errorf("cannot clone the temp dir %s: %w", sp.TempDir, err)
		}
		writable = append(writable, clonedMount{path: sp.TempDir, fd: fd})
	}
	if sp.MinimalDev {
		for _, name := range devNodes {
			path := "/dev/" + name
			fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			if err != nil {
				return fmt.Errorf("cannot clone %s: %w", path, err)
			}
			devs = append(devs, clonedMount{path: path, fd: fd})
			// The node is the host's own (a clone of the host's /dev, which
			// the read-only root below does not reach): its mode, owner and
			// times stay the host's, which root may otherwise change
			// (Landlock restricts none of them). A read-only mount still
			// lets the device be opened for writing.
			if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC}); err != nil {
				return fmt.Errorf("cannot make %s read-only: %w", path, err)
			}
		}
	}
	if sp.ReadOnlyRoot {
		status, err := beforeReadOnly()
		if err != nil {
			return err
		}
		err = setAttr("/", true, unix.MOUNT_ATTR_RDONLY, 0)
		if err == nil {
			err = keepDetached(status, sp.TempAreas)
		}
		_ = unix.Close(status.fd)
		if err != nil {
			return fmt.Errorf("cannot make the root read-only: %w", err)
		}
		// Parents before children, so that a nested root lands on top.
		sort.SliceStable(writable, func(i, j int) bool { return len(writable[i].path) < len(writable[j].path) })
	} else if err := setAttr("/sys/fs/cgroup", true, unix.MOUNT_ATTR_RDONLY, 0); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		// Without a read-only root, the cgroup tree still must not be
		// writable: a command would move itself out of its limits.
		return fmt.Errorf("cannot make /sys/fs/cgroup read-only: %w", err)
	}
	// Other runs' temp dirs are covered (tempareas_linux.go), after the
	// writable roots that contain them and before those inside them.
	outside, inside := splitByArea(writable, sp.TempAreas)
	if err := bindWritable(outside); err != nil {
		return err
	}
	if err := coverTempAreas(sp.TempAreas, inside); err != nil {
		return err
	}
	if err := pinDirs(sp.Pinned); err != nil {
		return fmt.Errorf("cannot pin the directories above protected paths: %w", err)
	}
	if err := freshProc(sp.ReadOnlyRoot); err != nil {
		return err
	}
	if err := cgroupView(sp.Cgroups); err != nil {
		return err
	}
	if sp.MinimalDev {
		if err := minimalDev(devs); err != nil {
			return err
		}
	}
	if len(sp.ReadOnlyIDs) != len(sp.ReadOnly) {
		return fmt.Errorf("bad sandbox spec: %d read-only paths, %d identities", len(sp.ReadOnly), len(sp.ReadOnlyIDs))
	}
	for i, p := range sp.ReadOnly {
		if err := bindReadOnlyChecked(p, sp.ReadOnlyIDs[i]); err != nil {
			return fmt.Errorf("cannot protect %s: %w", p, unwrap(err))
		}
	}
	// The checked paths first: a host socket among them (a session's) is
	// covered by its path again after, harmlessly, where the other order
	// would find /dev/null in its place.
	if len(sp.HiddenIDs) != len(sp.Hidden) {
		return fmt.Errorf("bad sandbox spec: %d hidden paths, %d identities", len(sp.Hidden), len(sp.HiddenIDs))
	}
	for i, p := range sp.Hidden {
		if err := hideChecked(p, sp.HiddenIDs[i]); err != nil {
			return fmt.Errorf("cannot hide %s: %w", p, unwrap(err))
		}
	}
	return hidePaths(sp.DenyDirs, sp.DenyFiles)
}

// hideChecked covers the file or directory the runner saw at path (id),
// opened without following a symbolic link (OpenChecked), by its
// descriptor: a directory with an empty read-only tmpfs, anything else
// with a read-only /dev/null. One gone from its path may have moved (its
// parent renamed) and fails the run, as one that is another file now.
func hideChecked(path string, id FileID) error {
	fd, err := OpenChecked(path, id)
	if errors.Is(err, unix.ENOENT) {
		return &ChangedError{Path: path, What: "it is gone"}
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	var cover int
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		cover, err = emptyTmpfs()
	} else {
		cover, err = unix.OpenTree(unix.AT_FDCWD, "/dev/null", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err == nil {
			if err = unix.MountSetattr(cover, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
				_ = unix.Close(cover)
			}
		}
	}
	if err != nil {
		return err
	}
	defer unix.Close(cover)
	return unix.MoveMount(cover, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// emptyTmpfs is a detached, empty, read-only tmpfs (hidePaths' cover of a
// directory, made by the new mount API so that it can go onto a
// descriptor).
func emptyTmpfs() (int, error) {
	return detachedTmpfs("agentplane-deny", "1", "0555", unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
}

// detachedTmpfs is a detached tmpfs of 4 KiB named source, with at most
// inodes inodes, its root of mode mode, mounted with attr (MOUNT_ATTR_*),
// by the new mount API: a descriptor the caller moves where it goes.
func detachedTmpfs(source, inodes, mode string, attr uint64) (int, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fs)
	for _, kv := range [][2]string{{"source", source}, {"size", "4k"}, {"nr_inodes", inodes}, {"mode", mode}} {
		if err := unix.FsconfigSetString(fs, kv[0], kv[1]); err != nil {
			return -1, fmt.Errorf("tmpfs %s: %w", kv[0], err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, err
	}
	return unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, int(attr))
}

// cloneChecked makes a detached, recursive copy of the directory at path,
// nosuid and nodev, after checking that it is the directory id
// (OpenChecked): the copy is made from that descriptor, never by the path
// again.
func cloneChecked(path string, id FileID) (int, error) {
	dfd, err := OpenChecked(path, id)
	if err != nil {
		return -1, err
	}
	defer unix.Close(dfd)
	fd, err := unix.OpenTree(dfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, err
	}
	if err := restrictDetached(fd); err != nil {
		_ = unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// restrictDetached makes a detached tree nosuid and nodev before it is
// attached anywhere.
func restrictDetached(fd int) error {
	return unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE,
		&unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV})
}

// bindWritable attaches detached copies of writable roots at their paths.
// A root with an identity goes onto the directory opened without
// following a symbolic link and checked to be that one (a parent root
// bound before it is on the way, and holds the same directory): the path
// is never followed where a concurrent process could have swapped a
// component since the runner checked it.
func bindWritable(mounts []clonedMount) error {
	for _, c := range mounts {
		to, path, flags := unix.AT_FDCWD, c.path, unix.MOVE_MOUNT_F_EMPTY_PATH
		if c.id != (FileID{}) {
			fd, err := OpenChecked(c.path, c.id)
			if err != nil {
				return fmt.Errorf("cannot bind writable root %s: %w", c.path, unwrap(err))
			}
			defer unix.Close(fd)
			to, path, flags = fd, "", flags|unix.MOVE_MOUNT_T_EMPTY_PATH
		}
		if err := unix.MoveMount(c.fd, "", to, path, flags); err != nil {
			return fmt.Errorf("cannot bind writable root %s: %w", c.path, err)
		}
	}
	return nil
}

// setAttr changes mount attributes of path's mount (and below, when
// recursive) with mount_setattr(2).
func setAttr(path string, recursive bool, set, clr uint64) error {
	flags := uint(0)
	if recursive {
		flags = unix.AT_RECURSIVE
	}
	return unix.MountSetattr(unix.AT_FDCWD, path, flags, &unix.MountAttr{Attr_set: set, Attr_clr: clr})
}

// bindReadOnly makes path (a file or a directory) a read-only mount of
// itself. What is mounted below it keeps its flags: a writable root inside
// a protected directory (the private cache in the state directory) stays
// writable, and everything else below is read-only already.
func bindReadOnly(path string) error {
	if err := unix.Mount(path, path, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	return setAttr(path, false, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, 0)
}

// bindReadOnlyChecked is bindReadOnly for a path the runner checked: the
// file or directory at path is opened without following a symbolic link
// and must be id (OpenChecked); a read-only copy of it, made from that
// descriptor, goes onto it. A parent swapped since the check (the real
// state directory renamed away, a decoy in its place) fails the run
// rather than leaving the real one writable.
func bindReadOnlyChecked(path string, id FileID) error {
	fd, err := OpenChecked(path, id)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(tree)
	// The copy's own mount only: what is mounted below keeps its flags.
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH,
		&unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}); err != nil {
		return err
	}
	return unix.MoveMount(tree, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// freshProc mounts a procfs of the new PID namespace over /proc and keeps
// its kernel knobs read-only (a root command could otherwise write host-wide
// sysctls such as kernel.core_pattern). Under a read-only root the whole
// procfs is read-only: Landlock keeps the command from writing any of it
// already, but not from changing a mode, and the mode of a file such as
// /proc/meminfo is the kernel's one entry for it, which every procfs
// mounted after (the next run's, the host's once its cached inode goes)
// shows: chmod 0 /proc/meminfo would break ps and free for all of them.
func freshProc(readOnly bool) error {
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("proc", "/proc", "proc", flags, ""); err != nil {
		return fmt.Errorf("cannot mount a private /proc: %w", err)
	}
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"} {
		if err := bindReadOnly(p); errors.Is(err, unix.ENOENT) {
			continue // not in this kernel's procfs: nothing to keep read-only
		} else if err != nil {
			return fmt.Errorf("cannot make %s read-only: %w", p, err)
		}
	}
	return nil
}

// minimalDev replaces /dev by a small tmpfs holding the harmless character
// devices (bound from the host), a private devpts, /dev/shm and the usual
// links.
func minimalDev(devs []clonedMount) error {
	if err := unix.Mount("agentplane-dev", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64"); err != nil {
		return fmt.Errorf("cannot mount a private /dev: %w", err)
	}
	for _, d := range devs {
		// The mount point: an empty file, by one system call.
		if err := unix.Mknod(d.path, unix.S_IFREG|0o666, 0); err != nil {
			return fmt.Errorf("cannot create %s: %w", d.path, err)
		}
		if err := unix.MoveMount(d.fd, "", unix.AT_FDCWD, d.path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("cannot bind %s: %w", d.path, err)
		}
	}
	for _, dir := range []string{"/dev/pts", "/dev/shm"} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("cannot mount a private /dev/pts: %w", err)
	}
	if err := unix.Mount("agentplane-shm", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("cannot mount /dev/shm: %w", err)
	}
	links := [][2]string{{"/proc/self/fd", "/dev/fd"}, {"/proc/self/fd/0", "/dev/stdin"},
		{"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"}, {"pts/ptmx", "/dev/ptmx"}}
	for _, l := range links {
		if err := os.Symlink(l[0], l[1]); err != nil {
			return err
		}
	}
	// Nothing can be added to /dev afterwards (the submounts stay as they are).
	if err := setAttr("/dev", false, unix.MOUNT_ATTR_RDONLY, 0); err != nil {
		return fmt.Errorf("cannot make /dev read-only: %w", err)
	}
	return nil
}

// hidePaths covers directories with an empty read-only tmpfs and files
// (sockets included) with /dev/null. Landlock cannot carve a hole in an
// allowed tree; mounts can. The command cannot lift them: it has no
// CAP_SYS_ADMIN, and Landlock forbids mount changes.
func hidePaths(dirs, files []string) error {
	for _, d := range dirs {
		flags := uintptr(unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
		if err := unix.Mount("agentplane-deny", d, "tmpfs", flags, "size=4k,nr_inodes=1,mode=0555"); err != nil {
			return fmt.Errorf("cannot hide %s: %w", d, err)
		}
	}
	for _, f := range files {
		if err := unix.Mount("/dev/null", f, "", unix.MS_BIND, ""); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // gone since Prepare looked: nothing to hide
			}
			return fmt.Errorf("cannot hide %s: %w", f, err)
		}
		_ = setAttr(f, false, unix.MOUNT_ATTR_RDONLY, 0)
	}
	return nil
}

// openDetached opens path for writing through a detached copy of the
// mount of its directory, which keeps its own (writable) flags when the
// attached tree turns read-only, and is visible to no one else. It returns
// the copy too, for keepDetached.
func openDetached(path string) (*os.File, clonedMount, error) {
	dir := filepath.Dir(path)
	mfd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, clonedMount{}, err
	}
	fd, err := unix.Openat(mfd, filepath.Base(path), unix.O_WRONLY|unix.O_CLOEXEC|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		_ = unix.Close(mfd)
		return nil, clonedMount{}, err
	}
	return os.NewFile(uintptr(fd), path), clonedMount{path: dir, fd: mfd}, nil
}

// keepDetached attaches the detached copy m (the status file's directory,
// inside the run's temp area) at its own path, which the temp area's cover
// then hides. Closing the last descriptor of a detached mount unmounts it
// there and then, which waits for an RCU grace period (milliseconds on a
// loaded machine) on the helper's way to the command; attached, it goes
// with the rest of the namespace when the helper exits. Outside every
// area (no cover would hide it) it stays detached.
func keepDetached(m clonedMount, areas []string) error {
	if !insideAny(m.path, areas) {
		return nil
	}
	return unix.MoveMount(m.fd, "", unix.AT_FDCWD, m.path, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// cgroupRoot is where the cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupView replaces /sys/fs/cgroup by a read-only tmpfs holding, for
// each hierarchy in which the run has a cgroup of its own (own: the
// directories it joined, its memory and pids cgroups), a fresh mount of
// that hierarchy. The helper joined them and then made a cgroup namespace,
// so a mount made now is rooted at the run's cgroup: the command reads its
// own counters and limits (memory.usage_in_bytes, pids.max, …) at the usual
// paths and sees no other cgroup, no other run's names or counters. A
// hierarchy in which the run has no cgroup of its own would be rooted at
// the caller's, above every concurrent run's, and is left out.
func cgroupView(own []string) error {
	st, err := os.Stat(cgroupRoot)
	if err != nil || !st.IsDir() {
		return nil // no cgroups here to hide
	}
	var mounts []cgroupMount
	if len(own) > 0 {
		// Read only when needed: in the new namespace the table holds
		// every mount made above, and reading it costs more than all of
		// them.
		if mounts, err = cgroupMounts(); err != nil {
			return fmt.Errorf("cannot read the cgroup mounts: %w", err)
		}
	}
	var mine []cgroupMount
	for _, dir := range own {
		best := cgroupMount{}
		for _, m := range mounts {
			if (dir == m.point || strings.HasPrefix(dir, m.point+"/")) && len(m.point) > len(best.point) {
				best = m
			}
		}
		if best.point == "" || !strings.HasPrefix(best.point, cgroupRoot+"/") {
			return fmt.Errorf("cannot find the cgroup hierarchy of %s", dir)
		}
		mine = append(mine, best)
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if err := unix.Mount("agentplane-cgroup", cgroupRoot, "tmpfs", flags, "mode=0755,size=16k,nr_inodes=64"); err != nil {
		return fmt.Errorf("cannot cover %s: %w", cgroupRoot, err)
	}
	for _, h := range mine {
		if err := os.MkdirAll(h.point, 0o755); err != nil {
			return fmt.Errorf("cannot create %s: %w", h.point, err)
		}
		if err := unix.Mount("cgroup", h.point, h.fstype, flags, h.data); err != nil {
			return fmt.Errorf("cannot mount the run's own cgroup at %s: %w", h.point, err)
		}
	}
	// The tmpfs and every hierarchy on it: nothing to move to, nothing to
	// create.
	if err := setAttr(cgroupRoot, true, unix.MOUNT_ATTR_RDONLY, 0); err != nil {
		return fmt.Errorf("cannot make %s read-only: %w", cgroupRoot, err)
	}
	return nil
}

// cgroupMount is one cgroup hierarchy in the mount table: where it is
// mounted, its type (cgroup or cgroup2) and the options that name it (its
// controllers, or name=…).
type cgroupMount struct{ point, fstype, data string }

func cgroupMounts() ([]cgroupMount, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseCgroupMounts(string(b)), nil
}

// parseCgroupMounts reads the cgroup and cgroup2 mounts of a mountinfo
// table (proc(5)): ID PARENT MAJ:MIN ROOT POINT OPTIONS [TAGS...] - TYPE
// SOURCE SUPEROPTIONS.
func parseCgroupMounts(table string) []cgroupMount {
	var out []cgroupMount
	for _, line := range strings.Split(table, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 || (g[0] != "cgroup" && g[0] != "cgroup2") {
			continue
		}
		var opts []string
		for _, o := range strings.Split(g[2], ",") {
			if o != "rw" && o != "ro" && o != "" {
				opts = append(opts, o)
			}
		}
		out = append(out, cgroupMount{point: UnescapeMountinfo(f[4]), fstype: g[0], data: strings.Join(opts, ",")})
	}
	return out
}

// UnescapeMountinfo undoes the octal escapes of mountinfo (\040 for a
// space); pkg/sandbox's probes read mountinfo with it too.
func UnescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
