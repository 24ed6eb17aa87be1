//go:build !linux

package proctree

// ResumeStops does nothing where there is no pidfd to wait on.
func ResumeStops(int) {}

// Seal does nothing here.
func Seal() {}
