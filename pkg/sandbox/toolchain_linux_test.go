package sandbox

import (
	"archive/zip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Ordinary work succeeds in workspace-write with --net none and the
// environment's private toolchain cache: each test runs the real tool, and
// is skipped only when the tool is not installed (it says so).

func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed on this machine", name)
	}
	return p
}

// toolchainRun runs script in ws under workspace-write, --net none and a
// private cache, and fails the test unless it exits 0.
func toolchainRun(t *testing.T, ws, script string) string {
	t.Helper()
	requireSandbox(t)
	p := Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Net: NetNone, CacheDir: filepath.Join(t.TempDir(), "cache")}
	res, prep := sandboxed(t, p, ws, "sh", "-c", "set -e\n"+script)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", res.ExitCode, out(res), text(res.Stderr))
	}
	if c, _ := prep.Report["caches"].(map[string]any); c["kind"] != "private" {
		t.Errorf("caches %v", prep.Report["caches"])
	}
	return out(res)
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(body), 0o644))
	}
}

func TestToolchainGitCommit(t *testing.T) {
	requireTool(t, "git")
	_, ws, _ := dirs(t)
	init := exec.Command("git", "init", "-q", ws)
	must(t, init.Run())
	o := toolchainRun(t, ws, `
echo hello > f
git add f
git -c user.name=agent -c user.email=agent@example.org commit -q -m first
git log --oneline | wc -l`)
	if strings.TrimSpace(o) != "1" {
		t.Fatalf("commits: %q", o)
	}
}

func TestToolchainGo(t *testing.T) {
	requireTool(t, "go")
	_, ws, _ := dirs(t)
	writeFiles(t, ws, map[string]string{
		"go.mod": "module example.org/probe\n\ngo 1.26.0\n\nrequire golang.org/x/sys v0.50.0\n",
		"go.sum": "golang.org/x/sys v0.50.0 h1:dkKZEFTEKaLr1sjhs0WiKqoi8Jj5nHbS3Njmx1UoMJs=\n" +
			"golang.org/x/sys v0.50.0/go.mod h1:hNLxWAXmnKAxqDtdwIYC4bM9oQPEecfsnNMuSxOs3og=\n",
		"main.go":      "package main\n\nimport (\n\t\"fmt\"\n\n\t\"golang.org/x/sys/unix\"\n)\n\nfunc main() { fmt.Println(unix.Getpid() > 0) }\n",
		"main_test.go": "package main\n\nimport \"testing\"\n\nfunc TestOK(t *testing.T) {}\n",
	})
	// The module comes from the user's module cache (read-only, through
	// GOPROXY=file://…), since --net none has no network.
	o := toolchainRun(t, ws, "export GOTOOLCHAIN=local\ngo build -o probe . && ./probe && go test -vet=off ./... 2>&1 | tail -1")
	if !strings.Contains(o, "true") || !strings.Contains(o, "ok") {
		t.Fatalf("go: %s", o)
	}
}

func TestToolchainNpmCi(t *testing.T) {
	npm := requireTool(t, "npm")
	_, ws, _ := dirs(t)
	// A dependency from a local tarball, locked; npm ci installs it offline.
	dep := filepath.Join(t.TempDir(), "dep")
	writeFiles(t, dep, map[string]string{"package.json": `{"name":"dep","version":"1.0.0","main":"index.js"}`, "index.js": "module.exports = 42;\n"})
	pack := exec.Command(npm, "pack", "--silent", "--pack-destination", ws)
	pack.Dir = dep
	pack.Env = append(os.Environ(), "npm_config_cache="+t.TempDir())
	if b, err := pack.CombinedOutput(); err != nil {
		t.Fatalf("npm pack: %v %s", err, b)
	}
	writeFiles(t, ws, map[string]string{"package.json": `{"name":"app","version":"1.0.0","dependencies":{"dep":"file:dep-1.0.0.tgz"}}`})
	lock := exec.Command(npm, "install", "--package-lock-only", "--offline", "--no-audit", "--no-fund")
	lock.Dir = ws
	lock.Env = append(os.Environ(), "npm_config_cache="+t.TempDir())
	if b, err := lock.CombinedOutput(); err != nil {
		t.Fatalf("npm install --package-lock-only: %v %s", err, b)
	}
	o := toolchainRun(t, ws, `npm ci --offline --no-audit --no-fund --no-update-notifier >/dev/null
node -e 'console.log(require("dep"))'`)
	if strings.TrimSpace(o) != "42" {
		t.Fatalf("npm: %q", o)
	}
}

func TestToolchainPipInstall(t *testing.T) {
	python := realPython(t)
	_, ws, _ := dirs(t)
	// A wheel in a local directory, installed with --no-index.
	wheels := filepath.Join(ws, "wheels")
	must(t, os.MkdirAll(wheels, 0o755))
	f, err := os.Create(filepath.Join(wheels, "tinypkg-1.0-py3-none-any.whl"))
	must(t, err)
	zw := zip.NewWriter(f)
	for name, body := range map[string]string{
		"tinypkg/__init__.py":            "VALUE = 7\n",
		"tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
		"tinypkg-1.0.dist-info/WHEEL":    "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"tinypkg-1.0.dist-info/RECORD":   "",
	} {
		w, err := zw.Create(name)
		must(t, err)
		_, _ = w.Write([]byte(body))
	}
	must(t, zw.Close())
	must(t, f.Close())
	o := toolchainRun(t, ws, python+` -m pip install --disable-pip-version-check -q --no-index --find-links wheels --target lib tinypkg
PYTHONPATH=lib `+python+` -c 'import tinypkg; print(tinypkg.VALUE)'`)
	if strings.TrimSpace(o) != "7" {
		t.Fatalf("pip: %q", o)
	}
}

func TestToolchainCargoBuild(t *testing.T) {
	requireTool(t, "cargo")
	_, ws, _ := dirs(t)
	writeFiles(t, ws, map[string]string{
		"Cargo.toml":  "[package]\nname = \"probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
		"src/main.rs": "fn main() { println!(\"built\"); }\n",
	})
	o := toolchainRun(t, ws, "cargo build --offline -q && ./target/debug/probe")
	if strings.TrimSpace(o) != "built" {
		t.Fatalf("cargo: %q", o)
	}
}

// realPython finds the interpreter itself (python3 may be a pyenv shim,
// a shell script that writes to its own directory).
func realPython(t *testing.T) string {
	t.Helper()
	py := requireTool(t, "python3")
	b, err := exec.Command(py, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Skipf("python3 does not run: %v", err)
	}
	return strings.TrimSpace(string(b))
}
