//go:build !linux

package proctree

import "os"

// ResumeStops does nothing where there is no pidfd to wait on.
func ResumeStops(int) {}

// Seal does nothing here.
func Seal() {}

// ownPidfd, shutdownAtParentExit and shutdownAtOwnerExit do nothing
// here: the stream's end of file alone tells of the guarded process's exit.
func ownPidfd() *os.File { return nil }

func shutdownAtParentExit(int) {}

func shutdownAtOwnerExit(int) {}
