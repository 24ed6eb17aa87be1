package confine

import (
	"errors"

	"golang.org/x/sys/unix"
)

// The helper's half of the nested-git protection (package sandbox,
// gitcontrol_linux.go, finds the repositories): the pinned directories.

// pinDirs binds each directory onto itself (parents first), keeping the
// flags of the mount it is on: a mount point cannot be renamed or removed.
func pinDirs(dirs []string) error {
	for _, d := range dirs {
		if err := unix.Mount(d, d, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return err
		}
	}
	return nil
}
