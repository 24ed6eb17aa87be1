package files

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"

	"github.com/agentplane/agentplane/pkg/result"
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
		return newErr(result.CodeOutsideRoot, "%s resolves outside the root", path).Wrap(err)
	case errors.Is(err, fs.ErrNotExist):
		return newErr(result.CodeFileNotFound, "%s does not exist", path).Wrap(err)
	case errors.Is(err, syscall.ENOTDIR):
		return newErr(result.CodeFileNotFound, "a parent of %s is not a directory", path).Wrap(err)
	case errors.Is(err, syscall.EISDIR):
		return newErr(result.CodeIsDirectory, "%s is a directory", path).Wrap(err)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return newErr(result.CodePermissionDenied, "permission denied: %s", path).Wrap(err)
	case errors.Is(err, fs.ErrExist):
		return newErr(result.CodeFileExists, "%s already exists", path).Wrap(err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return newErr(result.CodeNoSpace, "%s: no space left on its filesystem (%s); nothing was changed", path, unwrapMessage(err)).Wrap(err)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return invalid("%s: the path or one of its names is longer than the system allows", clipPath(path)).Wrap(err)
	}
	return newErr(result.CodeIOError, "%s: %s", path, unwrapMessage(err)).Wrap(err)
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

// clipPath keeps a path short enough for a message.
func clipPath(p string) string {
	if len(p) > 120 {
		return p[:60] + "…" + p[len(p)-40:]
	}
	return p
}
