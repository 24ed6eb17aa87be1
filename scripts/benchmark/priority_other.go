//go:build !linux

package main

// normalPriority returns argv unchanged: real-time scheduling classes are
// a Linux matter here.
func normalPriority(argv []string) []string { return argv }
