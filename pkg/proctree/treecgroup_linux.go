package proctree

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A TreeCgroup is a cgroup v2 child of the caller's own, made to hold one
// process tree that must outlive its maker and still be killable as one:
// a job, which runs on as lost when its supervisor is SIGKILLed, and
// which a later stop must kill whole, a descendant that cleared its
// environment and called setsid included. Unlike a Guard's cgroup nothing
// kills it when its maker dies; whoever finds the tree's owner dead kills
// it by its directory (KillTreeCgroup). Its name carries the guards'
// prefix, so a detached server started from inside it (Detach) leaves it,
// as it leaves a guard's.
type TreeCgroup struct {
	Dir string // the cgroup's directory, to record for KillTreeCgroup
	fd  int    // an O_PATH fd of Dir, for CLONE_INTO_CGROUP
}

// MakeTreeCgroup creates the cgroup named name (made unique by the caller)
// below the caller's own cgroup. It fails where no writable cgroup v2 with
// cgroup.kill exists (an unprivileged user without a delegated cgroup).
func MakeTreeCgroup(name string) (*TreeCgroup, error) {
	dir, fd, err := makeNamedCgroup(cgroupPrefix + name)
	if err != nil {
		return nil, err
	}
	return &TreeCgroup{Dir: dir, fd: fd}, nil
}

// Apply makes the process that attr starts begin in the cgroup, before
// its first instruction (CLONE_INTO_CGROUP).
func (c *TreeCgroup) Apply(attr *syscall.SysProcAttr) {
	attr.UseCgroupFD = true
	attr.CgroupFD = c.fd
}

// Kill kills every member of the cgroup and waits up to timeout for it to
// empty; it reports whether it did. The cgroup stays, for the next run.
func (c *TreeCgroup) Kill(timeout time.Duration) bool {
	if populated, err := cgroupPopulated(c.Dir); err == nil && !populated {
		return true
	}
	return killCgroup(c.Dir, timeout)
}

// Remove closes the cgroup and removes it if it is empty.
func (c *TreeCgroup) Remove() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
	_ = unix.Rmdir(c.Dir)
}

// treeCgroupDir checks that dir is a cgroup MakeTreeCgroup made as name,
// in the cgroup v2 hierarchy: a recorded path is never trusted to name
// another cgroup (whose cgroup.kill would kill strangers).
func treeCgroupDir(dir, name string) (string, error) {
	root, err := cgroup2Root()
	if err != nil {
		return "", err
	}
	dir = filepath.Clean(dir)
	if filepath.Base(dir) != cgroupPrefix+name || !strings.HasPrefix(dir, root+"/") || strings.Contains(name, "/") {
		return "", errors.New("proctree: not a tree cgroup: " + dir)
	}
	return dir, nil
}

// TreeCgroupMembers lists the pids in the cgroup dir made as name (nil
// when it is gone or not such a cgroup).
func TreeCgroupMembers(dir, name string) []int {
	dir, err := treeCgroupDir(dir, name)
	if err != nil {
		return nil
	}
	return cgroupProcs(dir)
}

// KillTreeCgroup kills every member of the cgroup dir that MakeTreeCgroup
// made as name, waits up to timeout for it to empty and removes it. It
// reports whether the cgroup is gone or empty; one that no longer exists
// counts as killed.
func KillTreeCgroup(dir, name string, timeout time.Duration) bool {
	dir, err := treeCgroupDir(dir, name)
	if err != nil {
		return false
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return true
	}
	if !killCgroup(dir, timeout) {
		return false
	}
	_ = unix.Rmdir(dir)
	return true
}
