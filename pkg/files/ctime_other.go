//go:build !linux

package files

import "syscall"

func ctimOf(st *syscall.Stat_t) syscall.Timespec { return st.Ctimespec }
