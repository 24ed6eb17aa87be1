package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentplane/agentplane/pkg/jobs"
	"github.com/agentplane/agentplane/pkg/state"
)

// benchJobStart measures 'agentjob start -- true' against task-spooler's
// 'tsp true', the closest common tool: both return once a detached job is
// handed over. tsp is installed if missing.
func benchJobStart(b *bench) error {
	if _, err := exec.LookPath("tsp"); err != nil {
		fmt.Fprintln(os.Stderr, "bench: installing task-spooler for the tsp baseline")
		cmd := exec.Command("apt-get", "install", "-y", "task-spooler")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("tsp is missing and apt-get install task-spooler failed: %v", err)
		}
	}
	// A private tsp server and state dir: neither touches the user's.
	env := []string{"TS_SOCKET=" + filepath.Join(b.tmp, "tsp.socket"), "AGENTPLANE_STATE_DIR=" + filepath.Join(b.tmp, "state-start")}
	defer func() {
		k := exec.Command("tsp", "-K")
		k.Env = append(os.Environ(), env...)
		_ = k.Run()
	}()
	tsp := func(int) []string { return []string{"tsp", "true"} }
	aj := func(int) []string { return []string{b.path("agentjob"), "start", "--", "true"} }
	// The first tsp call starts its server; leave that out of the medians.
	if _, err := runOnce(tsp(0), env); err != nil {
		return err
	}
	med, rss, err := alternate(b.runs, env, []func(int) []string{tsp, aj})
	if err != nil {
		return err
	}
	b.table([]string{"tsp true", "agentjob start -- true"}, med, rss, 0)
	fmt.Fprintf(&b.out, "\nagentjob start / tsp: **%s** (runs: %d each). agentjob returns only after its supervisor\n"+
		"confirmed that the program was executed (so a missing program is an error), and has written the\n"+
		"job's spec and status durably; tsp returns once its server queued the command.\n", ratio(med[1], med[0]), b.runs)
	return nil
}

// benchJobScale measures status and list on an environment with 2,000
// finished jobs against one with 10. status reads one job's files, so it
// must not grow; list stats every job but parses only what changed.
func benchJobScale(b *bench) error {
	small, big := filepath.Join(b.tmp, "jobs-10"), filepath.Join(b.tmp, "jobs-2000")
	hSmall, err := b.finishedJobs(small, 10)
	if err != nil {
		return err
	}
	hBig, err := b.finishedJobs(big, 2000)
	if err != nil {
		return err
	}
	aj := b.path("agentjob")
	argvs := [][]string{
		{aj, "--state-dir", small, "status", hSmall},
		{aj, "--state-dir", big, "status", hBig},
		{aj, "--state-dir", small, "list"},
		{aj, "--state-dir", big, "list"},
	}
	// One list each first: it builds the cache that later lists validate.
	for _, a := range argvs[2:] {
		if _, err := runOnce(a, nil); err != nil {
			return err
		}
	}
	med, rss, err := interleave(b.runs/2, argvs)
	if err != nil {
		return err
	}
	b.table([]string{"status, 10 jobs", "status, 2,000 jobs", "list, 10 jobs", "list, 2,000 jobs"}, med, rss, 0)
	fmt.Fprintf(&b.out, "\nstatus with 2,000 jobs / with 10: **%s**; list of 2,000 jobs: **%s** (target under 100 ms);\n"+
		"list 2,000 / list 10: %s (runs: %d each).\n", ratio(med[1], med[0]), ms(med[3]), ratio(med[3], med[2]), b.runs/2)
	return nil
}

// finishedJobs fills a fresh state directory with n jobs of 'true' that
// have ended, started through the engine in parallel with the built
// agentjob as their supervisor, and returns the handle of one in the
// middle.
func (b *bench) finishedJobs(dir string, n int) (string, error) {
	d, err := state.Open(dir)
	if err != nil {
		return "", err
	}
	st := jobs.NewStore(d, []string{"agentjob", jobs.SupervisorCommand, d.Path()})
	st.SetExecutable(b.path("agentjob"))
	handles := make([]string, n)
	errs := make(chan error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				s, err := st.Start(context.Background(), jobs.Spec{Argv: []string{"true"}, Cwd: b.tmp})
				if err != nil {
					errs <- err
					continue
				}
				handles[i] = s.Handle
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return "", fmt.Errorf("creating %d jobs: %v", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := 0; i < n; i += 200 {
		if _, err := st.Wait(ctx, handles[i:min(n, i+200)], jobs.ForExit, false); err != nil {
			return "", fmt.Errorf("waiting for the jobs to end: %v", err)
		}
	}
	return handles[n/2], nil
}
