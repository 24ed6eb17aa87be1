package confine

import (
	"errors"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// PinLink starts an entry of Spec.Pinned that is a symbolic link on the
// way to a protected or hidden path (no absolute path starts with it).
const PinLink = "@"

// The helper's half of the nested-git protection (package sandbox,
// gitcontrol_linux.go, finds the repositories): the pinned directories.

// pinDirs binds each directory onto itself (parents first), keeping the
// flags of the mount it is on: a mount point cannot be renamed or removed.
func pinDirs(dirs []string) error {
	for _, d := range dirs {
		if link, ok := strings.CutPrefix(d, PinLink); ok {
			if err := pinLink(link); err != nil && !errors.Is(err, unix.ENOENT) {
				return err
			}
			continue
		}
		if err := unix.Mount(d, d, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return err
		}
	}
	return nil
}

// pinLink binds the symbolic link at path onto itself, through a
// descriptor of the link itself (a mount by its path would follow it):
// a mount point cannot be removed or renamed over, so the link keeps
// leading where it did. What is there may have been replaced since it
// was recorded: it is pinned as it is, unfollowed.
func pinLink(path string) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	self := "/proc/self/fd/" + strconv.Itoa(fd)
	return unix.Mount(self, self, "", unix.MS_BIND, "")
}
