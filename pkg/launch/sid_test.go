package launch

import "golang.org/x/sys/unix"

func sessionOf(pid int) (int, error) { return unix.Getsid(pid) }
