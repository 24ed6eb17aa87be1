//go:build !linux

package proctree

import (
	"errors"
	"syscall"
	"time"
)

// TreeCgroup: cgroups are Linux's; elsewhere MakeTreeCgroup always fails.
type TreeCgroup struct{ Dir string }

// MakeTreeCgroup fails: no cgroups here.
func MakeTreeCgroup(string) (*TreeCgroup, error) {
	return nil, errors.New("proctree: no cgroups on this system")
}

func (c *TreeCgroup) Apply(*syscall.SysProcAttr)        {}
func (c *TreeCgroup) Kill(time.Duration) bool           { return false }
func (c *TreeCgroup) Remove()                           {}
func TreeCgroupMembers(string, string) []int            { return nil }
func KillTreeCgroup(string, string, time.Duration) bool { return false }
