package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// benchContainment measures how long the command tree of a SIGKILLed
// agentsh survives it: from the kill to the moment the last of a plain, a
// setsid and a double-forked descendant is gone.
func benchContainment(b *bench) error {
	n := b.runs / 3
	if n < 5 {
		n = 5
	}
	var lat []time.Duration
	for i := 0; i < n; i++ {
		d, err := killOnce(b, b.path("agentsh"), b.tmp, nil)
		if err != nil {
			return err
		}
		lat = append(lat, d)
	}
	worst := lat[0]
	for _, d := range lat {
		worst = max(worst, d)
	}
	fmt.Fprintf(&b.out, "| measure | median | worst | runs |\n| --- | --- | --- | --- |\n")
	fmt.Fprintf(&b.out, "| SIGKILL of agentsh to the whole tree gone | %s | %s | %d |\n", ms(median(lat)), ms(worst), n)
	fmt.Fprintf(&b.out, "\nThe guarantee is 2 s. The guard's cost on a call is in the startup case: a watchdog\n"+
		"(a shell, in cgroup mode) started in a process group of its own on another goroutine while the\n"+
		"call is prepared, a cgroup created and removed, and one read of cgroup.events in place of the scan\n"+
		"of /proc for leftovers.\n")
	return nil
}

// killOnce runs exe (agentsh) in a fresh directory under tmp, as cred
// (nil: this process's user), with a tree of a plain, a setsid and a
// double-forked descendant, SIGKILLs it once the tree runs and returns how
// long the tree outlived it.
func killOnce(b *bench, exe, tmp string, cred *syscall.Credential) (time.Duration, error) {
	dir, err := os.MkdirTemp(tmp, "contain-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if cred != nil {
		if err := os.Chmod(dir, 0o777); err != nil {
			return 0, err
		}
	}
	pids := filepath.Join(dir, "pids")
	script := `sleep 7901 & echo $! >> $1; setsid sleep 7902 & echo $! >> $1; (sleep 7903 & echo $! >> $1); ` +
		`while [ $(wc -l < $1) -lt 3 ]; do sleep 0.01; done; echo ready >> $1; wait`
	cmd := exec.Command(exe, "--", "sh", "-c", script, "sh", pids)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	cmd.Dir = dir
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	var fds []int
	for {
		data, _ := os.ReadFile(pids)
		if f := strings.Fields(string(data)); len(f) == 4 && f[3] == "ready" {
			for _, p := range f[:3] {
				pid, _ := strconv.Atoi(p)
				fd, err := unix.PidfdOpen(pid, 0)
				if err != nil {
					return 0, fmt.Errorf("process %d gone before the kill", pid)
				}
				fds = append(fds, fd)
			}
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return 0, fmt.Errorf("the command never got ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	defer func() {
		for _, fd := range fds {
			_ = unix.PidfdSendSignal(fd, syscall.SIGKILL, nil, 0)
			unix.Close(fd)
		}
	}()
	start := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		return 0, err
	}
	for _, fd := range fds {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(p, 10000)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n == 0 {
				return 0, fmt.Errorf("a descendant outlived the killed agentsh by 10 s (%v)", err)
			}
			break
		}
	}
	return time.Since(start), nil
}

// benchContainmentUnprivileged is the guard without a cgroup: agentsh run
// as nobody, where the command runs under the keeper (a re-exec of agentsh
// that is its subreaper parent). It measures what the keeper costs on
// `agentsh -- true` against the same call as root (cgroup mode), and how
// long a SIGKILLed agentsh's tree outlives it.
func benchContainmentUnprivileged(b *bench) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root, to compare with nobody")
	}
	pub, err := os.MkdirTemp("", "agentplane-bench-nobody-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(pub)
	if err := os.Chmod(pub, 0o755); err != nil {
		return err
	}
	exe := filepath.Join(pub, "agentsh")
	if err := copyFile(b.path("agentsh"), exe); err != nil {
		return err
	}
	state := filepath.Join(pub, "state")
	if err := os.Mkdir(state, 0o777); err != nil {
		return err
	}
	as := func(uid string) []string {
		return []string{"env", "XDG_STATE_HOME=" + state + "/" + uid, "XDG_CONFIG_HOME=" + state,
			"setpriv", "--reuid=" + uid, "--regid=" + uid, "--clear-groups", exe, "--", "true"}
	}
	names := []string{"agentsh -- true as root (cgroup)", "agentsh -- true as nobody (keeper)"}
	med, rss, err := interleave(b.runs, [][]string{as("0"), as("65534")})
	if err != nil {
		return err
	}
	b.table(names, med, rss, 0)
	n := max(b.runs/3, 5)
	var lat []time.Duration
	for i := 0; i < n; i++ {
		d, err := killOnce(b, exe, pub, &syscall.Credential{Uid: 65534, Gid: 65534})
		if err != nil {
			return err
		}
		lat = append(lat, d)
	}
	worst := slices.Max(lat)
	fmt.Fprintf(&b.out, "\n| measure | median | worst | runs |\n| --- | --- | --- | --- |\n")
	fmt.Fprintf(&b.out, "| SIGKILL of agentsh (as nobody) to the whole tree gone | %s | %s | %d |\n", ms(median(lat)), ms(worst), n)
	fmt.Fprintf(&b.out, "\nThe keeper's cost is one more start of the agentsh binary (its runtime and package init)\n"+
		"on the call's path, and one socket round trip for the command's pid and status.\n")
	return nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}
