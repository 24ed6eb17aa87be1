package sandbox

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/internal/account"
	"github.com/agentplane/agentplane/internal/faultpoint"
	"github.com/agentplane/agentplane/pkg/netproxy"
	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox/confine"
	"github.com/agentplane/agentplane/pkg/sandbox/spawn"
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

	report     map[string]any
	area       string    // the caller's temp area
	git        *gitWatch // what the end checks for planted git metadata
	base       string    // private directory, removed by cleanup
	cgroups    []string  // created cgroup directories, removed by cleanup
	memCgroup  string
	pidCgroup  string
	sweep      bool     // sweep leftovers of killed runners (sweepDue)
	cacheRoots []string // the toolchain caches' writable roots (real paths)
	// missingDeny are the --deny-read paths missing when the run was
	// prepared: a later start (refresh) hides those there by then.
	missingDeny []string
	net         *netProxy // with --net proxy, closed by cleanup
	netEnv      []string  // the proxy's variables for the command
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
	if (p.Net == NetNone || p.Net == NetProxy) && !(c.NetNS && nsOK) {
		return unavailable("--net %s needs network namespaces%s", p.Net, ifNotRoot(c.Root, " and unprivileged user namespaces"))
	}
	if (p.Net == NetNone || p.Net == NetProxy) && !c.SeccompNotify {
		return unavailable("--net %s needs seccomp user notification and pidfd_getfd (Linux 5.6) for its Unix socket gate", p.Net)
	}
	// Every sandboxed run gets its own mount, PID, IPC and cgroup
	// namespaces and a seccomp filter; a machine without them runs nothing
	// sandboxed rather than something half confined.
	if !(c.MountNS && c.PidNS && c.IPCNS && c.CgroupNS && nsOK) {
		return unavailable("the sandbox needs mount, PID, IPC and cgroup namespaces%s", ifNotRoot(c.Root, " and unprivileged user namespaces"))
	}
	if !c.MountAPI {
		return unavailable("the sandbox needs the mount API of Linux 5.12 (open_tree, move_mount, mount_setattr)")
	}
	if !c.Seccomp || !seccompArch {
		return unavailable("the sandbox needs seccomp filters on this architecture")
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
		parent = systemTmp
	}
	area, areas, err := tempAreas(parent)
	if err != nil {
		return nil, err
	}
	b.area = area
	if p.Mode == ModeWorkspaceWrite {
		// A run's private directory is its alone: a command learns its
		// TMPDIR's path (and a concurrent one's, from that command), and
		// a writable root there would let it plant the other run's
		// status file (a forged signal death) or files in its TMPDIR.
		// The covers hide the areas below a writable root that holds
		// them, not a writable root inside one.
		for _, w := range append(append([]string{p.Workspace}, p.AllowWrite...), p.WriteFiles...) {
			if real, err := realPath(w); err == nil && under(real, areas) {
				return nil, invalid("%s is in the sandbox's temp area, which no command may write", w)
			}
		}
	}
	if b.sweep = sweepDue(area); b.sweep {
		sweepStale(area)
	}
	base, err := claimPrivate(area)
	if err != nil {
		return nil, result.Errorf(result.CodeSandboxFailed, "cannot create the sandbox's private directory: %v", unwrap(err)).Wrap(err)
	}
	b.base = base
	tmp := filepath.Join(base, "tmp")
	if real, err := filepath.EvalSymlinks(tmp); err == nil {
		b.sp.TempDir = real
	}
	b.sp.TempAreas = areas
	// The helper creates the status file at its start, while it may still
	// write here, and writes to it only if it fails or the target dies of
	// a signal; no status file is no failure. The command sees /dev/null
	// in its place.
	status := filepath.Join(base, statusFile)
	b.sp.Status = status
	b.report["tmpdir"] = tmp
	b.sp.DenyFiles = append(b.sp.DenyFiles, status)

	if p.User != "" {
		if err := b.user(tmp); err != nil {
			return nil, err
		}
	}
	var env []string
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
		cacheRoots, cacheEnv, err := b.caches()
		if err != nil {
			return nil, err
		}
		writable = append(writable, cacheRoots...)
		b.cacheRoots = cacheRoots
		env = append(env, cacheEnv...)
		b.sp.Writable = writable
		b.sp.WriteFiles = p.WriteFiles
		// The identities the helper holds each path to: the workspace's
		// and the allow-write directories' as normalize checked them, the
		// program's own (temp dir, caches, call files) as they are now.
		if b.sp.WritableIDs, err = b.identities(writable); err != nil {
			return nil, err
		}
		if b.sp.WriteFileIDs, err = b.identities(p.WriteFiles); err != nil {
			return nil, err
		}
		b.sp.ReadOnlyRoot = true
		b.sp.DropFileCaps = b.caps.Root
		b.report["filesystem"] = "landlock"
		b.report["root"] = "read_only"
		b.report["landlock_abi"] = b.sp.LandlockABI
		b.report["writable"] = writable
	} else {
		b.report["filesystem"] = "host"
	}
	b.sp.MinimalDev = p.Mode != ModeNone || len(p.DenyRead) > 0
	if b.sp.MinimalDev {
		b.report["dev"] = "minimal"
	}

	if len(p.DenyRead) > 0 {
		hidden, missing := []string{}, []string{}
		for _, path := range p.DenyRead {
			if _, err := os.Stat(path); err != nil {
				// Nothing to hide; outside the writable paths it cannot
				// appear during the run either.
				missing = append(missing, path)
				b.missingDeny = append(b.missingDeny, path)
				continue
			}
			if err := b.hide(path); err != nil {
				return nil, err
			}
			hidden = append(hidden, path)
		}
		b.report["deny_read"] = hidden
		if len(missing) > 0 {
			b.report["deny_read_missing"] = missing
		}
	}
	if err := b.control(); err != nil {
		return nil, err
	}

	netns, err := b.network()
	if err != nil {
		return nil, err
	}
	attr, namespaces := spawn.Attr(netns, b.caps.Root)
	if !b.caps.Root {
		b.sp.ClearAmbient = true
		b.report["user_namespace"] = true
	}
	b.report["namespaces"] = namespaces
	b.report["proc"] = "private"
	b.report["seccomp"] = SeccompRules()

	if err := b.limits(); err != nil {
		return nil, err
	}
	if err := b.accounting(); err != nil {
		return nil, err
	}
	b.sp.DropCaps = b.caps.Root
	if b.sp.DropCaps {
		b.report["capabilities"] = keptCapNames(b.sp.DropFileCaps)
	}

	statusPath := status
	memCg, pidCg := b.memCgroup, b.pidCgroup
	policy := p
	cgroups := b.cgroups
	sp := b.sp
	self := b.self
	np := b.net
	env = append(env, b.netEnv...)

	var once sync.Once
	cleanup := func() {
		once.Do(func() {
			if np != nil {
				np.close()
			}
			for i := len(cgroups) - 1; i >= 0; i-- {
				removeCgroup(cgroups[i])
			}
			releasePrivate(base)
		})
	}
	var prep *Prepared
	prep = &Prepared{
		Path:        self,
		Env:         append([]string{"TMPDIR=" + tmp, "TMP=" + tmp, "TEMP=" + tmp}, env...),
		SysProcAttr: attr,
		Report:      b.report,
		TempDir:     tmp,
		Cleanup:     cleanup,
		Classify: func(exitCode int, signal string) string {
			return classify(policy, memCg, pidCg, sp.Acct, statusPath, exitCode, signal, prep.tracedDeaths())
		},
		Failure: func() error { return readFailure(statusPath) },
		net:     np,
		git:     b.git.checker(),
		exitStatus: func(exitCode int, signal string) (int, string) {
			return exitStatus(statusPath, exitCode, signal)
		},
		limitsHit: func() []string {
			hit := append(limitsHit(memCg, pidCg), acctLimitsHit(policy, sp.Acct)...)
			for _, code := range deathsLimits(policy, helperDeaths(statusPath), prep.tracedDeaths()) {
				if !slices.Contains(hit, code) {
					hit = append(hit, code)
				}
			}
			return hit
		},
	}
	prep.useHelper(self, sp)
	late := lateDeny(prep.spec, b.missingDeny)
	prep.hideable = slices.Concat(prep.spec.Hidden, late)
	prep.refresh = refresher(prep.spec, late)
	return prep, nil
}

// Stale reports a protected or hidden path that is another file now than
// the one the last start bound or covered (someone outside the sandbox
// replaced it by a rename: git config, an editor's save), or "" when
// each is as it was. The running command sees the new file at the path,
// unprotected: mounts cannot follow a name. A session replaces its shell
// (a new start, refresh) before its next call then.
func (p *Prepared) Stale() string {
	if p.spec == nil {
		return ""
	}
	p.smu.Lock()
	defer p.smu.Unlock()
	sp := p.spec
	for i, path := range sp.ReadOnly {
		if id, err := identify(path); i < len(sp.ReadOnlyIDs) && (err != nil || id != sp.ReadOnlyIDs[i]) {
			return path
		}
	}
	for i, path := range sp.Hidden {
		if id, err := identify(path); i < len(sp.HiddenIDs) && err == nil && id != sp.HiddenIDs[i] {
			return path
		}
	}
	// A hidden path that was gone at the last start, or a --deny-read
	// path missing at Prepare, made since (the user's new key file while
	// a session lives): not covered until a new start is.
	for _, path := range p.hideable {
		real, err := realPath(path)
		if err != nil || under(real, sp.Hidden) {
			continue
		}
		if _, err := identify(real); err == nil {
			return path
		}
	}
	return ""
}

// refresher returns what records again, for a later start of the same
// prepared sandbox (a job's restart, a session's replaced shell), the
// identities of sp's read-only and hidden paths: what is at each path
// then is what the helper binds read-only or covers. The paths stay those
// Prepare chose, whose parents inside the writable roots are pinned, so a
// run's command cannot have moved them: only a process outside the
// sandbox replaced them. A protected path that is gone fails the start
// (the command could create it); a hidden one that is gone has nothing
// to hide, and is covered again once it is back; so is a --deny-read path
// missing when the run was prepared (missing), once it is there (a file
// the user made since the job started). The writable roots keep the
// identities the lock's floor was checked on.
func refresher(sp *spec, missing []string) func() error {
	hidden := slices.Clone(sp.Hidden)
	if len(sp.ReadOnly) == 0 && len(hidden) == 0 && len(missing) == 0 {
		return nil
	}
	return func() error {
		ro := make([]confine.FileID, len(sp.ReadOnly))
		for i, path := range sp.ReadOnly {
			id, err := identify(path)
			if err != nil {
				return result.Errorf(result.CodeSandboxFailed, "protected path %s cannot be checked again for this start: %v", path, unwrap(err))
			}
			ro[i] = id
		}
		var paths []string
		var ids []confine.FileID
		for _, path := range hidden {
			id, err := identify(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return result.Errorf(result.CodeSandboxFailed, "hidden path %s cannot be checked again for this start: %v", path, unwrap(err))
			}
			// A second name made since (a command that linked the name
			// before the file was written there) would be read uncovered.
			if err := soleName(path, "hidden"); err != nil {
				return err
			}
			paths, ids = append(paths, path), append(ids, id)
		}
		for _, path := range missing {
			// What it leads to now, as Prepare resolves a --deny-read
			// path (a ~/.aws made a link to a dotfiles directory since).
			real, err := realPath(path)
			if err != nil || under(real, paths) {
				continue
			}
			id, err := identify(real)
			if err != nil {
				continue
			}
			if err := soleName(real, "hidden"); err != nil {
				return err
			}
			path := real
			for i := 0; i < len(paths); i++ {
				if under(paths[i], []string{path}) {
					paths, ids = slices.Delete(paths, i, i+1), slices.Delete(ids, i, i+1)
					i--
				}
			}
			paths, ids = append(paths, path), append(ids, id)
		}
		sp.ReadOnlyIDs, sp.Hidden, sp.HiddenIDs = ro, paths, ids
		return nil
	}
}

// network sets up the network policy: under --net none and --net proxy a
// network namespace of its own (only lo, brought up by the helper), the
// host's pathname Unix sockets covered, since neither the namespace nor
// Landlock (before ABI 9) stops a connect() to one, and the helper's gate
// for the ones bound later (confine/unixgate_linux.go). Under --net proxy the
// helper also listens on ProxyAddr inside the namespace and hands the
// listener to b.net, the allowlist proxy the runner serves on it, and the
// command's environment names the proxy. It reports whether the run gets a
// network namespace.
func (b *builder) network() (bool, error) {
	switch b.p.Net {
	case NetNone:
		b.report["network"] = "namespace"
	case NetProxy:
		rules, err := netproxy.ParseRules(b.p.AllowHosts)
		if err != nil {
			return false, invalid("--allow-host: %v", err)
		}
		b.sp.ProxyPort = ProxyPort
		b.net = newNetProxy(rules)
		b.netEnv = proxyEnv(rules)
		b.report["network"] = NetProxy
		b.report["proxy"] = ProxyAddr
		b.report["allow_hosts"] = rules.Patterns()
	default:
		b.report["network"] = NetHost
		return false, nil
	}
	b.sp.NetNone = true
	if socks := hostUnixSockets(); len(socks) > 0 {
		b.sp.DenyFiles = append(b.sp.DenyFiles, socks...)
		b.report["hidden_unix_sockets"] = len(socks)
	}
	// Sockets bound later are stopped by the helper's gate.
	b.report["unix_socket_gate"] = confine.GateSyscalls
	return true, nil
}

// lateDeny are the --deny-read paths missing when the run was prepared
// (missing) that a later start covers once they are there: not those
// covered by their path (below the helper's own mounts, in a temp area)
// or inside a hidden directory.
func lateDeny(sp *spec, missing []string) []string {
	return slices.DeleteFunc(slices.Clone(missing), func(p string) bool {
		return under(p, helperMounts) || under(p, sp.TempAreas) || under(p, sp.Hidden)
	})
}

// control adds agentplane's control files to the spec: read-only those
// the caller named and the git metadata that would run code outside the
// sandbox later (a workspace's .git/hooks and .git/config, the user's own
// git config), hidden the secrets. A protected path that changes while it
// is being recorded is an error.
func (b *builder) control() error {
	var protect []string
	home, _ := os.UserHomeDir()
	if b.p.Mode == ModeWorkspaceWrite {
		roots := append([]string{b.p.Workspace}, b.p.AllowWrite...)
		// Not searched: agentplane's own writable roots, and what is
		// protected or hidden already (a pin inside a read-only bind
		// would be a writable hole in it).
		var skip []string
		for _, w := range b.sp.Writable {
			if !slices.Contains(roots, w) {
				skip = append(skip, w)
			}
		}
		skip = append(skip, b.sp.TempAreas...) // covered in the sandbox
		for _, path := range slices.Concat(b.p.Protect, b.p.Hide, b.p.DenyRead) {
			if real, err := realPath(path); err == nil {
				skip = append(skip, real)
			}
		}
		since := coarseNow()
		g := newGitGuard(roots, b.sp.Writable, skip, home)
		ro, pins := g.binds()
		protect = append(protect, ro...)
		b.sp.Pinned = pins
		b.report["git"] = map[string]any{"repositories": g.repos, "complete": g.complete}
		b.git = g.watch(roots, since, filepath.Join(b.area, gitlinkCache))
	}
	if home != "" {
		// (~/.gitconfig, a file, is gitProtection's: created empty when
		// missing, where a directory in its place would break git.)
		for _, f := range []string{".config/git"} {
			path := filepath.Join(home, f)
			if under(path, b.sp.Writable) {
				protect = append(protect, path)
			}
		}
	}
	protect = append(protect, b.p.Protect...)
	// The symbolic links on the way to a protected or hidden path as
	// named (a home workspace whose ~/.config links into a dotfiles
	// directory): one a command replaced would lead the user's next
	// program, or the next run's cover, elsewhere. Pinned below.
	links := slices.Clone(b.p.denyLinks)
	onWay := func(path, real string) {
		if abs, err := filepath.Abs(path); err == nil && abs != real {
			links = append(links, linksOnWay(abs)...)
		}
	}
	var ro []string
	for _, path := range protect {
		real, err := realPath(path)
		if err != nil {
			continue
		}
		onWay(path, real)
		if _, err := os.Stat(real); errors.Is(err, fs.ErrNotExist) && under(real, b.sp.Writable) {
			// The command could create it (a config file, a state
			// directory with a forged key); an empty directory in its
			// place is protected instead, private unless every user reads
			// there (a 0700 /etc/agentplane would make every other user's
			// agentsh fail on its system-wide config).
			if slices.Contains(b.p.Public, path) {
				// Whatever the umask (a session server's is 077).
				if os.MkdirAll(real, 0o755) == nil {
					_ = os.Chmod(real, 0o755)
				}
			} else {
				_ = os.MkdirAll(real, 0o700)
			}
		}
		if _, err := os.Stat(real); err == nil && !slices.Contains(ro, real) {
			if err := soleName(real, "protected"); err != nil {
				return err
			}
			id, err := identify(real)
			if err != nil {
				return invalid("protected path %s changed while it was checked: %v", real, unwrap(err))
			}
			ro = append(ro, real)
			b.sp.ReadOnlyIDs = append(b.sp.ReadOnlyIDs, id)
		}
	}
	b.sp.ReadOnly = ro
	if len(ro) > 0 {
		b.report["protected"] = ro
	}
	var hidden []string
	for _, path := range b.p.Hide {
		real, err := realPath(path)
		if err != nil {
			continue
		}
		onWay(path, real)
		if _, err := os.Stat(real); err != nil {
			continue
		}
		if err := b.hide(real); err != nil {
			return err
		}
		hidden = append(hidden, real)
	}
	if len(hidden) > 0 {
		b.report["hidden"] = hidden
	}
	var roots, nested []string
	if b.p.Mode == ModeWorkspaceWrite {
		roots, nested = append([]string{b.p.Workspace}, b.p.AllowWrite...), b.p.AllowWrite
	}
	if len(roots) == 0 && len(b.cacheRoots) == 0 {
		return nil
	}
	// Not the program's own hidden files in the temp areas (the
	// helper's status file), which the areas' covers hide already.
	covered := slices.DeleteFunc(slices.Concat(b.sp.ReadOnly, b.sp.DenyDirs, b.sp.DenyFiles, b.sp.Hidden), func(p string) bool {
		return under(p, b.sp.TempAreas)
	})
	// The temp areas too: one inside a writable root (a TMPDIR in the
	// workspace) is covered where it is, and a directory above it
	// renamed aside would take it where the next run, which covers the
	// areas it knows by their paths, does not look.
	// A --deny-read path missing now is hidden at a later start once it
	// is there (refresher): the directories above it that exist are
	// pinned as well.
	targets := slices.Concat(covered, nested, b.sp.TempAreas, b.missingDeny)
	// The user's own caches (user_caches) are writable roots in both
	// modes, and may hold a hidden file (~/.cache/huggingface/token):
	// their directories above one are pinned as well. (Real paths
	// already; only those that hold a target cost anything.)
	for _, r := range b.cacheRoots {
		if slices.ContainsFunc(targets, func(p string) bool { return strings.HasPrefix(p, r+string(filepath.Separator)) }) {
			roots = append(roots, r)
		}
	}
	if len(roots) > 0 {
		b.sp.Pinned = pinParents(b.sp.Pinned, roots, targets, slices.Concat(covered, b.sp.TempAreas))
	}
	for _, l := range links {
		// Inside a writable root (not in a covered path, where nothing
		// can change it): bound onto itself, unfollowed.
		in := slices.ContainsFunc(b.sp.Writable, func(r string) bool { return strings.HasPrefix(l, r+string(filepath.Separator)) })
		if pin := confine.PinLink + l; in && !under(l, covered) && !slices.Contains(b.sp.Pinned, pin) {
			b.sp.Pinned = append(b.sp.Pinned, pin)
		}
	}
	return nil
}

// helperMounts are where the helper mounts file systems of its own
// (a fresh /proc, the minimal /dev, the cgroup view): a path there is
// another file inside the sandbox, or none, whatever it was outside.
var helperMounts = []string{"/proc", "/dev", "/sys/fs/cgroup"}

// hide adds path (absolute, free of symbolic links) to the paths the
// helper covers, with its identity now, which the helper holds it to. A
// path below the helper's own mounts or in a temp area (covered) is
// covered by its path, where it still is. One inside another is left
// out: the cover of the outer one leaves nothing at its path.
func (b *builder) hide(path string) error {
	if under(path, b.sp.Hidden) {
		return nil
	}
	if under(path, helperMounts) || under(path, b.sp.TempAreas) {
		st, err := os.Stat(path)
		switch {
		case err != nil:
		case st.IsDir():
			b.sp.DenyDirs = append(b.sp.DenyDirs, path)
		default:
			b.sp.DenyFiles = append(b.sp.DenyFiles, path)
		}
		return nil
	}
	if err := soleName(path, "hidden"); err != nil {
		return err
	}
	id, err := identify(path)
	if err != nil {
		return invalid("hidden path %s changed while it was checked: %v", path, unwrap(err))
	}
	for i := 0; i < len(b.sp.Hidden); i++ {
		if under(b.sp.Hidden[i], []string{path}) {
			b.sp.Hidden = slices.Delete(b.sp.Hidden, i, i+1)
			b.sp.HiddenIDs = slices.Delete(b.sp.HiddenIDs, i, i+1)
			i--
		}
	}
	b.sp.Hidden = append(b.sp.Hidden, path)
	b.sp.HiddenIDs = append(b.sp.HiddenIDs, id)
	return nil
}

// pinParents adds to pins every directory between a writable root and a
// path of targets inside it (protected and hidden paths, nested writable
// roots, temp areas), parents first. A mount sits on the path itself, which cannot
// then be renamed, but a directory above it could: a command would rename
// it aside, and the next run would protect, or hide, the path's old name
// while the file itself lay writable, or readable, under the new one (a
// deny_read file read, the user's config with its sandbox_lock moved out
// of its place), or would find a link to anywhere where a nested writable
// root was. A directory inside a covered (read-only or hidden) path is not
// pinned: a bind there would be a writable hole in it.
func pinParents(pins, roots, targets, covered []string) []string {
	seen := map[string]bool{}
	for _, p := range pins {
		seen[p] = true
	}
	for _, r := range roots {
		real, err := realPath(r)
		if err != nil {
			continue
		}
		for _, p := range targets {
			for d := filepath.Dir(p); d != real && strings.HasPrefix(d, real+string(filepath.Separator)); d = filepath.Dir(d) {
				if !seen[d] && !slices.ContainsFunc(covered, func(c string) bool {
					return d == c || strings.HasPrefix(d, c+string(filepath.Separator))
				}) {
					seen[d] = true
					pins = append(pins, d)
				}
			}
		}
	}
	sort.SliceStable(pins, func(i, j int) bool { return len(pins[i]) < len(pins[j]) })
	return pins
}

// A run's private directory is area/run.OWNER.RND (privateName), mode
// 0711 (a --user target must reach tmp/ but not list or read the status
// file beside it), holding tmp/ (the command's TMPDIR, 0700) and the
// helper's status file. Cleanup does not remove the two directories: it
// empties them and renames the private directory to area/spare.RND, which
// the next run renames to its own name. On a filesystem mounted with
// discard (this repository's CI machines: ext4 on a virtual disk), removing
// a directory frees its block and waits for the device to discard it,
// about 4 ms per directory; a rename frees nothing. An empty status file
// (the run ended without a failure or a signal to record) stays in the
// spare too: the next helper opens it instead of creating it, which on
// ext4 is an inode allocated and journalled on the way to every command.
// At most maxSpares are kept; the covers of the temp areas hide them from
// every command like the rest of the area.

const (
	sparePrefix = "spare."
	maxSpares   = 4
	statusFile  = "status"
)

// claimPrivate returns this run's private directory in area, with an
// empty tmp/ of the caller's (0700): a spare renamed, else a new one.
func claimPrivate(area string) (string, error) {
	for _, spare := range spares(area) {
		dir := filepath.Join(area, privateName(randHex(3)))
		if unix.Renameat2(unix.AT_FDCWD, filepath.Join(area, spare), unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE) != nil {
			continue // another run took it
		}
		if usableSpare(dir) {
			return dir, nil
		}
		_ = os.RemoveAll(dir)
	}
	dir, err := makePrivate(area, 0o711)
	if err != nil {
		return "", err
	}
	if err := unix.Mkdir(filepath.Join(dir, "tmp"), 0o700); err != nil {
		_ = unix.Rmdir(dir)
		return "", &fs.PathError{Op: "mkdir", Path: filepath.Join(dir, "tmp"), Err: err}
	}
	return dir, nil
}

// spares lists the spare directories in area.
func spares(area string) []string {
	var out []string
	_ = scanDir(area, func(name []byte, typ byte) {
		if bytes.HasPrefix(name, []byte(sparePrefix)) && (typ == unix.DT_DIR || typ == unix.DT_UNKNOWN) {
			out = append(out, string(name))
		}
	})
	return out
}

// usableSpare checks a claimed spare: a directory of the caller's, 0711,
// holding nothing but an empty tmp/ of the caller's, which it sets back
// to 0700 (a --user run handed it to its target), and maybe an empty
// status file (emptyStatus). tmp/ is the caller's and 0700 before it is
// counted empty: a --user target's process that holds it (it may read
// /proc/PID/cwd of its own command) could add an entry up to the chown,
// and after the count it would reach the next run's TMPDIR.
func usableSpare(dir string) bool {
	uid, gid := os.Geteuid(), os.Getegid()
	var st unix.Stat_t
	if unix.Lstat(dir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != uid || st.Mode&0o7777 != 0o711 {
		return false
	}
	tmp := filepath.Join(dir, "tmp")
	if unix.Lstat(tmp, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false
	}
	if int(st.Uid) != uid || int(st.Gid) != gid {
		if unix.Lchown(tmp, uid, gid) != nil {
			return false
		}
	}
	if st.Mode&0o7777 != 0o700 {
		if unix.Chmod(tmp, 0o700) != nil {
			return false
		}
	}
	want := 1
	if emptyStatus(filepath.Join(dir, statusFile)) {
		want = 2
	}
	if names(dir) != want || names(tmp) != 0 {
		return false
	}
	faultpoint.Hit("spare.checked")
	return true
}

// emptyStatus reports whether path is an empty regular file of the
// caller's, 0600, with one name: a status file that records nothing, which
// a spare may keep (a helper empties one that is not, at its start).
func emptyStatus(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o7777 == 0o600 &&
		st.Size == 0 && int(st.Uid) == os.Geteuid() && st.Nlink == 1
}

// names counts the entries of dir (-1 when it cannot be read).
func names(dir string) int {
	n := 0
	if scanDir(dir, func([]byte, byte) { n++ }) != nil {
		return -1
	}
	return n
}

// releasePrivate ends a run's use of its private directory base: emptied
// and kept as a spare (claimPrivate), or removed when it cannot be
// emptied or enough spares are kept already.
func releasePrivate(base string) {
	area := filepath.Dir(base)
	tmp := filepath.Join(base, "tmp")
	ok := true
	_ = scanDir(base, func(name []byte, _ byte) {
		if string(name) == statusFile && emptyStatus(filepath.Join(base, statusFile)) {
			return
		}
		if string(name) != "tmp" {
			if os.RemoveAll(filepath.Join(base, string(name))) != nil {
				ok = false
			}
		}
	})
	var left []string
	if scanDir(tmp, func(name []byte, _ byte) { left = append(left, string(name)) }) != nil {
		ok = false
	}
	for _, name := range left {
		// What the command left in its TMPDIR.
		if os.RemoveAll(filepath.Join(tmp, name)) != nil {
			ok = false
		}
	}
	if ok && len(spares(area)) < maxSpares &&
		unix.Renameat2(unix.AT_FDCWD, base, unix.AT_FDCWD, filepath.Join(area, sparePrefix+randHex(4)), unix.RENAME_NOREPLACE) == nil {
		return
	}
	_ = os.RemoveAll(base)
}

// randHex returns n random bytes in hex, for names that must not collide
// (a collision is retried: RENAME_NOREPLACE, EEXIST) and are not secrets
// (the directories they name are the caller's, and covered in every
// sandbox). From math/rand/v2's generator (ChaCha8, seeded by the runtime
// from the kernel): crypto/rand's first read in a process sets up its
// own state, which the sandbox's names alone paid for on every call.
func randHex(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return hex.EncodeToString(b)
}

// makePrivate creates a run's private directory in area, named after its
// owner (privateName), with mode perm whatever the umask: one mkdir where
// the umask allows it, no chmod.
func makePrivate(area string, perm uint32) (string, error) {
	for try := 0; ; try++ {
		dir := filepath.Join(area, privateName(randHex(3)))
		err := unix.Mkdir(dir, perm)
		if errors.Is(err, unix.EEXIST) && try < 10 {
			continue
		}
		if err != nil {
			return "", &fs.PathError{Op: "mkdir", Path: dir, Err: err}
		}
		var st unix.Stat_t
		if err := unix.Lstat(dir, &st); err != nil || st.Mode&0o7777 != perm {
			if err := unix.Chmod(dir, perm); err != nil {
				_ = unix.Rmdir(dir)
				return "", &fs.PathError{Op: "chmod", Path: dir, Err: err}
			}
		}
		return dir, nil
	}
}

// under reports whether path is one of roots or inside one.
func under(path string, roots []string) bool {
	for _, r := range roots {
		if path == r || strings.HasPrefix(path, r+string(filepath.Separator)) || r == "/" {
			return true
		}
	}
	return false
}

// user resolves --user to ids and hands the private temp dir to that user.
func (b *builder) user(tmp string) error {
	name := b.p.User
	u, err := account.Lookup(name)
	if err != nil {
		if errors.Is(err, account.ErrUnknown) {
			if _, nerr := strconv.Atoi(name); nerr == nil {
				return invalid("unknown user id %s", name)
			}
			return invalid("unknown user %q", name)
		}
		return result.Errorf(result.CodeSandboxFailed, "--user %s: %v", name, err)
	}
	uid, gid, groups := u.UID, u.GID, append([]int(nil), u.Groups...)
	sort.Ints(groups)
	b.sp.UID, b.sp.GID, b.sp.Groups = uid, gid, groups
	if err := os.Chown(tmp, uid, gid); err != nil {
		return result.Errorf(result.CodeSandboxFailed, "chown %s: %v", tmp, unwrap(err))
	}
	b.report["user"] = map[string]any{"name": u.Name, "uid": uid, "gid": gid}
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
			b.sp.Rlimits = append(b.sp.Rlimits, rlimitSet{Resource: unix.RLIMIT_AS, Cur: uint64(p.Memory), Max: uint64(p.Memory)})
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
			b.sp.Rlimits = append(b.sp.Rlimits, rlimitSet{Resource: unix.RLIMIT_NPROC, Cur: uint64(p.Pids), Max: uint64(p.Pids)})
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
	if b.sweep {
		sweepCgroups(filepath.Join(mount, parent))
	}
	dir := filepath.Join(mount, parent, cgroupName(randHex(4)))
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
	if b.net != nil {
		b.net.close()
	}
	for i := len(b.cgroups) - 1; i >= 0; i-- {
		removeCgroup(b.cgroups[i])
	}
	if b.base != "" {
		releasePrivate(b.base)
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
func classify(p Policy, memCg, pidCg, acct, status string, exitCode int, signal string, traced confine.Deaths) string {
	if e, _ := readHelperError(status); e != nil && e.Code != "" {
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
	// A child's death by a limit, which the command turned into its own
	// failure (make's exit 2).
	if hit := acctLimitsHit(p, acct); len(hit) > 0 {
		return hit[0]
	}
	// Without accounting: the deaths the namespace's init reaped, and
	// those the runtime guard traced.
	if hit := deathsLimits(p, helperDeaths(status), traced); len(hit) > 0 {
		return hit[0]
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

// caches returns the writable roots and environment for toolchain caches
// in a filesystem mode. By default every cache goes to a private directory
// of the environment (one per uid), so that a build works without making
// the user's own caches writable (a poisoned build cache or module cache
// would run code in the user's next unsandboxed build). UserCaches makes
// the user's cache directories writable instead, as they are.
func (b *builder) caches() ([]string, []string, error) {
	p := b.p
	home, _ := os.UserHomeDir()
	if p.UserCaches {
		roots := userCacheRoots(p)
		b.report["caches"] = map[string]any{"kind": "user", "writable": roots}
		return roots, nil, nil
	}
	if p.CacheDir == "" {
		return nil, nil, nil
	}
	dir := filepath.Join(p.CacheDir, "uid-"+strconv.Itoa(os.Getuid()))
	kind := "private"
	if b.sp.UID >= 0 {
		// The environment's directory is the caller's (0700); another
		// user's tools get a cache for this run only, in its temp dir.
		dir, kind = filepath.Join(b.base, "tmp", ".cache"), "run"
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, result.Errorf(result.CodeSandboxFailed, "cannot create the toolchain cache %s: %v", dir, unwrap(err))
	}
	if b.sp.UID >= 0 {
		if err := os.Chown(dir, b.sp.UID, b.sp.GID); err != nil {
			return nil, nil, result.Errorf(result.CodeSandboxFailed, "chown %s: %v", dir, unwrap(err))
		}
	}
	real, err := realPath(dir)
	if err != nil {
		return nil, nil, result.Errorf(result.CodeSandboxFailed, "toolchain cache %s: %v", dir, err)
	}
	env := []string{
		"XDG_CACHE_HOME=" + filepath.Join(real, "xdg"),
		"GOCACHE=" + filepath.Join(real, "go-build"),
		"GOMODCACHE=" + filepath.Join(real, "go-mod"),
		// Module files are read-only by default, which would keep the
		// operator from removing the cache.
		"GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -modcacherw"),
		"npm_config_cache=" + filepath.Join(real, "npm"),
		"PIP_CACHE_DIR=" + filepath.Join(real, "pip"),
		"CARGO_HOME=" + filepath.Join(real, "cargo"),
	}
	// Modules the user already downloaded are served read-only from the
	// user's own module cache before the network is asked, so builds work
	// offline (--net none) with the private cache.
	if dl := filepath.Join(userModCache(home), "cache", "download"); dl != "" {
		if st, err := os.Stat(dl); err == nil && st.IsDir() {
			proxy := os.Getenv("GOPROXY")
			if proxy == "" {
				proxy = "https://proxy.golang.org,direct"
			}
			if proxy != "off" {
				env = append(env, "GOPROXY=file://"+dl+","+proxy)
			}
		}
	}
	b.report["caches"] = map[string]any{"kind": kind, "dir": real}
	if kind == "run" {
		return nil, env, nil
	}
	return []string{real}, env, nil
}

func userModCache(home string) string {
	if v := os.Getenv("GOMODCACHE"); v != "" {
		return v
	}
	if v := os.Getenv("GOPATH"); v != "" {
		return filepath.Join(filepath.SplitList(v)[0], "pkg", "mod")
	}
	return filepath.Join(home, "go", "pkg", "mod")
}

// userCacheRoots are the writable roots UserCaches adds in p (resolved,
// those that are directories), none without a filesystem mode.
func userCacheRoots(p Policy) []string {
	if !p.UserCaches || p.Mode == ModeNone {
		return nil
	}
	home, _ := os.UserHomeDir()
	var roots []string
	for _, d := range userCacheDirs(home) {
		if real, err := realPath(d); err == nil {
			if st, err := os.Stat(real); err == nil && st.IsDir() {
				roots = append(roots, real)
			}
		}
	}
	return roots
}

// userCacheDirs are the caches UserCaches makes writable.
func userCacheDirs(home string) []string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		cache = filepath.Join(home, ".cache")
	}
	dirs := []string{cache, userModCache(home), filepath.Join(home, ".npm"), filepath.Join(home, ".cargo", "registry"), filepath.Join(home, ".cargo", "git")}
	if v := os.Getenv("GOCACHE"); v != "" {
		dirs = append(dirs, v)
	}
	return dirs
}

// limitsHit reads the cgroup counters, which say whether the kernel
// refused a fork or killed for memory whatever the exit status.
func limitsHit(memCg, pidCg string) []string {
	var hit []string
	if memCg != "" && counter(filepath.Join(memCg, "memory.oom_control"), "oom_kill") > 0 {
		hit = append(hit, result.CodeMemoryLimit)
	}
	if pidCg != "" && counter(filepath.Join(pidCg, "pids.events"), "max") > 0 {
		hit = append(hit, result.CodePidsLimit)
	}
	return hit
}

// identity is the identity of a writable path for the spec: the one
// normalize took when it resolved the path, else the path's now.
func (b *builder) identity(path string) (confine.FileID, error) {
	if id, ok := b.p.ids[path]; ok {
		return id, nil
	}
	id, err := identify(path)
	if err != nil {
		return id, invalid("writable path %s: %v", path, unwrap(err))
	}
	return id, nil
}

// identities is identity of each path, in order.
func (b *builder) identities(paths []string) ([]confine.FileID, error) {
	var ids []confine.FileID
	for _, p := range paths {
		id, err := b.identity(p)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// identify is a directory's identity, reached without following a
// symbolic link (confine.Identify).
func identify(path string) (confine.FileID, error) { return confine.Identify(path) }
