//go:build !linux

package files

import "strconv"

// fdPath names the open descriptor fd as a path whose open duplicates it
// (fdesc's /dev/fd), not whatever a name now points to.
func fdPath(fd int) string { return "/dev/fd/" + strconv.Itoa(fd) }
