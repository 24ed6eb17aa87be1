// Package testkit holds the custom testscript commands that the end-to-end
// scripts of the three programs share: field checks on the JSON result
// (built on gjson, so scripts check what matters instead of whole-output
// goldens with timings in them) and process checks through /proc.
package testkit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/tidwall/gjson"

	"github.com/agentplane/agentplane/pkg/proctree"
)

// Commands returns the custom script commands:
//
//	json [-file F] [-line N|-last] PATH OP [VALUE]   check a field of the last stdout (or file F)
//	    OP is == != ~ (regexp) < > <= >= exists missing type; VALUE of == may use \n and \t
//	jsonlines [-file F] N            stdout has exactly N lines, each one JSON object
//	noproc PATTERN                   no live process has PATTERN in its command line
//	waitfile [-timeout D] FILE       wait until FILE exists (for background commands)
//	setjson VAR PATH                 set $VAR to a field of the last stdout
//	exits N PROG [ARGS...]           run PROG like exec and check that it exits with status N
//	until [-timeout D] PROG [ARGS...]  run PROG until it succeeds (for time-based behaviour such as idle timeouts)
//	killproc PATTERN                 SIGKILL every live process with PATTERN in its command line (crash tests)
//	serve NAME http|https|git DIR|npm  a server on 127.0.0.1 for the rest of the script (see cmdServe)
func Commands() map[string]func(ts *testscript.TestScript, neg bool, args []string) {
	return map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"json":      cmdJSON,
		"jsonlines": cmdJSONLines,
		"noproc":    cmdNoProc,
		"waitfile":  cmdWaitFile,
		"setjson":   cmdSetJSON,
		"exits":     cmdExits,
		"killproc":  cmdKillProc,
		"until":     cmdUntil,
		"serve":     cmdServe,
	}
}

func source(ts *testscript.TestScript, args []string) (string, []string) {
	file := "stdout"
	line := 0 // 0: whole output; -1: last line; n: line n (1-based)
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && len(args[0]) > 1 {
		switch args[0] {
		case "-file":
			if len(args) < 2 {
				ts.Fatalf("json: -file needs a file")
			}
			file, args = args[1], args[2:]
		case "-last":
			line, args = -1, args[1:]
		case "-line":
			if len(args) < 2 {
				ts.Fatalf("json: -line needs a number")
			}
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				ts.Fatalf("json: bad -line %q", args[1])
			}
			line, args = n, args[2:]
		default:
			return selectLine(ts, ts.ReadFile(file), line), args
		}
	}
	return selectLine(ts, ts.ReadFile(file), line), args
}

func selectLine(ts *testscript.TestScript, data string, line int) string {
	if line == 0 {
		return data
	}
	lines := strings.Split(strings.TrimRight(data, "\n"), "\n")
	if line == -1 {
		return lines[len(lines)-1]
	}
	if line > len(lines) {
		ts.Fatalf("json: output has %d lines, not %d", len(lines), line)
	}
	return lines[line-1]
}

func cmdJSON(ts *testscript.TestScript, neg bool, args []string) {
	data, args := source(ts, args)
	if len(args) < 2 {
		ts.Fatalf("usage: json [-file F] [-line N|-last] PATH OP [VALUE]")
	}
	if !gjson.Valid(data) {
		ts.Fatalf("json: not a JSON document:\n%s", data)
	}
	path, op := args[0], args[1]
	want := strings.Join(args[2:], " ")
	r := gjson.Get(data, path)
	ok, desc := compare(ts, r, op, want)
	if ok == neg {
		if neg {
			ts.Fatalf("json: %s %s %q held, want it not to (value %s)", path, op, want, r.Raw)
		}
		ts.Fatalf("json: %s: %s (value %s)\nin: %s", path, desc, r.Raw, trim(data))
	}
}

func trim(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "…"
	}
	return s
}

func compare(ts *testscript.TestScript, r gjson.Result, op, want string) (bool, string) {
	str := r.String()
	switch op {
	case "exists":
		return r.Exists(), "missing"
	case "missing":
		return !r.Exists(), "present"
	case "type":
		t := "null"
		switch {
		case !r.Exists():
			t = "missing"
		case r.IsArray():
			t = "array"
		case r.IsObject():
			t = "object"
		case r.Type == gjson.String:
			t = "string"
		case r.Type == gjson.Number:
			t = "number"
		case r.Type == gjson.True || r.Type == gjson.False:
			t = "boolean"
		}
		return t == want, "type is " + t + ", want " + want
	case "==", "!=":
		var eq bool
		if r.Type == gjson.String {
			eq = r.Exists() && str == unescape(want)
		} else {
			eq = r.Exists() && equalJSON(r.Raw, want)
		}
		if op == "!=" {
			return r.Exists() && !eq, "equal to " + want
		}
		return eq, "want " + want
	case "~":
		re, err := regexp.Compile(want)
		if err != nil {
			ts.Fatalf("json: bad regexp %q: %v", want, err)
		}
		return r.Exists() && re.MatchString(str), "does not match " + want
	case "<", ">", "<=", ">=":
		w, err := strconv.ParseFloat(want, 64)
		if err != nil {
			ts.Fatalf("json: %s needs a number, not %q", op, want)
		}
		if r.Type != gjson.Number {
			return false, "not a number"
		}
		v := r.Float()
		switch op {
		case "<":
			return v < w, fmt.Sprintf("not < %v", w)
		case ">":
			return v > w, fmt.Sprintf("not > %v", w)
		case "<=":
			return v <= w, fmt.Sprintf("not <= %v", w)
		default:
			return v >= w, fmt.Sprintf("not >= %v", w)
		}
	}
	ts.Fatalf("json: unknown operator %q", op)
	return false, ""
}

// unescape reads \n, \t and \\ in an expected string, since script
// arguments cannot span lines.
func unescape(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	u, err := strconv.Unquote(`"` + strings.ReplaceAll(s, `"`, `\"`) + `"`)
	if err != nil {
		return s
	}
	return u
}

func equalJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return strings.TrimSpace(a) == strings.TrimSpace(b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

func cmdJSONLines(ts *testscript.TestScript, neg bool, args []string) {
	file := "stdout"
	if len(args) == 3 && args[0] == "-file" {
		file, args = args[1], args[2:]
	}
	if len(args) != 1 {
		ts.Fatalf("usage: jsonlines [-file F] N")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("jsonlines: bad count %q", args[0])
	}
	data := ts.ReadFile(file)
	if !strings.HasSuffix(data, "\n") {
		ts.Fatalf("jsonlines: output does not end in a newline")
	}
	lines := strings.Split(strings.TrimSuffix(data, "\n"), "\n")
	for i, l := range lines {
		if !gjson.Valid(l) || !strings.HasPrefix(l, "{") {
			ts.Fatalf("jsonlines: line %d is not a JSON object: %s", i+1, trim(l))
		}
	}
	if (len(lines) == want) == neg {
		ts.Fatalf("jsonlines: %d lines, want %d", len(lines), want)
	}
}

func cmdSetJSON(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: setjson VAR PATH")
	}
	r := gjson.Get(ts.ReadFile("stdout"), args[1])
	if !r.Exists() {
		ts.Fatalf("setjson: %s missing in stdout", args[1])
	}
	ts.Setenv(args[0], r.String())
}

// cmdNoProc fails if a live process's command line contains the pattern.
// Zombies do not count: a killed process whose parent has not reaped it
// yet is dead.
//
// With -wait it first waits (generously, for loaded machines) for the
// matching processes to go, for a guarantee that holds "within a moment"
// (a watchdog killing a tree after its owner died).
func cmdNoProc(ts *testscript.TestScript, neg bool, args []string) {
	wait := false
	if len(args) == 2 && args[0] == "-wait" && !neg {
		wait, args = true, args[1:]
	}
	if len(args) != 1 {
		ts.Fatalf("usage: noproc [-wait] PATTERN")
	}
	found := scriptProcesses(ts, args[0])
	for deadline := time.Now().Add(60 * time.Second); wait && len(found) > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		found = scriptProcesses(ts, args[0])
	}
	if (len(found) == 0) == neg {
		if neg {
			ts.Fatalf("noproc: no live process matches %q", args[0])
		}
		ts.Fatalf("noproc: live processes match %q: %v", args[0], found)
	}
}

// LiveProcesses returns "pid: cmdline" for each live process whose command
// line contains pattern, excluding the calling process.
func LiveProcesses(pattern string) []string { return liveProcesses(pattern, "") }

// scriptProcesses is LiveProcesses for a script: a process that provably
// belongs to another script (its environment has another $WORK: a test of
// another package, or of another checkout, running at the same time) is
// not the script's. A process without $WORK (a command run with a cleared
// environment) still counts, so the check errs on the side of failing.
func scriptProcesses(ts *testscript.TestScript, pattern string) []string {
	return liveProcesses(pattern, ts.Getenv("WORK"))
}

func otherWork(pid int, work string) bool {
	env, err := proctree.Environ(pid)
	if err != nil {
		return false
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "WORK="); ok {
			return v != work
		}
	}
	return false
}

func liveProcesses(pattern, work string) []string {
	snap, err := proctree.Snapshot()
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range snap {
		if s.Dead() || s.PID == os.Getpid() {
			continue
		}
		argv, err := proctree.Argv(s.PID)
		if err != nil {
			continue
		}
		cmdline := strings.Join(argv, " ")
		if strings.Contains(cmdline, pattern) && (work == "" || !otherWork(s.PID, work)) {
			// Re-check: it may have died between the snapshot and now.
			if st, err := proctree.ReadStat(s.PID); err == nil && !st.Dead() {
				out = append(out, fmt.Sprintf("%d: %s", s.PID, cmdline))
			}
		}
	}
	return out
}

// cmdWaitFile waits for a file that a background command creates. It is
// the synchronisation point between a script and a background process,
// with a generous deadline for loaded machines.
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	timeout := 60 * time.Second
	if len(args) == 3 && args[0] == "-timeout" {
		d, err := time.ParseDuration(args[1])
		if err != nil {
			ts.Fatalf("waitfile: bad timeout %q", args[1])
		}
		timeout, args = d, args[2:]
	}
	if len(args) != 1 {
		ts.Fatalf("usage: waitfile [-timeout D] FILE")
	}
	path := ts.MkAbs(args[0])
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("waitfile: %s did not appear within %v", args[0], timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// SharedDir returns the project's ../shared directory (the conformance
// suites), found by walking up from dir to the module root.
func SharedDir(dir string) (string, bool) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			s := filepath.Join(filepath.Dir(d), "shared")
			if st, err := os.Stat(s); err == nil && st.IsDir() {
				return s, true
			}
			return "", false
		}
		if filepath.Dir(d) == d {
			return "", false
		}
	}
}

// cmdExits runs a program like exec and checks its exact exit status,
// which exec itself only reports as zero or not.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: exits N PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: bad status %q", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exits: %v", err)
		}
		got = ee.ExitCode()
	}
	if (got == want) == neg {
		ts.Fatalf("exits: %s exited %d, want %d", args[1], got, want)
	}
}

// cmdKillProc SIGKILLs the live processes whose command line contains the
// pattern and waits until they are dead, to simulate a crash.
func cmdKillProc(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: killproc PATTERN")
	}
	found := scriptProcesses(ts, args[0])
	if len(found) == 0 {
		ts.Fatalf("killproc: no live process matches %q", args[0])
	}
	var killed []proctree.ID
	for _, f := range found {
		pid, _ := strconv.Atoi(strings.SplitN(f, ":", 2)[0])
		if id, err := proctree.Identify(pid); err == nil {
			killed = append(killed, id)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// Dead is gone or a zombie, by pid and start time: the pattern alone
	// stops matching as soon as the process's memory is released, while
	// its exit (its descriptors, its socket) is still under way.
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range killed {
		for id.Alive() {
			if time.Now().After(deadline) {
				ts.Fatalf("killproc: %q survived SIGKILL", args[0])
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for len(scriptProcesses(ts, args[0])) > 0 {
		if time.Now().After(deadline) {
			ts.Fatalf("killproc: %q survived SIGKILL", args[0])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cmdUntil reruns a program until it exits 0. It is for behaviour that is
// time-based by nature (an idle timeout firing), where there is no event to
// wait on; the deadline is generous for loaded machines.
func cmdUntil(ts *testscript.TestScript, neg bool, args []string) {
	timeout := 60 * time.Second
	if len(args) >= 2 && args[0] == "-timeout" {
		d, err := time.ParseDuration(args[1])
		if err != nil {
			ts.Fatalf("until: bad timeout %q", args[1])
		}
		timeout, args = d, args[2:]
	}
	if len(args) == 0 {
		ts.Fatalf("usage: until [-timeout D] PROG [ARGS...]")
	}
	deadline := time.Now().Add(timeout)
	for {
		if err := ts.Exec(args[0], args[1:]...); err == nil {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("until: %s did not succeed within %v", strings.Join(args, " "), timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
