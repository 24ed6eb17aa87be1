//go:build !linux

package main

import "errors"

// zeroLimits: prlimit(2) is Linux's; the tests that use it run there.
func zeroLimits(pid int) error { return errors.New("prlimit(2) is Linux's") }
