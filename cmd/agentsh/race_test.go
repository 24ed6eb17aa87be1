//go:build race

package main

// raceEnabled: the race detector multiplies memory use, so RSS bounds are
// checked only in the normal build (scripts/test runs both).
const raceEnabled = true
