//go:build unix

package session

import "golang.org/x/sys/unix"

// dirWritable reports why dir cannot be written (a read-only file system,
// no permission), or nil.
func dirWritable(dir string) error {
	return unix.Access(dir, unix.W_OK)
}
