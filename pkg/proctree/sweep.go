package proctree

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SweepDue reports whether a sweep of leftovers (the debris of killed
// processes, looked for at most once per every) is due now, and if so
// records that it ran: a stamp file named stamp plus the uid in dir (the
// temp dir when "") holds the time of the last one. It is due when this
// user's stamp is missing, older than every, dated in the future, or not
// a regular file of this user with one name (one planted by someone else
// never suppresses a sweep, and a hard link to another file of the user's,
// whose times would be set, is no stamp either).
func SweepDue(dir, stamp string, every time.Duration) bool {
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, stamp+strconv.Itoa(os.Getuid()))
	now := time.Now()
	st, err := os.Lstat(path)
	if err == nil {
		sys, ok := st.Sys().(*syscall.Stat_t)
		age := now.Sub(st.ModTime())
		stamp := st.Mode().IsRegular() && ok && int(sys.Uid) == os.Getuid() && sys.Nlink == 1
		if stamp && age >= 0 && age < every {
			return false
		}
		// Dated now, only when it is the user's own stamp: anything else
		// (a symlink, another user's file, a second name of another file
		// of the user's, which the times would be set on) is left as it
		// is, and every call sweeps, as without a stamp. (In a sticky temp
		// dir nobody else can put another file at the name meanwhile.)
		if stamp {
			_ = unix.UtimesNanoAt(unix.AT_FDCWD, path, nil, unix.AT_SYMLINK_NOFOLLOW)
		}
		return true
	}
	if f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600); err == nil {
		f.Close()
	}
	return true
}
