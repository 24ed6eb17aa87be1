package sandbox

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"

	"github.com/agentplane/agentplane/pkg/result"
)

// prepare checks p, already normalized and not empty, against what macOS
// can enforce and builds the helper invocation: the helper sets the
// rlimits and execs sandbox-exec with the generated profile, which execs
// the command.
func prepare(p Policy, self string, caps Capabilities) (*Prepared, error) {
	if err := checkDarwin(p, caps); err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp("", "agentplane-sandbox-")
	if err != nil {
		return nil, result.Errorf(CodeFailed, "cannot create the sandbox's private directory: %v", unwrap(err)).Wrap(err)
	}
	var once sync.Once
	cleanup := func() { once.Do(func() { _ = os.RemoveAll(base) }) }
	prep, err := buildDarwin(p, self, base)
	if err != nil {
		cleanup()
		return nil, err
	}
	prep.Cleanup = cleanup
	return prep, nil
}

// checkDarwin refuses what this Mac cannot enforce.
func checkDarwin(p Policy, c Capabilities) error {
	return seatbeltRefusal(p, c.SandboxExec != "")
}

func buildDarwin(p Policy, self, base string) (*Prepared, error) {
	report := map[string]any{"mode": p.Mode}
	// 0711 like on Linux: the status file beside tmp/ is the helper's.
	if err := os.Chmod(base, 0o711); err != nil {
		return nil, result.Errorf(CodeFailed, "chmod %s: %v", base, unwrap(err))
	}
	tmp := filepath.Join(base, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, result.Errorf(CodeFailed, "cannot create the sandbox's temp dir: %v", unwrap(err))
	}
	// Seatbelt matches real paths: $TMPDIR is below /var, a symlink to
	// /private/var.
	realTmp, err := filepath.EvalSymlinks(tmp)
	if err != nil {
		return nil, result.Errorf(CodeFailed, "cannot resolve the sandbox's temp dir: %v", unwrap(err))
	}
	status := filepath.Join(base, "status")
	sp := spec{Status: status, UID: -1, GID: -1}
	report["tmpdir"] = realTmp

	if seatbeltNeeded(p) {
		sb := seatbeltFor(p, realTmp, report)
		sp.Seatbelt = sb.profile().Args()
	} else {
		report["filesystem"] = "host"
		report["network"] = NetHost
	}
	sp.Rlimits = processRlimits(p, report)

	enc, err := json.Marshal(sp)
	if err != nil {
		return nil, result.Errorf(result.CodeInternal, "encode sandbox spec: %v", err)
	}
	arg := base64.RawURLEncoding.EncodeToString(enc)
	policy := p
	return &Prepared{
		Argv: func(argv []string) []string {
			out := make([]string, 0, len(argv)+4)
			out = append(out, self, HelperCommand, arg, "--")
			return append(out, argv...)
		},
		Env:     []string{"TMPDIR=" + realTmp, "TMP=" + realTmp, "TEMP=" + realTmp},
		Report:  report,
		TempDir: realTmp,
		Classify: func(exitCode int, signal string) string {
			if e, _ := readHelperError(status); e != nil {
				return e.Code
			}
			return rlimitHit(policy, signalOf(exitCode, signal))
		},
		Failure: func() error { return readFailure(status) },
	}, nil
}
