package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
		d, err := killOnce(b)
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

func killOnce(b *bench) (time.Duration, error) {
	dir, err := os.MkdirTemp(b.tmp, "contain-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	pids := filepath.Join(dir, "pids")
	script := `sleep 7901 & echo $! >> $1; setsid sleep 7902 & echo $! >> $1; (sleep 7903 & echo $! >> $1); ` +
		`while [ $(wc -l < $1) -lt 3 ]; do sleep 0.01; done; echo ready >> $1; wait`
	cmd := exec.Command(b.path("agentsh"), "--", "sh", "-c", script, "sh", pids)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+dir, "XDG_CONFIG_HOME="+dir)
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
