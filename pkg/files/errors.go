package files

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"

	"github.com/agentplane/agentplane/pkg/result"
)

// Stable error codes of the agentfs engine (CONTRACT §4). They never change
// meaning; callers switch on them.
const (
	CodeFileNotFound       = "file_not_found"
	CodeIsDirectory        = "is_directory"
	CodeNotRegularFile     = "not_regular_file"
	CodeOldStringNotFound  = "old_string_not_found"
	CodeOldStringNotUnique = "old_string_not_unique"
	CodeCountMismatch      = "count_mismatch"
	CodeNoChange           = "no_change"
	CodeLineOutOfRange     = "line_out_of_range"
	CodeFileChanged        = "file_changed"
	CodeFileExists         = "file_exists"
	CodeBinaryFile         = "binary_file"
	CodeInvalidEncoding    = "invalid_encoding"
	CodeFileTooLarge       = "file_too_large"
	CodeOutsideRoot        = "outside_root"
	CodePathDenied         = "path_denied"
	CodePermissionDenied   = "permission_denied"
	CodeNothingToUndo      = "nothing_to_undo"
	CodeUndoConflict       = "undo_conflict"
	CodeIOError            = "io_error"
	// CodeIndentationConflict: a fuzzy edit cannot indent the new text the
	// way the file is indented (the two differ in a way that has no
	// translation), so it refuses rather than mix tabs and spaces.
	CodeIndentationConflict = "indentation_conflict"
)

func newErr(code, format string, args ...any) *result.Error {
	return result.Errorf(code, format, args...)
}

// invalid reports a request the engine cannot act on at all (an empty path,
// an empty old_string); it uses the shared invalid_request code so the CLI
// maps it to exit status 2 like any other bad request.
func invalid(format string, args ...any) *result.Error {
	return result.Errorf(result.CodeInvalidRequest, format, args...)
}

// pathEscapes recognises os.Root's refusal to leave the root. The sentinel
// is unexported in the standard library, so the message is the only handle.
func pathEscapes(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// osError turns an error from the operating system into a coded error that
// names the path as the caller wrote it.
func osError(err error, path string) *result.Error {
	var re *result.Error
	if errors.As(err, &re) {
		return re
	}
	switch {
	case pathEscapes(err):
		return newErr(CodeOutsideRoot, "%s resolves outside the root", path).Wrap(err)
	case errors.Is(err, fs.ErrNotExist):
		return newErr(CodeFileNotFound, "%s does not exist", path).Wrap(err)
	case errors.Is(err, syscall.ENOTDIR):
		return newErr(CodeFileNotFound, "a parent of %s is not a directory", path).Wrap(err)
	case errors.Is(err, syscall.EISDIR):
		return newErr(CodeIsDirectory, "%s is a directory", path).Wrap(err)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return newErr(CodePermissionDenied, "permission denied: %s", path).Wrap(err)
	case errors.Is(err, fs.ErrExist):
		return newErr(CodeFileExists, "%s already exists", path).Wrap(err)
	}
	return newErr(CodeIOError, "%s: %s", path, unwrapMessage(err)).Wrap(err)
}

// unwrapMessage drops the "op path:" prefix of a PathError so messages do
// not repeat the path or leak the resolved absolute one.
func unwrapMessage(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s: %v", pe.Op, pe.Err)
	}
	return err.Error()
}
