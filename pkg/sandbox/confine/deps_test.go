package confine

import (
	"os/exec"
	"strings"
	"testing"
)

// The helper starts on every sandboxed call, so its package must stay
// small: no cgo (which makes the program dynamically linked), no
// resolver (net, os/user), no network proxy. This guards that against a
// later import.
func TestHelperLinksLittle(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not installed")
	}
	for _, goos := range []string{"linux", "darwin"} {
		cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{if .CgoFiles}}cgo{{end}}", ".")
		cmd.Env = append(cmd.Environ(), "GOOS="+goos)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list (%s): %v", goos, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			path, cgo, _ := strings.Cut(line, " ")
			bad := cgo != "" || path == "net" || path == "os/user" || path == "runtime/cgo" || strings.HasPrefix(path, "net/http") || strings.HasPrefix(path, "crypto/tls")
			// Outside the standard library only x/sys and this module's
			// result package.
			if strings.Contains(strings.SplitN(path, "/", 2)[0], ".") &&
				!strings.HasPrefix(path, "golang.org/x/sys/") &&
				path != "github.com/agentplane/agentplane/pkg/result" &&
				path != "github.com/agentplane/agentplane/pkg/sandbox/confine" {
				bad = true
			}
			if bad {
				t.Errorf("%s: the helper links %s", goos, line)
			}
		}
	}
}
