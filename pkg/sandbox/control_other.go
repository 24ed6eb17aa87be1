//go:build !linux

package sandbox

import (
	"errors"
	"os"
)

// NewControl is Linux-only: elsewhere a sandboxed job's probes run from
// the supervisor (Seatbelt has no network namespace to look from).
func NewControl() (*Control, *os.File, error) {
	return nil, nil, errors.New("readiness probes inside the sandbox need Linux")
}
