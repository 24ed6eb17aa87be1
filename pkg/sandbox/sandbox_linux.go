package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/result"
)

// minLandlockABI is the oldest Landlock ABI accepted: ABI 3 is the first
// that restricts truncate(2), without which a file outside the writable
// paths could still be emptied.
const minLandlockABI = 3

// maxLandlockABI is the newest ABI whose access rights the policy is
// written for. ABI 9 starts restricting connects to pathname UNIX sockets,
// which would change what "read everywhere" means; it is left out until
// that is decided and tested.
const maxLandlockABI = 7

// prepare checks p, already normalized and not empty, against what this
// machine can enforce and builds the helper invocation.
func prepare(p Policy, self string, caps Capabilities) (*Prepared, error) {
	b := &builder{p: p, caps: caps, self: self, sp: spec{UID: -1, GID: -1}}
	if err := b.check(); err != nil {
		return nil, err
	}
	prep, err := b.build()
	if err != nil {
		b.cleanup()
		return nil, err
	}
	return prep, nil
}

type builder struct {
	p    Policy
	caps Capabilities
	self string
	sp   spec

	report    map[string]any
	base      string   // private directory, removed by cleanup
	cgroups   []string // created cgroup directories, removed by cleanup
	memCgroup string
	pidCgroup string
	memRlimit bool
}

// isolating reports whether the policy draws a boundary that root's
// capabilities could cross (setns, umount, open_by_handle_at), in which case
// the helper shrinks the capability bounding set.
func (b *builder) isolating() bool {
	return b.p.Mode != ModeNone || b.p.Net == NetNone || len(b.p.DenyRead) > 0 || b.p.User != ""
}

// check refuses what this machine cannot enforce, naming what is missing.
func (b *builder) check() error {
	p, c := b.p, b.caps
	if p.Mode != ModeNone {
		if c.LandlockABI < minLandlockABI {
			return unavailable("--sandbox %s needs Landlock ABI %d or later; this kernel has %s", p.Mode, minLandlockABI, abiText(c.LandlockABI))
		}
	}
	nsOK := c.Root || c.UserNS
	if p.Net == NetNone && !(c.NetNS && nsOK) {
		return unavailable("--net none needs network namespaces%s", ifNotRoot(c.Root, " and unprivileged user namespaces"))
	}
	if len(p.DenyRead) > 0 && !(c.MountNS && nsOK) {
		return unavailable("--deny-read needs mount namespaces%s", ifNotRoot(c.Root, " and unprivileged user namespaces"))
	}
	if p.Pids > 0 && c.CgroupV1Pids == "" && c.Root {
		return unavailable("--pids needs a writable cgroup v1 pids controller when running as root (RLIMIT_NPROC does not apply to root)")
	}
	if p.User != "" && !c.Root {
		return unavailable("--user needs agentsh to run as root")
	}
	return nil
}

func abiText(abi int) string {
	if abi <= 0 {
		return "no Landlock"
	}
	return "ABI " + strconv.Itoa(abi)
}

func ifNotRoot(root bool, s string) string {
	if root {
		return ""
	}
	return s
}

func (b *builder) build() (*Prepared, error) {
	p := b.p
	b.report = map[string]any{"mode": p.Mode, "no_new_privs": true}

	// A --user target must be able to reach its temp dir; the caller's
	// $TMPDIR may sit below directories only the caller can enter, so the
	// system's /tmp (world-traversable, sticky) is used then.
	parent := ""
	if p.User != "" {
		parent = "/tmp"
	}
	base, err := os.MkdirTemp(parent, "agentplane-sandbox-")
	if err != nil {
		return nil, result.Errorf(result.CodeSandboxFailed, "cannot create the sandbox's private directory: %v", unwrap(err)).Wrap(err)
	}
	b.base = base
	// 0711: a --user target must reach tmp/ but not list or read the
	// status file beside it.
	if err := os.Chmod(base, 0o711); err != nil {
		return nil, result.Errorf(result.CodeSandboxFailed, "chmod %s: %v", base, unwrap(err))
	}
	tmp := filepath.Join(base, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, result.Errorf(result.CodeSandboxFailed, "cannot create the sandbox's temp dir: %v", unwrap(err))
	}
	// The helper creates the status file at its start, while it may still
	// write here, and writes to it only if it fails.
	status := filepath.Join(base, "status")
	b.sp.Status = status
	b.report["tmpdir"] = tmp

	if p.User != "" {
		if err := b.user(tmp); err != nil {
			return nil, err
		}
	}
	if p.Mode != ModeNone {
		b.sp.LandlockABI = min(b.caps.LandlockABI, maxLandlockABI)
		writable := []string{}
		if p.Mode == ModeWorkspaceWrite {
			writable = append(writable, p.Workspace)
			writable = append(writable, p.AllowWrite...)
			b.report["workspace"] = p.Workspace
			b.report["allow_write"] = p.AllowWrite
		}
		writable = append(writable, tmp)
		b.sp.Writable = writable
		b.sp.WriteFiles = p.WriteFiles
		b.report["filesystem"] = "landlock"
		b.report["landlock_abi"] = b.sp.LandlockABI
		b.report["writable"] = writable
	} else {
		b.report["filesystem"] = "host"
	}

	if len(p.DenyRead) > 0 {
		hidden, missing := []string{}, []string{}
		for _, path := range p.DenyRead {
			st, err := os.Stat(path)
			switch {
			case err != nil:
				// Nothing to hide; outside the writable paths it cannot
				// appear during the run either.
				missing = append(missing, path)
				continue
			case st.IsDir():
				b.sp.DenyDirs = append(b.sp.DenyDirs, path)
			default:
				b.sp.DenyFiles = append(b.sp.DenyFiles, path)
			}
			hidden = append(hidden, path)
		}
		b.report["deny_read"] = hidden
		if len(missing) > 0 {
			b.report["deny_read_missing"] = missing
		}
	}

	attr := &syscall.SysProcAttr{}
	if p.Net == NetNone {
		attr.Cloneflags |= syscall.CLONE_NEWNET
		b.sp.NetNone = true
		b.report["network"] = "namespace"
	} else {
		b.report["network"] = NetHost
	}
	if len(b.sp.DenyDirs)+len(b.sp.DenyFiles) > 0 {
		attr.Cloneflags |= syscall.CLONE_NEWNS
	}
	if attr.Cloneflags != 0 && !b.caps.Root {
		// An unprivileged caller gets the namespaces through a user
		// namespace that maps only its own ids, so files keep their
		// owners and nothing gains privilege outside.
		uid, gid := os.Getuid(), os.Getgid()
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		// The helper keeps its own uid, which would lose the namespace's
		// capabilities at execve; ambient capabilities carry over the two
		// it needs for the mounts and the loopback, and it clears them
		// before starting the target.
		attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN}
		b.sp.ClearAmbient = true
		b.report["user_namespace"] = true
	}

	if err := b.limits(); err != nil {
		return nil, err
	}
	b.sp.DropCaps = b.isolating() && b.caps.Root
	if b.sp.DropCaps {
		b.report["capabilities"] = keptCapNames()
	}

	argv, err := helperArgv(b.self, b.sp)
	if err != nil {
		return nil, err
	}
	statusPath := status
	memCg, pidCg := b.memCgroup, b.pidCgroup
	policy := p
	cgroups := b.cgroups

	var once sync.Once
	cleanup := func() {
		once.Do(func() {
			for i := len(cgroups) - 1; i >= 0; i-- {
				removeCgroup(cgroups[i])
			}
			_ = os.RemoveAll(base)
		})
	}
	return &Prepared{
		Argv:        argv,
		Env:         []string{"TMPDIR=" + tmp, "TMP=" + tmp, "TEMP=" + tmp},
		SysProcAttr: attr,
		Report:      b.report,
		TempDir:     tmp,
		Cleanup:     cleanup,
		Classify: func(exitCode int, signal string) string {
			return classify(policy, memCg, pidCg, statusPath, exitCode, signal)
		},
		Failure: func() error { return readFailure(statusPath) },
	}, nil
}

// user resolves --user to ids and hands the private temp dir to that user.
func (b *builder) user(tmp string) error {
	name := b.p.User
	u, err := user.Lookup(name)
	if err != nil {
		if _, nerr := strconv.Atoi(name); nerr != nil {
			return invalid("unknown user %q", name)
		}
		if u, err = user.LookupId(name); err != nil {
			return invalid("unknown user id %s", name)
		}
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return invalid("user %q has non-numeric ids", name)
	}
	var groups []int
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.Atoi(s); err == nil {
				groups = append(groups, g)
			}
		}
	}
	sort.Ints(groups)
	b.sp.UID, b.sp.GID, b.sp.Groups = uid, gid, groups
	if err := os.Chown(tmp, uid, gid); err != nil {
		return result.Errorf(result.CodeSandboxFailed, "chown %s: %v", tmp, unwrap(err))
	}
	b.report["user"] = map[string]any{"name": u.Username, "uid": uid, "gid": gid}
	return nil
}

// limits turns the resource limits into cgroups and rlimits.
func (b *builder) limits() error {
	p, c := b.p, b.caps
	if p.Memory > 0 {
		if c.CgroupV1Memory != "" {
			dir, err := b.newCgroup(c.CgroupV1Memory, c.memoryParent)
			if err != nil {
				return err
			}
			limit := strconv.FormatInt(p.Memory, 10)
			if err := writeCgroup(dir, "memory.limit_in_bytes", limit); err != nil {
				return err
			}
			// Without memsw the command could page out to swap and
			// exceed the limit; where swap accounting exists, cap it too.
			if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
				if err := writeCgroup(dir, "memory.memsw.limit_in_bytes", limit); err != nil {
					return err
				}
			}
			b.memCgroup = dir
			b.sp.Cgroups = append(b.sp.Cgroups, dir)
			b.report["memory"] = "cgroup_v1"
		} else {
			b.sp.Rlimits = append(b.sp.Rlimits, rlimitSet{unix.RLIMIT_AS, uint64(p.Memory), uint64(p.Memory)})
			b.report["memory"] = "rlimit_as"
			b.report["memory_note"] = "no writable memory cgroup: address space is limited instead; an allocation fails rather than the process being killed"
		}
		b.report["memory_bytes"] = p.Memory
	}
	if p.Pids > 0 {
		if c.CgroupV1Pids != "" {
			dir, err := b.newCgroup(c.CgroupV1Pids, c.pidsParent)
			if err != nil {
				return err
			}
			if err := writeCgroup(dir, "pids.max", strconv.Itoa(p.Pids)); err != nil {
				return err
			}
			b.pidCgroup = dir
			b.sp.Cgroups = append(b.sp.Cgroups, dir)
			b.report["pids"] = "cgroup_v1"
		} else {
			// check() refused this for root, for whom NPROC is ignored.
			b.sp.Rlimits = append(b.sp.Rlimits, rlimitSet{unix.RLIMIT_NPROC, uint64(p.Pids), uint64(p.Pids)})
			b.report["pids"] = "rlimit_nproc"
			b.report["pids_note"] = "RLIMIT_NPROC counts every process of the user, not only this command's"
		}
		b.report["pids_max"] = p.Pids
	}
	b.sp.Rlimits = append(b.sp.Rlimits, processRlimits(p, b.report)...)
	return nil
}

// newCgroup creates a cgroup for this run below the caller's own cgroup in
// that hierarchy, so that limits set on the caller keep covering the
// command.
func (b *builder) newCgroup(mount, parent string) (string, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	dir := filepath.Join(mount, parent, "agentplane-"+hex.EncodeToString(rnd[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", unavailable("cannot create cgroup %s: %v", dir, unwrap(err))
	}
	b.cgroups = append(b.cgroups, dir)
	return dir, nil
}

func writeCgroup(dir, file, value string) error {
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return unavailable("cannot set %s to %s: %v", path, value, unwrap(err))
	}
	return nil
}

func (b *builder) cleanup() {
	for i := len(b.cgroups) - 1; i >= 0; i-- {
		removeCgroup(b.cgroups[i])
	}
	if b.base != "" {
		_ = os.RemoveAll(b.base)
	}
}

// removeCgroup kills what is left in dir and removes it. Exited tasks leave
// a cgroup asynchronously, so rmdir is retried for a short while.
func removeCgroup(dir string) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) || time.Now().After(deadline) {
			return
		}
		if data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// classify reads the cgroup counters and the exit status to name the limit
// that ended the run.
func classify(p Policy, memCg, pidCg, status string, exitCode int, signal string) string {
	if e, _ := readHelperError(status); e != nil {
		return e.Code
	}
	sig := signalOf(exitCode, signal)
	if memCg != "" && memoryHit(memCg, sig) {
		return result.CodeMemoryLimit
	}
	if code := rlimitHit(p, sig); code != "" {
		return code
	}
	if pidCg != "" && counter(filepath.Join(pidCg, "pids.events"), "max") > 0 {
		return result.CodePidsLimit
	}
	return ""
}

// memoryHit reports an OOM kill in the memory cgroup. oom_kill in
// memory.oom_control counts kills (kernel 4.13+); failcnt is the fallback
// for older kernels, believed only together with a SIGKILL.
func memoryHit(dir string, sig unix.Signal) bool {
	if n := counter(filepath.Join(dir, "memory.oom_control"), "oom_kill"); n > 0 {
		return true
	} else if n == 0 {
		return false
	}
	return sig == unix.SIGKILL && counter(filepath.Join(dir, "memory.failcnt"), "") > 0
}

// counter reads "key value" lines (or a bare number when key is ""), and
// returns -1 when the file or the key is missing.
func counter(path, key string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case key == "" && len(f) == 1:
		case len(f) == 2 && f[0] == key:
			f = f[1:]
		default:
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	return -1
}
