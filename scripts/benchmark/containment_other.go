//go:build !linux

package main

import "errors"

// benchContainment waits for processes through pidfds, which only Linux has.
func benchContainment(*bench) error {
	return errors.New("the containment case runs on Linux only")
}

func benchContainmentUnprivileged(*bench) error {
	return errors.New("the containment case runs on Linux only")
}
