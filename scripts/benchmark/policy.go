package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// policyRules is an allow-by-default policy with the rules of a real one,
// so that every exec is decided against something.
const policyRules = `
prefix_rule(pattern=["git", "push"], decision="forbidden")
prefix_rule(pattern=["git", "reset", "--hard"], decision="forbidden")
prefix_rule(pattern=["rm", ["-rf", "-fr"]], decision="forbidden")
prefix_rule(pattern=["curl"], decision="prompt")
prefix_rule(pattern=["sudo"], decision="forbidden")
`

func (b *bench) policyFile() (string, error) {
	p := filepath.Join(b.tmp, "rules.star")
	return p, os.WriteFile(p, []byte(policyRules), 0o644)
}

func policyCases() []benchCase {
	return []benchCase{
		{"policy runtime (go build)", "`go build ./...` of this repository with a cold build cache for its packages (the\n" +
			"standard library cached), through `agentsh --policy` with run-time enforcement (every exec\n" +
			"of the compiler, assembler and linker traced and decided) against `--policy-enforce static`.\n" +
			"Target: within 1.15x.", benchPolicyBuild},
		{"policy runtime (1000 processes)", "A shell loop that runs `/bin/true` 1,000 times, through agentsh with run-time enforcement\n" +
			"against `--policy-enforce static`: the cost of tracing fork, exec and exit.", benchPolicyLoop},
		{"policy check (100 commands)", "`agentsh check --policy rules.star -c SCRIPT` on a script of 100 commands (pipelines,\n" +
			"substitutions, wrappers), against `agentsh check -c true`. Target: under 20 ms.", benchPolicyCheck},
	}
}

func benchPolicyBuild(b *bench) error {
	rules, err := b.policyFile()
	if err != nil {
		return err
	}
	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	base := filepath.Join(b.tmp, "gocache-std")
	warm := exec.Command("go", "build", "std")
	warm.Env = append(os.Environ(), "GOCACHE="+base)
	if out, err := warm.CombinedOutput(); err != nil {
		return fmt.Errorf("warming the cache: %v %s", err, out)
	}
	modes := []string{"static", "runtime"}
	walls := map[string][]time.Duration{}
	const runs = 3
	for i := 0; i < runs; i++ {
		for _, mode := range modes {
			cache := filepath.Join(b.tmp, fmt.Sprintf("gocache-%s-%d", mode, i))
			if out, err := exec.Command("cp", "-a", base, cache).CombinedOutput(); err != nil {
				return fmt.Errorf("copying the cache: %v %s", err, out)
			}
			argv := []string{b.path("agentsh"), "--timeout", "0", "--cwd", repo, "--policy", rules, "--policy-enforce", mode,
				"--env", "GOCACHE=" + cache, "--", "go", "build", "-o", os.DevNull, "./..."}
			s, err := runOnce(argv, nil)
			if err != nil {
				return err
			}
			walls[mode] = append(walls[mode], s.wall)
			_ = os.RemoveAll(cache)
		}
	}
	med := []time.Duration{median(walls["static"]), median(walls["runtime"])}
	b.table([]string{"agentsh --policy-enforce static -- go build ./...", "agentsh --policy-enforce runtime -- go build ./..."}, med, []int64{0, 0}, 0)
	fmt.Fprintf(&b.out, "\nruntime / static: **%s** (runs: %d each, cold package cache).\n", ratio(med[1], med[0]), runs)
	return nil
}

func benchPolicyLoop(b *bench) error {
	rules, err := b.policyFile()
	if err != nil {
		return err
	}
	loop := "for i in $(seq 1000); do /bin/true; done"
	names := []string{"static", "runtime"}
	argvs := [][]string{
		{b.path("agentsh"), "--policy", rules, "--policy-enforce", "static", "-c", loop},
		{b.path("agentsh"), "--policy", rules, "--policy-enforce", "runtime", "-c", loop},
	}
	med, rss, err := interleave(max(b.runs/6, 3), argvs)
	if err != nil {
		return err
	}
	b.table(names, med, rss, 0)
	fmt.Fprintf(&b.out, "\nruntime / static: **%s**; %s per traced process (runs: %d each).\n",
		ratio(med[1], med[0]), ms((med[1]-med[0])/1000), max(b.runs/6, 3))
	return nil
}

func benchPolicyCheck(b *bench) error {
	rules, err := b.policyFile()
	if err != nil {
		return err
	}
	var s strings.Builder
	lines := []string{
		`git status --short | grep -v '^??' | wc -l`,
		`cd src && make -j2 test || echo "failed: $(date)"`,
		`find . -name '*.go' -exec gofmt -l {} +`,
		`sudo -u app env FOO=1 timeout 5 ./server --port 8080 &`,
		`for f in *.txt; do sed -i 's/a/b/' "$f"; done`,
	}
	for i := 0; i < 20; i++ {
		for _, l := range lines {
			s.WriteString(l + "\n")
		}
	}
	names := []string{"agentsh check -c true", "agentsh check -c SCRIPT (100 commands)"}
	argvs := [][]string{
		{b.path("agentsh"), "check", "--policy", rules, "-c", "true"},
		{b.path("agentsh"), "check", "--policy", rules, "-c", s.String()},
	}
	var walls [2][]time.Duration
	var rss [2]int64
	for i := 0; i < b.runs; i++ {
		for j, argv := range argvs {
			cmd := exec.Command(argv[0], argv[1:]...)
			start := time.Now()
			_ = cmd.Run() // exit 1 or 2 is a decision, not a failure
			walls[j] = append(walls[j], time.Since(start))
		}
	}
	med := []time.Duration{median(walls[0]), median(walls[1])}
	b.table(names, med, rss[:], 0)
	fmt.Fprintf(&b.out, "\nThe 100-command check: **%s** whole process; the parse and decision alone: %s (runs: %d each).\n",
		ms(med[1]), ms(med[1]-med[0]), b.runs)
	return nil
}
