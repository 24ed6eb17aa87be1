package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentplane/agentplane/pkg/result"
)

// Classify returns the coded error that says what the caller can do about
// err, when err is a condition of the state directory: no_space for a full
// filesystem or quota, state_read_only for a read-only one, state_corrupt
// for a file that does not parse. It returns nil for anything else.
func Classify(err error) *result.Error {
	var re *result.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &re) && (re.Code == result.CodeNoSpace || re.Code == result.CodeStateReadOnly || re.Code == result.CodeStateCorrupt):
		return re
	case IsNoSpace(err):
		return &result.Error{Code: result.CodeNoSpace, Message: "no space left for the state directory: " + err.Error(), Err: err}
	case errors.Is(err, syscall.EROFS):
		return &result.Error{Code: result.CodeStateReadOnly, Message: "the state directory is read-only: " + err.Error(), Err: err}
	}
	return nil
}

// Coded returns err as Classify codes it, or err unchanged.
func Coded(err error) error {
	if re := Classify(err); re != nil {
		return re
	}
	return err
}

// IsNoSpace reports whether err is a full filesystem or an exceeded quota.
func IsNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// corrupt is the error of a state file that does not parse.
func corrupt(path string, err error) error {
	return &result.Error{Code: result.CodeStateCorrupt,
		Message: fmt.Sprintf("state file %s is damaged: %v", filepath.Base(path), err), Err: err}
}

// IsCorrupt reports whether err is a state file that does not parse.
func IsCorrupt(err error) bool {
	var re *result.Error
	return errors.As(err, &re) && re.Code == result.CodeStateCorrupt
}

// TempPrefix is how the temp file of an atomic write of base begins (see
// WriteFileAtomic): "." + base + ".tmp".
func TempPrefix(base string) string { return "." + base + ".tmp" }

// RemoveTemps removes from dir the temp files that atomic writes of the
// files named in bases left behind when they were killed. Only a caller
// that knows no writer of those files is alive may call it: the sole
// writer holding its lock, or a reader under the lock every writer takes.
func RemoveTemps(dir string, bases ...string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, ".") {
			continue
		}
		for _, b := range bases {
			if strings.HasPrefix(name, TempPrefix(b)) {
				if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					break
				}
			}
		}
	}
}
