package sandbox

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/sandbox/confine"
)

// Capabilities is what this machine can enforce, as far as can be told
// without starting a process. Prepare checks a policy against it; tests
// pass a doctored one to simulate an older or locked-down machine.
type Capabilities struct {
	Root        bool // effective uid 0
	LandlockABI int  // 0: no Landlock
	UserNS      bool // unprivileged user namespaces allowed
	NetNS       bool
	MountNS     bool
	// CgroupV1Memory and CgroupV1Pids are the mount points of writable
	// cgroup v1 hierarchies with those controllers, or "".
	CgroupV1Memory string
	CgroupV1Pids   string
	// CgroupV2 is the cgroup2 mount point, or ""; CgroupV2Controllers
	// lists the controllers enabled at its root.
	CgroupV2            string
	CgroupV2Controllers []string
	Seccomp             bool // seccomp filters (SECCOMP_SET_MODE_FILTER)
	// SeccompNotify: user notification and pidfd_getfd (5.6), which the
	// Unix socket gate of --net none and --net proxy needs.
	SeccompNotify bool
	PidNS         bool
	IPCNS         bool
	CgroupNS      bool
	MountAPI      bool // open_tree, move_mount, mount_setattr (5.12)
	ProcessAcct   bool // acct(2) with CAP_SYS_PACCT (acct_linux.go)

	// The caller's own cgroup in each v1 hierarchy: per-run cgroups are
	// created below it.
	memoryParent string
	pidsParent   string
}

// Probe inspects the running kernel and process. It reads a few files in
// /proc and /sys and makes a few system calls that change nothing
// (Landlock's version, seccomp's actions, mount_setattr and pidfd_getfd on
// invalid descriptors); it starts nothing.
func Probe() Capabilities { return probe(true, true, true) }

// probeFor is the part of Probe that Prepare needs for p, since it runs on
// every sandboxed call: the cgroup hierarchies (mountinfo, the process's
// cgroups, access checks) only for --memory and --pids, process
// accounting (the process's status file) only for --cpu-time and
// --file-size, which are all it serves (acct_linux.go), and the sysctls
// that switch off unprivileged user namespaces only when not root (root
// needs none).
func probeFor(p Policy) Capabilities {
	return probe(p.Memory > 0 || p.Pids > 0, os.Geteuid() != 0, p.CPUTime > 0 || p.FileSize > 0)
}

func probe(cgroups, userNS, acct bool) Capabilities {
	c := Capabilities{Root: os.Geteuid() == 0}
	c.LandlockABI = confine.LandlockABI()
	ns := namespaces()
	c.NetNS = ns["net"]
	c.MountNS = ns["mnt"]
	c.UserNS = userNS && ns["user"] && userNSAllowed()
	c.Seccomp = seccompActionAvailable(unix.SECCOMP_RET_KILL_PROCESS)
	c.SeccompNotify = seccompNotifyAvailable()
	c.PidNS = ns["pid"]
	c.IPCNS = ns["ipc"]
	c.CgroupNS = ns["cgroup"]
	// An invalid descriptor tells EBADF (the call exists) from ENOSYS.
	c.MountAPI = unix.MountSetattr(-1, "", 0, &unix.MountAttr{}) != unix.ENOSYS
	c.ProcessAcct = acct && processAcctAvailable()
	if !cgroups {
		return c
	}
	own := ownCgroups()
	for _, m := range cgroupMounts() {
		switch {
		case m.fstype == "cgroup2":
			c.CgroupV2 = m.point
			if data, err := os.ReadFile(filepath.Join(m.point, "cgroup.controllers")); err == nil {
				c.CgroupV2Controllers = strings.Fields(string(data))
			}
		case m.has("memory") && c.CgroupV1Memory == "":
			if parent, ok := writableParent(m.point, own["memory"]); ok {
				c.CgroupV1Memory, c.memoryParent = m.point, parent
			}
		case m.has("pids") && c.CgroupV1Pids == "":
			if parent, ok := writableParent(m.point, own["pids"]); ok {
				c.CgroupV1Pids, c.pidsParent = m.point, parent
			}
		}
	}
	return c
}

// Check reports what this machine can enforce, for `agentsh sandbox check`.
func Check() map[string]any {
	c := Probe()
	memory := "rlimit_as"
	if c.CgroupV1Memory != "" {
		memory = "cgroup_v1"
	}
	var pids any = false
	switch {
	case c.CgroupV1Pids != "":
		pids = "cgroup_v1"
	case !c.Root:
		pids = "rlimit_nproc"
	}
	nsOK := c.Root || c.UserNS
	// Every sandboxed run needs these besides its own mechanism.
	base := c.MountNS && c.PidNS && c.IPCNS && c.CgroupNS && c.MountAPI && nsOK && c.Seccomp && seccompArch
	controllers := c.CgroupV2Controllers
	if controllers == nil {
		controllers = []string{}
	}
	return map[string]any{
		"layers":                c.Layers(),
		"root":                  c.Root,
		"landlock_abi":          c.LandlockABI,
		"user_namespaces":       c.UserNS,
		"net_namespaces":        c.NetNS,
		"mount_namespaces":      c.MountNS,
		"cgroup_v1_memory":      c.CgroupV1Memory != "",
		"cgroup_v1_pids":        c.CgroupV1Pids != "",
		"cgroup_v2":             c.CgroupV2 != "",
		"cgroup_v2_controllers": controllers,
		"seccomp":               c.Seccomp,
		"enforceable": map[string]any{
			ModeReadOnly:       base && c.LandlockABI >= minLandlockABI,
			ModeWorkspaceWrite: base && c.LandlockABI >= minLandlockABI,
			"net_none":         base && c.NetNS && c.SeccompNotify,
			"net_proxy":        base && c.NetNS && c.SeccompNotify,
			"deny_read":        base,
			"memory":           memory,
			"pids":             pids,
			"cpu_time":         "rlimit_cpu",
			"file_size":        "rlimit_fsize",
			"nofile":           "rlimit_nofile",
			"user":             c.Root,
			"no_new_privs":     true,
			"namespaces":       base,
		},
	}
}

// Layer is one mechanism of the sandbox, whether this machine enforces
// it, and what it stops.
type Layer struct {
	Name     string `json:"name"`
	Enforced bool   `json:"enforced"`
	Detail   string `json:"detail,omitempty"`
	Stops    string `json:"stops"`
}

// Layers lists the sandbox's mechanisms as this machine offers them, for
// `agentsh sandbox check`. A sandboxed run needs every layer marked
// required below; without one it is refused (sandbox_unavailable).
func (c Capabilities) Layers() []Layer {
	nsOK := c.Root || c.UserNS
	ll := c.LandlockABI >= minLandlockABI
	detail := abiText(c.LandlockABI)
	return []Layer{
		{"landlock", ll, detail, "writes, renames, links and truncation outside the writable roots; from ABI 6 also signals and abstract Unix sockets to processes outside (read-only, workspace-write)"},
		{"read_only_root", c.MountNS && c.MountAPI && nsOK, "mount namespace + mount_setattr", "metadata changes outside the writable roots (chmod, chown, utimes, setxattr) also as root; writes to control files (state directory, config file, .git/hooks, .git/config) inside them"},
		{"minimal_dev", c.MountNS && nsOK, "", "reading raw block devices (a --deny-read file read around the filesystem)"},
		{"hidden_paths", c.MountNS && nsOK, "", "--deny-read paths, the secret key, session sockets and, under --net none and --net proxy, the host's pathname Unix sockets"},
		{"pid_namespace", c.PidNS && nsOK, "fresh /proc", "signals, ptrace, prlimit and /proc/PID/root of processes outside; the tree outliving its runner (PID 1 takes it down)"},
		{"ipc_namespace", c.IPCNS && nsOK, "", "host SysV shared memory, semaphores and message queues"},
		{"cgroup_namespace", c.CgroupNS && nsOK, "a read-only cgroupfs of the run's own cgroups", "leaving the run's cgroup (and its limits); reading other runs' cgroups, their names and counters"},
		{"net_namespace", c.NetNS && nsOK, "", "every network but loopback (--net none) and the allowlist proxy (--net proxy)"},
		{"unix_socket_gate", c.SeccompNotify && c.Seccomp && seccompArch && c.NetNS && nsOK, "seccomp user notification: " + strings.Join(confine.GateSyscalls, ", "), "under --net none and --net proxy, host pathname Unix sockets bound after the start (only the run's own sockets are reachable)"},
		{"seccomp", c.Seccomp && seccompArch, strings.Join(SeccompRules(), ", "), "io_uring, AF_VSOCK, prlimit on other processes, the key ring, bpf, perf, userfaultfd, open_by_handle_at, set-id bits"},
		{"capabilities", c.Root, "bounding set reduced", "root crossing namespace and mount boundaries; CHOWN, FOWNER and FSETID dropped in the filesystem modes"},
		{"no_new_privs", true, "", "setuid and file-capability programs gaining privilege"},
		{"close_on_exec", true, "", "descriptors the caller left open reaching the command"},
		{"cgroup_v1_memory", c.CgroupV1Memory != "", "", "--memory by an OOM kill (else RLIMIT_AS)"},
		{"cgroup_v1_pids", c.CgroupV1Pids != "", "", "--pids for the whole tree (RLIMIT_NPROC does not apply to root)"},
		{"rlimits", true, "", "--cpu-time, --file-size, --nofile"},
		{"process_accounting", c.ProcessAcct, "acct(2) per PID namespace", "a --cpu-time or --file-size limit hit by a child going unreported when the command exits 0"},
		{"children_limits", c.ProcessAcct, childrenLimitsDetail(c), "a --cpu-time or --file-size limit hit by any child going unreported when the command exits 0 (limits_of_children says how a run saw them)"},
	}
}

// childrenLimitsDetail says how this machine sees a limit hit by a child
// of the command (limits_of_children in a result): every process with
// process accounting; else only the orphans the namespace's init reaps,
// and every process when a runtime policy's guard traces the run. Nothing
// else lets a process without CAP_SYS_PACCT learn how a process it did
// not start and does not trace died (the proc connector needs
// CAP_NET_ADMIN, BPF needs CAP_BPF).
func childrenLimitsDetail(c Capabilities) string {
	if c.ProcessAcct {
		return childrenAcct + ": every process of the run"
	}
	return childrenOrphans + " without CAP_SYS_PACCT: only processes that outlive their parent (the namespace's init reaps them); " +
		childrenTraced + " under a runtime policy: every process (the guard traces them)"
}

// seccompNotifyAvailable reports user notification among the seccomp
// actions and pidfd_getfd (an invalid descriptor tells EBADF from ENOSYS).
func seccompNotifyAvailable() bool {
	if !seccompActionAvailable(unix.SECCOMP_RET_USER_NOTIF) {
		return false
	}
	_, err := unix.PidfdGetfd(-1, 0, 0)
	return err != unix.ENOSYS
}

// seccompActionAvailable asks the kernel whether seccomp filters may
// return action, as /proc/sys/kernel/seccomp/actions_avail lists them
// (SECCOMP_GET_ACTION_AVAIL, Linux 4.14, the same age as that file): one
// system call instead of reading the file.
func seccompActionAvailable(action uint32) bool {
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action)))
	return errno == 0
}

// namespaces lists the namespace types of /proc/self/ns: one directory
// read instead of a stat per type.
func namespaces() map[string]bool {
	ns := map[string]bool{}
	_ = scanDir("/proc/self/ns", func(name []byte, _ byte) { ns[string(name)] = true })
	return ns
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// userNSAllowed reads the sysctls distributions use to switch off
// unprivileged user namespaces.
func userNSAllowed() bool {
	if v, err := readTrim("/proc/sys/user/max_user_namespaces"); err == nil && v == "0" {
		return false
	}
	if v, err := readTrim("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && v == "0" {
		return false
	}
	if v, err := readTrim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil && v == "1" {
		return false
	}
	return true
}

func readTrim(path string) (string, error) {
	data, err := os.ReadFile(path)
	return strings.TrimSpace(string(data)), err
}

type mount struct {
	point  string
	fstype string
	opts   []string // super options: the v1 controllers live here
}

func (m mount) has(opt string) bool {
	for _, o := range m.opts {
		if o == opt {
			return true
		}
	}
	return false
}

// cgroupMounts lists cgroup and cgroup2 mounts from /proc/self/mountinfo.
func cgroupMounts() []mount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent maj:min root point opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || len(fields) < sep+4 {
			continue
		}
		fstype := fields[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		out = append(out, mount{
			point:  confine.UnescapeMountinfo(fields[4]),
			fstype: fstype,
			opts:   strings.Split(fields[sep+3], ","),
		})
	}
	return out
}

// ownCgroups maps each v1 controller to this process's cgroup path in it.
func ownCgroups() map[string]string {
	out := map[string]string{}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[1] == "" {
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			out[ctrl] = parts[2]
		}
	}
	return out
}

// writableParent returns the directory, relative to the mount, under which
// per-run cgroups can be made: the caller's own cgroup when it is visible
// and writable (a container may mount only its own subtree, in which case
// the mount root is the caller's cgroup).
func writableParent(point, own string) (string, bool) {
	if own != "" && own != "/" {
		if unix.Access(filepath.Join(point, own), unix.W_OK) == nil {
			return own, true
		}
	}
	if unix.Access(point, unix.W_OK) == nil {
		return "", true
	}
	return "", false
}

// seccompArch says whether the helper has a seccomp filter for this
// architecture.
const seccompArch = confine.SeccompArch

// SeccompRules names what the helper's seccomp filter refuses, for reports
// and docs.
func SeccompRules() []string { return confine.SeccompRules() }

// keptCapNames names the capabilities the helper keeps for a root command
// (the helper's keptCaps).
func keptCapNames(dropFile bool) []string {
	names := []string{"dac_override", "kill", "setgid", "setuid", "net_bind_service"}
	if !dropFile {
		names = append(names, "chown", "fowner", "fsetid")
	}
	return names
}
