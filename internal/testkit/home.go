package testkit

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/rogpeppe/go-internal/testscript"
)

// PrivateHome points HOME and the XDG base directories of this test
// process, and so of every program its tests start, at a fresh temporary
// directory, so that no test reads the user's configuration or writes the
// user's state directory (sessions, jobs, audit log) whatever environment
// it passes on. The Go tool's own directories stay where they were, so a
// test that runs go still finds its build and module caches. Call it
// first thing in TestMain; the returned function removes the directory.
func PrivateHome() (cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "agentplane-home-")
	if err != nil {
		return nil, err
	}
	// Pin what the Go tool derives from HOME before HOME moves.
	goDirs := map[string]func() (string, error){
		"GOCACHE": func() (string, error) {
			d, err := os.UserCacheDir()
			return filepath.Join(d, "go-build"), err
		},
		"GOENV": func() (string, error) {
			d, err := os.UserConfigDir()
			return filepath.Join(d, "go", "env"), err
		},
		"GOPATH": func() (string, error) {
			d, err := os.UserHomeDir()
			return filepath.Join(d, "go"), err
		},
	}
	for k, def := range goDirs {
		if os.Getenv(k) != "" {
			continue
		}
		if v, err := def(); err == nil {
			os.Setenv(k, v)
		}
	}
	for k, sub := range map[string]string{
		"HOME": "home", "XDG_CONFIG_HOME": "config", "XDG_STATE_HOME": "state",
		"XDG_CACHE_HOME": "cache", "XDG_DATA_HOME": "data",
	} {
		p := filepath.Join(dir, sub)
		if err := os.Mkdir(p, 0o700); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		os.Setenv(k, p)
	}
	// The state and configuration overrides would win over the XDG ones.
	os.Unsetenv("AGENTPLANE_STATE_DIR")
	os.Unsetenv("AGENTPLANE_CONFIG")
	return func() { os.RemoveAll(dir) }, nil
}

// TestingM is what TestMain's m offers to testscript.Main.
type TestingM interface{ Run() int }

// WithPrivateHome wraps m so that its tests run under PrivateHome: pass
// it to testscript.Main (or call Run) in TestMain.
func WithPrivateHome(m TestingM) TestingM { return privateHomeM{m} }

type privateHomeM struct{ m TestingM }

func (p privateHomeM) Run() int {
	cleanup, err := PrivateHome()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testkit: private home:", err)
		return 1
	}
	defer cleanup()
	return p.m.Run()
}

// KeepRaceOptions passes the race detector's options (GORACE), which
// testscript leaves out of a script's environment, on to the programs the
// script runs. scripts/test sets atexit_sleep_ms=0 there: without it every
// race-built program that exits 0 sleeps a second first.
func KeepRaceOptions(e *testscript.Env) {
	if v, ok := os.LookupEnv("GORACE"); ok {
		e.Setenv("GORACE", v)
	}
}
