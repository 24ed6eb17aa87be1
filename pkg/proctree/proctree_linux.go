package proctree

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ReadStat parses /proc/PID/stat. The command name may contain spaces and
// parentheses, so the fields are counted from the last ')'.
func ReadStat(pid int) (Stat, error) {
	var buf [1024]byte
	b, err := readProc("/proc/"+strconv.Itoa(pid)+"/stat", buf[:])
	if err != nil {
		return Stat{}, err
	}
	return parseStat(pid, b)
}

// Children lists the children of process pid from the kernel's lists
// (/proc/PID/task/TID/children): those of its main thread alone when
// threads is 1, else those of every thread. A child is on the list of the
// thread that forked it; an orphan reparented to pid is on the main
// thread's. A list read while one of the children is reaped can skip
// another child, so each list is read until two reads agree (a skip shows
// as a child listed once and gone the next time). A thread that exits
// hands its children to another thread of the process, perhaps one whose
// list was already read: when a thread other than the main one is gone,
// or was exiting by the time its list had been read, every list is read
// again.
func Children(pid, threads int) ([]int, error) {
	for try := 0; ; try++ {
		kids, err := children(pid, threads)
		if !errors.Is(err, errThreadGone) {
			return kids, err
		}
		if try == 8 {
			return nil, fmt.Errorf("proctree: the threads of %d exit faster than their children can be read", pid)
		}
	}
}

// errThreadGone: a thread other than the main one exited while children
// read the lists.
var errThreadGone = errors.New("proctree: a thread exited")

func children(pid, threads int) ([]int, error) {
	main := strconv.Itoa(pid)
	base := "/proc/" + main + "/task/"
	tids := []string{main}
	if threads != 1 {
		d, err := os.Open(base)
		if err != nil {
			return nil, err
		}
		tids, err = d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return nil, err
		}
	}
	var out []int
	var buf [512]byte
	for _, tid := range tids {
		path := base + tid + "/children"
		gone := func(err error) error {
			if tid != main && errors.Is(err, fs.ErrNotExist) {
				return errThreadGone
			}
			return err
		}
		prev, err := readProc(path, buf[:])
		if err != nil {
			return nil, gone(err)
		}
		prev = bytes.Clone(prev)
		for try := 0; ; try++ {
			b, err := readProc(path, buf[:])
			if err != nil {
				return nil, gone(err)
			}
			if bytes.Equal(b, prev) {
				break
			}
			if try == 8 {
				return nil, fmt.Errorf("proctree: the children of %d change faster than they can be read", pid)
			}
			prev = bytes.Clone(b)
		}
		// The kernel marks a thread exiting before it moves its
		// children: unmarked after the read, the list was whole.
		if tid != main {
			st, err := readProc(base+tid+"/stat", make([]byte, 512))
			if err != nil || threadExiting(st) {
				return nil, errThreadGone
			}
		}
		for _, f := range bytes.Fields(prev) {
			c, err := strconv.Atoi(string(f))
			if err != nil {
				return nil, fmt.Errorf("proctree: malformed %s", path)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// threadExiting reads a /proc/PID/task/TID/stat line: the thread is a
// zombie or has begun to exit (PF_EXITING in its flags, field 9), or the
// line does not say.
func threadExiting(b []byte) bool {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	f := strings.Fields(string(b[i+2:])) // field N is f[N-3]
	if len(f) < 7 || f[0] == "Z" || f[0] == "X" {
		return true
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err != nil || flags&pfExiting != 0
}

// pfExiting is the kernel's PF_EXITING task flag, set as a thread begins
// to exit and before its children are handed on.
const pfExiting = 0x00000004

// readProc reads a small seq_file of /proc into buf (growing it if needed)
// with the three system calls it takes: os.ReadFile adds an fstat, a try
// at registering the file with the poller and two fcntl calls, which cost
// more than the read itself on files read by the hundred (every process's
// stat in a scan).
func readProc(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	n := 0
	for {
		k, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		n += k
		// A seq_file of /proc (stat is one) fills the buffer unless it
		// is at its end: a short read is the whole file.
		if k == 0 || n < len(buf) {
			return buf[:n], nil
		}
		buf = append(buf, make([]byte, len(buf))...)
	}
}

func parseStat(pid int, b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return Stat{}, fmt.Errorf("proctree: malformed stat for pid %d", pid)
	}
	f := strings.Fields(string(b[i+2:]))
	// f[0] is field 3 (state); field N is f[N-3].
	if len(f) < 20 {
		return Stat{}, fmt.Errorf("proctree: short stat for pid %d", pid)
	}
	s := Stat{PID: pid, State: f[0][0]}
	var errs [5]error
	s.PPID, errs[0] = strconv.Atoi(f[1])
	s.PGID, errs[1] = strconv.Atoi(f[2])
	s.SID, errs[2] = strconv.Atoi(f[3])
	s.Threads, errs[3] = strconv.Atoi(f[17])
	s.StartTime, errs[4] = strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(errs[:]...); err != nil {
		return Stat{}, fmt.Errorf("proctree: stat for pid %d: %w", pid, err)
	}
	return s, nil
}

// BootID returns the kernel's random boot id, which changes on every boot.
func BootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// Snapshot reads the stat of every process in /proc. Processes that vanish
// while it reads are skipped.
func Snapshot() ([]Stat, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	out := make([]Stat, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		s, err := ReadStat(pid)
		if err != nil {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

// SetSubreaper makes the calling process a child subreaper: orphaned
// descendants are reparented to it rather than to PID 1, so they stay
// findable through Descendants and can be killed.
func SetSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// hasChildren reports whether the calling process has any child, live or
// zombie, without reaping it.
func hasChildren() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return !errors.Is(err, unix.ECHILD)
}

// signalSession does nothing on Linux: a subreaper finds the members of a
// session by their parent links, so the group and the tree walks suffice.
func signalSession(int, syscall.Signal) {}

// Argv returns the command line of pid (/proc/PID/cmdline).
//
// Like Environ's, an empty read is not an answer while the process is in
// the middle of an exec: the kernel shows the arguments only once it has
// copied them into the new image, and a process caught in between (its
// comm already the new program's) would read as one with no command line.
// Argv tells that from a truly empty command line by /proc/PID/stat (see
// imageArgs) and reads again until the image is whole, for up to
// settleWait. A zombie gives ErrProcessExited, a kernel thread an empty
// argv.
func Argv(pid int) ([]string, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/cmdline"
	deadline := time.Now().Add(settleWait)
	for try := 0; ; try++ {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if len(b) > 0 {
			return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
		}
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return nil, err
		}
		switch imageArgs(st) {
		case envGone:
			return nil, ErrProcessExited
		case envEmpty:
			return []string{}, nil
		}
		// Not laid out yet, or laid out (not empty) since the read; or
		// the process went on to another exec since.
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w (pid %d)", ErrArgvUnknown, pid)
		}
		if try < 10 {
			runtime.Gosched()
		} else {
			time.Sleep(time.Millisecond) // polling the kernel's progress through an exec
		}
	}
}

// imageArgs reads a /proc/PID/stat line as imageEnv does, for the
// arguments: arg_start and arg_end (fields 48, 49) equal in a laid-out
// image (end_code set, after the kernel copied the arguments and the
// environment) are an empty command line; a zombie has none, a kernel
// thread an empty one.
func imageArgs(b []byte) int {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return envUnsettled
	}
	f := strings.Fields(string(b[i+2:])) // field N is f[N-3]
	if len(f) < 47 {
		return envUnsettled
	}
	if f[0] == "Z" || f[0] == "X" {
		return envGone
	}
	if flags, err := strconv.ParseUint(f[6], 10, 64); err == nil && flags&pfKthread != 0 {
		return envEmpty
	}
	if f[24] != "0" && f[45] != "0" && f[45] == f[46] {
		return envEmpty
	}
	return envUnsettled
}

// Executable returns the file pid runs (/proc/PID/exe, which names the
// inode even when the file was renamed), for os.SameFile.
func Executable(pid int) (os.FileInfo, error) {
	return os.Stat("/proc/" + strconv.Itoa(pid) + "/exe")
}

// Environ returns the environment pid was started with
// (/proc/PID/environ).
//
// An execve lays the new image out in two steps: the kernel installs the
// new memory first and copies the arguments and environment into it a
// little later, and /proc/PID/environ reads empty in between (as it does
// when read through a descriptor opened on the old image). Such an empty
// read is not an answer: Environ tells it from a truly empty environment
// by /proc/PID/stat (see imageEnv) and reads again until the image is
// whole, for up to settleWait. A process that stays mid-exec that
// long gives ErrEnvironUnknown; one that exits meanwhile gives
// ErrProcessExited. A kernel thread has an empty environment.
func Environ(pid int) ([]string, error) {
	deadline := time.Now().Add(settleWait)
	for try := 0; ; try++ {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			return nil, err
		}
		if len(b) > 0 {
			return strings.Split(string(b), "\x00"), nil
		}
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return nil, err
		}
		switch imageEnv(st) {
		case envEmpty:
			return []string{}, nil
		case envGone:
			return nil, ErrProcessExited
		}
		// Not laid out yet, or laid out (non-empty) since the read.
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w (pid %d)", ErrEnvironUnknown, pid)
		}
		if try < 10 {
			runtime.Gosched()
		} else {
			time.Sleep(time.Millisecond) // polling the kernel's progress through an exec
		}
	}
}

// settleWait bounds how long Environ waits for an exec to lay out its
// image: far more than an exec takes, even on a loaded machine.
const settleWait = 5 * time.Second

// What /proc/PID/stat says of the environment of the image it describes.
const (
	envUnsettled = iota // not laid out yet (mid-exec), or not empty
	envEmpty            // laid out, and empty
	envGone             // no image: the process exited or is a zombie
)

// imageEnv reads a /proc/PID/stat line: the state (field 3), the flags
// (field 9), end_code (field 27) and env_start, env_end (fields 50, 51),
// which the kernel shows to whoever may read the environment. An exec's
// new memory starts with all of them zero. The kernel then sets env_start
// and env_end both to the start of the environment, walks the strings
// (writing a pointer to each on the new stack, which can fault and sleep)
// and only then moves env_end past them: while it walks, the bounds say
// "empty" of an environment that is not. end_code is set after that walk,
// so equal bounds are an empty environment only once end_code is set.
func imageEnv(b []byte) int {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return envUnsettled
	}
	f := strings.Fields(string(b[i+2:])) // field N is f[N-3]
	if len(f) < 49 {
		return envUnsettled
	}
	if f[0] == "Z" || f[0] == "X" {
		return envGone
	}
	if flags, err := strconv.ParseUint(f[6], 10, 64); err == nil && flags&pfKthread != 0 {
		return envEmpty
	}
	if f[24] != "0" && f[47] != "0" && f[47] == f[48] {
		return envEmpty
	}
	return envUnsettled
}

// pfKthread is the kernel's PF_KTHREAD task flag: a kernel thread, which
// has no memory of its own and so no environment.
const pfKthread = 0x00200000

// Cwd returns pid's working directory as the kernel knows it
// (/proc/PID/cwd), whatever $PWD says.
func Cwd(pid int) (string, error) {
	p, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(p, " (deleted)"), nil
}
