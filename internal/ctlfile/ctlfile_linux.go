package ctlfile

import (
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// openedPath is the kernel's path of the open file f (its descriptor's
// link in /proc), or, without /proc, its name resolved again.
func openedPath(f *os.File, path string, st os.FileInfo) string {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		return openedPathByName(path, st)
	}
	if strings.HasSuffix(p, " (deleted)") || !strings.HasPrefix(p, "/") {
		return "" // gone from every directory, or no path at all
	}
	return p
}

func links(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(s.Nlink)
	}
	return 1
}

// identity is the file's device, inode and birth time: an inode number
// is given again once freed (ext4 does so readily), a birth time with it
// only to the same file.
func identity(f *os.File, st os.FileInfo) string {
	if id := fdIdentity(int(f.Fd())); id != "" {
		return id
	}
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return strconv.FormatUint(uint64(s.Dev), 10) + ":" + strconv.FormatUint(uint64(s.Ino), 10)
	}
	return ""
}

// fsIocGetversion is FS_IOC_GETVERSION, _IOR('v', 1, long) on 64-bit
// Linux: the inode's generation, which ext4 draws anew for each inode it
// hands out, where the birth time only has the clock's coarse tick.
const fsIocGetversion = 0x80087601

// fdIdentity is device, inode, birth time and generation (those the
// file system keeps) of the open file fd.
func fdIdentity(fd int) string {
	var sx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_INO|unix.STATX_BTIME, &sx); err != nil {
		return ""
	}
	dev := unix.Mkdev(sx.Dev_major, sx.Dev_minor)
	id := strconv.FormatUint(dev, 10) + ":" + strconv.FormatUint(sx.Ino, 10)
	if sx.Mask&unix.STATX_BTIME != 0 {
		id += ":" + strconv.FormatInt(sx.Btime.Sec, 10) + "." + strconv.FormatUint(uint64(sx.Btime.Nsec), 10)
	}
	if strconv.IntSize == 64 {
		if gen, err := unix.IoctlGetInt(fd, fsIocGetversion); err == nil {
			id += ":g" + strconv.Itoa(gen)
		}
	}
	return id
}

// IdentityOf is identity for the file at path (its links followed), or ""
// when it cannot be told.
func IdentityOf(path string) string {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	return fdIdentity(fd)
}
