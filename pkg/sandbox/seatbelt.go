package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentplane/agentplane/pkg/result"
)

// This file generates the Seatbelt (macOS sandbox) profile the darwin
// sandbox runs commands under, as `sandbox-exec -p PROFILE -D KEY=VALUE …
// -- argv`. It is portable so that its tests run on any machine; only
// sandbox_darwin.go uses it.
//
// Paths never appear in the profile text: each one is a parameter, named
// in the profile as (param "KEY") and given its value by a -D argument, so
// no path can change the profile's meaning whatever characters it holds.
// The few fixed strings the profile does contain go through sbplString.
//
// The profile starts closed ((deny default)) and opens what a shell and a
// toolchain need: exec and fork, signals and process information within
// the sandbox, sysctl reads, the Mach services name lookup and power
// management use, POSIX semaphores (Python's multiprocessing), terminals,
// and reads of every file but the --deny-read paths. Writes are allowed
// only under the writable roots (all of the filesystem in mode none), never
// under the protected paths inside them nor the --deny-read paths, plus
// the harmless character devices. --net none allows only loopback IP and
// Unix sockets under the writable roots.

// SeatbeltExec is where macOS keeps sandbox-exec.
const SeatbeltExec = "/usr/bin/sandbox-exec"

// seatbeltPolicy is what one Seatbelt profile enforces. All paths are
// absolute with symlinks resolved: Seatbelt matches the real path of
// every file it checks (/private/tmp, never /tmp).
type seatbeltPolicy struct {
	// WriteAll allows writes anywhere (mode none, used with --net none or
	// --deny-read alone); Writable then only says where Unix sockets may
	// be used under NetNone.
	WriteAll bool
	// Writable lists the directories writes are allowed under, and where
	// Unix sockets may be used under NetNone.
	Writable []string
	// Protected lists paths that stay read-only even under a writable
	// root (a workspace's .git/hooks and .git/config).
	Protected []string
	// DenyRead lists paths that can be neither read nor written, nor
	// reached as Unix sockets: --deny-read and agentplane's hidden files
	// (the secret key, the sessions' sockets and secrets).
	DenyRead []string
	// NetNone allows only loopback IP and the Unix sockets under Writable.
	NetNone bool
}

// seatbeltParam is one -D KEY=VALUE definition.
type seatbeltParam struct {
	Key   string
	Value string
}

// seatbeltProfile is a generated profile and the parameters it refers to.
type seatbeltProfile struct {
	Text   string
	Params []seatbeltParam
}

// Args is the sandbox-exec invocation up to and including "--"; the
// command's argv follows it.
func (p seatbeltProfile) Args() []string {
	out := make([]string, 0, 4+2*len(p.Params))
	out = append(out, SeatbeltExec, "-p", p.Text)
	for _, d := range p.Params {
		out = append(out, "-D", d.Key+"="+d.Value)
	}
	return append(out, "--")
}

// The parameter name prefixes; a parameter is PREFIX_N.
const (
	paramWritable  = "WRITABLE_ROOT"
	paramProtected = "PROTECTED"
	paramDenyRead  = "DENY_READ"
)

// Mach services every command may look up: user and group lookups through
// opendirectoryd (getpwuid, getgrouplist), and power management, which
// some runtimes ask at start-up.
var seatbeltMachServices = []string{
	"com.apple.system.opendirectoryd.libinfo",
	"com.apple.system.opendirectoryd.membership",
	"com.apple.PowerManagement.control",
}

// Mach services that only a command with the network needs: name
// resolution, network configuration, and certificate trust for TLS.
var seatbeltNetworkMachServices = []string{
	"com.apple.SystemConfiguration.DNSConfiguration",
	"com.apple.SystemConfiguration.configd",
	"com.apple.networkd",
	"com.apple.SecurityServer",
	"com.apple.trustd.agent",
	"com.apple.ocspd",
}

// Character devices any command may write: writing to them changes no
// file.
var seatbeltWritableDevices = []string{"/dev/null", "/dev/zero", "/dev/tty", "/dev/dtracehelper"}

// profile generates the profile for sp.
func (sp seatbeltPolicy) profile() seatbeltProfile {
	g := &sbplGen{}
	writable := g.params(paramWritable, sp.Writable)
	protected := g.params(paramProtected, sp.Protected)
	denied := g.params(paramDenyRead, sp.DenyRead)

	g.line("(version 1)")
	g.line("(deny default)")

	g.comment("Processes: the command and what it starts; signals and process information only within the sandbox.")
	g.line("(allow process-exec)")
	g.line("(allow process-fork)")
	g.line("(allow signal (target same-sandbox))")
	g.line("(allow process-info* (target same-sandbox))")

	g.comment("What runtimes ask at start-up: sysctls (CPU count, page size, OS version), host info, preferences.")
	g.line("(allow sysctl-read)")
	g.line(`(allow sysctl-write (sysctl-name "kern.grade_cputype"))`)
	g.line("(allow mach-host*)")
	g.line("(allow user-preference-read)")
	g.line(`(allow iokit-open (iokit-registry-entry-class "RootDomainUserClient"))`)
	g.line("(allow ipc-posix-sem)")
	g.line("(allow mach-lookup" + g.globalNames(seatbeltMachServices) + ")")

	g.comment("Terminals, for commands that open a pseudo-terminal.")
	g.line("(allow pseudo-tty)")
	g.line(`(allow file-read* file-write* file-ioctl (literal "/dev/ptmx"))`)
	g.line(`(allow file-read* file-write* file-ioctl (regex #"^/dev/ttys[0-9]+$"))`)

	g.comment("Reads, existence tests and executable mappings (dyld): everywhere but the --deny-read paths.")
	g.line("(allow file-read* file-test-existence file-map-executable" + g.except(`(subpath "/")`, denied) + ")")

	g.comment("Writes: under the writable roots, never their protected paths.")
	if sp.WriteAll {
		g.line("(allow file-write*" + g.except(`(subpath "/")`, append(append([]string(nil), protected...), denied...)) + ")")
	} else {
		for _, w := range writable {
			g.line("(allow file-write*" + g.except(subpath(w), append(append([]string(nil), protected...), denied...)) + ")")
		}
	}
	g.line("(allow file-write-data file-ioctl" + g.literals(seatbeltWritableDevices) + ")")
	// Opening /dev/fd/N duplicates a descriptor the command already holds
	// (echo >/dev/stderr); it reaches no file the descriptor did not.
	g.line(`(allow file-write-data (regex #"^/dev/fd/[0-9]+$"))`)

	if sp.NetNone {
		g.comment("--net none: loopback only, and Unix sockets under the writable roots.")
		g.line(`(allow network-bind (local ip "localhost:*"))`)
		g.line(`(allow network-inbound (local ip "localhost:*"))`)
		g.line(`(allow network-outbound (remote ip "localhost:*"))`)
		for _, w := range writable {
			g.line("(allow network-bind (local unix-socket " + subpath(w) + "))")
			g.line("(allow network-outbound (remote unix-socket " + subpath(w) + "))")
		}
	} else {
		g.comment("--net host: the network, name resolution and certificate trust.")
		g.line("(allow network*)")
		g.line("(allow system-socket)")
		g.line("(allow mach-lookup" + g.globalNames(seatbeltNetworkMachServices) + ")")
	}
	// The exceptions above already keep these out; the explicit denials,
	// last so that they win over any allow, say it a second time.
	if len(protected) > 0 {
		g.comment("Protected paths stay read-only.")
		g.line("(deny file-write*" + paths(protected) + ")")
	}
	if len(denied) > 0 {
		g.comment("--deny-read and hidden paths are neither readable nor writable, and no Unix socket below them (a session's) can be reached.")
		g.line("(deny file-read* file-write*" + paths(denied) + ")")
		for _, d := range denied {
			g.line("(deny network-outbound (remote unix-socket " + subpath(d) + "))")
		}
	}

	return seatbeltProfile{Text: g.b.String(), Params: g.defs}
}

// sbplGen accumulates profile text and parameter definitions.
type sbplGen struct {
	b    strings.Builder
	defs []seatbeltParam
}

func (g *sbplGen) line(s string) { g.b.WriteString(s + "\n") }

func (g *sbplGen) comment(s string) { g.b.WriteString("; " + s + "\n") }

// params defines one parameter per path and returns their names.
func (g *sbplGen) params(prefix string, values []string) []string {
	names := make([]string, 0, len(values))
	for i, v := range values {
		name := prefix + "_" + strconv.Itoa(i)
		g.defs = append(g.defs, seatbeltParam{Key: name, Value: v})
		names = append(names, name)
	}
	return names
}

// except is base minus every named path (the path itself and what is
// below it): (require-all BASE (require-not (literal P)) (require-not
// (subpath P)) …), or just BASE.
func (g *sbplGen) except(base string, names []string) string {
	if len(names) == 0 {
		return " " + base
	}
	var b strings.Builder
	b.WriteString(" (require-all " + base)
	for _, n := range names {
		b.WriteString(" (require-not " + literal(n) + ") (require-not " + subpath(n) + ")")
	}
	b.WriteString(")")
	return b.String()
}

func (g *sbplGen) globalNames(names []string) string {
	var b strings.Builder
	for _, n := range names {
		b.WriteString(" (global-name " + sbplString(n) + ")")
	}
	return b.String()
}

func (g *sbplGen) literals(paths []string) string {
	var b strings.Builder
	for _, p := range paths {
		b.WriteString(" (literal " + sbplString(p) + ")")
	}
	return b.String()
}

// paths is " (literal (param N)) (subpath (param N))" for every name.
func paths(names []string) string {
	var b strings.Builder
	for _, n := range names {
		b.WriteString(" " + literal(n) + " " + subpath(n))
	}
	return b.String()
}

func literal(name string) string { return "(literal " + param(name) + ")" }
func subpath(name string) string { return "(subpath " + param(name) + ")" }
func param(name string) string   { return "(param " + sbplString(name) + ")" }

// sbplString quotes s as an SBPL (Scheme) string literal: backslash and
// double quote are escaped, and control characters are written as \xHH
// escapes, so that s can neither end the string nor start a new form.
func sbplString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// seatbeltRefusal is the error for what macOS cannot enforce, naming what
// is missing, or nil: the cgroup limits (--memory, --pids) and --user have
// no Seatbelt counterpart, and everything else Seatbelt does needs
// sandbox-exec (haveSeatbelt).
func seatbeltRefusal(p Policy, haveSeatbelt bool) error {
	if p.Memory > 0 {
		return unavailable("--memory needs a memory cgroup; macOS has none, and its kernel does not enforce RLIMIT_AS")
	}
	if p.Pids > 0 {
		return unavailable("--pids needs a pids cgroup; macOS has none, and RLIMIT_NPROC would count every process of the user")
	}
	if p.User != "" {
		return unavailable("--user is not supported on macOS")
	}
	if p.Net != NetHost && p.Net != NetNone {
		// Any network policy Seatbelt was not taught (a proxy allowlist)
		// is refused, never run with the host's network.
		return unavailable("--net %s is not supported on macOS (host and none are)", p.Net)
	}
	if seatbeltNeeded(p) && !haveSeatbelt {
		return unavailable("--sandbox, --net none and --deny-read need %s (Seatbelt), which this machine lacks", SeatbeltExec)
	}
	return nil
}

// seatbeltNeeded reports whether p asks for anything only Seatbelt gives.
func seatbeltNeeded(p Policy) bool {
	return p.Mode != ModeNone || p.Net == NetNone || len(p.DenyRead) > 0
}

// buildSeatbelt makes the Prepared of a macOS run in the private directory
// base: the helper's spec carries the sandbox-exec invocation (when p
// needs Seatbelt) and the rlimits. It is portable so that its tests run
// everywhere; only macOS calls it.
func buildSeatbelt(p Policy, self, base string) (*Prepared, error) {
	report := map[string]any{"mode": p.Mode}
	// 0711 like on Linux: the status file beside tmp/ is the helper's.
	if err := os.Chmod(base, 0o711); err != nil {
		return nil, result.Errorf(result.CodeSandboxFailed, "chmod %s: %v", base, unwrap(err))
	}
	tmp := filepath.Join(base, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, result.Errorf(result.CodeSandboxFailed, "cannot create the sandbox's temp dir: %v", unwrap(err))
	}
	// Seatbelt matches real paths: $TMPDIR is below /var, a symlink to
	// /private/var.
	realTmp, err := filepath.EvalSymlinks(tmp)
	if err != nil {
		return nil, result.Errorf(result.CodeSandboxFailed, "cannot resolve the sandbox's temp dir: %v", unwrap(err))
	}
	status := filepath.Join(base, "status")
	sp := spec{Status: status, UID: -1, GID: -1}
	report["tmpdir"] = realTmp

	if seatbeltNeeded(p) {
		sb := seatbeltFor(p, realTmp, report)
		// Seatbelt's rules name paths: a file's other hard links are not
		// under them.
		for _, path := range sb.Protected {
			if err := soleName(path, "protected"); err != nil {
				return nil, err
			}
		}
		for _, path := range sb.DenyRead {
			if err := soleName(path, "hidden"); err != nil {
				return nil, err
			}
		}
		sp.Seatbelt = sb.profile().Args()
	} else {
		report["filesystem"] = "host"
		report["network"] = NetHost
	}
	sp.Rlimits = processRlimits(p, report)

	policy := p
	prep := &Prepared{
		Env:     []string{"TMPDIR=" + realTmp, "TMP=" + realTmp, "TEMP=" + realTmp},
		Report:  report,
		TempDir: realTmp,
		Classify: func(exitCode int, signal string) string {
			if e, _ := readHelperError(status); e != nil {
				return e.Code
			}
			return rlimitHit(policy, signalOf(exitCode, signal))
		},
		Failure: func() error { return readFailure(status) },
	}
	prep.useHelper(self, sp)
	return prep, nil
}

// seatbeltFor turns p into the Seatbelt policy and records it in report.
func seatbeltFor(p Policy, tmp string, report map[string]any) seatbeltPolicy {
	var sb seatbeltPolicy
	switch p.Mode {
	case ModeNone:
		sb.WriteAll = true
		sb.Writable = []string{tmp}
		report["filesystem"] = "host"
	default:
		roots := []string{}
		if p.Mode == ModeWorkspaceWrite {
			roots = append(roots, p.Workspace)
			roots = append(roots, p.AllowWrite...)
			report["workspace"] = p.Workspace
			report["allow_write"] = p.AllowWrite
		}
		sb.Protected = protectedUnder(roots)
		sb.Writable = append(roots, tmp)
		report["filesystem"] = "seatbelt"
		report["writable"] = sb.Writable
		if len(sb.Protected) > 0 {
			report["protected"] = sb.Protected
		}
	}
	// agentplane's own files stay read-only (the state directory, the
	// config file, the user's git configuration) in every Seatbelt run,
	// and what it hides (the secret key, the sessions) is denied like
	// --deny-read.
	for _, path := range p.Protect {
		sb.Protected = append(sb.Protected, resolveMissing(absPath(path)))
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		for _, f := range []string{".gitconfig", ".config/git"} {
			sb.Protected = append(sb.Protected, resolveMissing(filepath.Join(home, f)))
		}
	}
	if len(sb.Protected) > 0 {
		report["protected"] = sb.Protected
	}
	if len(p.DenyRead) > 0 {
		for _, d := range p.DenyRead {
			sb.DenyRead = append(sb.DenyRead, resolveMissing(d))
		}
		report["deny_read"] = sb.DenyRead
	}
	var hidden []string
	for _, path := range p.Hide {
		hidden = append(hidden, resolveMissing(absPath(path)))
	}
	if len(hidden) > 0 {
		sb.DenyRead = append(sb.DenyRead, hidden...)
		report["hidden"] = hidden
	}
	sb.NetNone = p.Net == NetNone
	if sb.NetNone {
		report["network"] = "seatbelt"
	} else {
		report["network"] = NetHost
	}
	return sb
}

// protectedUnder lists the paths inside the writable roots that stay
// read-only to the command: a repository's hooks and config, through which
// a write would run code, or change what git runs, outside the sandbox
// (also before they exist: Seatbelt denies creating them), and a .git that
// is a file (a worktree's), which names the repository git uses.
func protectedUnder(roots []string) []string {
	var out []string
	for _, r := range roots {
		dotgit := filepath.Join(r, ".git")
		if st, err := os.Lstat(dotgit); err == nil && !st.IsDir() {
			out = append(out, dotgit)
		}
		out = append(out, filepath.Join(dotgit, "hooks"), filepath.Join(dotgit, "config"))
	}
	return out
}

// absPath is path made absolute, or path itself if that fails.
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// resolveMissing returns path with symlinks resolved as far as it exists:
// a --deny-read path that does not exist yet is named by the real path it
// would have, since Seatbelt matches real paths (/tmp/x is /private/tmp/x).
func resolveMissing(path string) string {
	dir, rest := path, ""
	for {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return path
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}
