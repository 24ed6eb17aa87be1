package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentplane/agentplane/pkg/result"
)

// Settings are the sandbox settings a call asks for, as its flags or
// request keys give them (before paths are made absolute), or the values
// the operator configured for them.
type Settings struct {
	Mode string // ModeNone, ModeReadOnly or ModeWorkspaceWrite
	Net  string // NetHost, NetNone or NetProxy
	// Workspace is the writable root in workspace-write, absolute; a
	// call's is "" when it names none (Floor.Check then gives it the
	// floor's).
	Workspace  string
	AllowWrite []string
	AllowHost  []string
	DenyRead   []string
	Memory     int64 // 0: no limit
	CPUTime    time.Duration
	Pids       int64
	FileSize   int64
	Nofile     int64
	User       string // "": the caller's own
	// UserCaches makes the user's own toolchain caches writable.
	UserCaches bool
}

// The settings a Floor can hold, by the name of the flag (and request key)
// that gives them.
const (
	FloorSandbox    = "sandbox"
	FloorWorkspace  = "workspace"
	FloorNet        = "net"
	FloorMemory     = "memory"
	FloorCPUTime    = "cpu-time"
	FloorPids       = "pids"
	FloorFileSize   = "file-size"
	FloorNofile     = "nofile"
	FloorAllowWrite = "allow-write"
	FloorAllowHost  = "allow-host"
	FloorDenyRead   = "deny-read"
	FloorUser       = "user"
	FloorUserCaches = "user-caches"
)

// FloorSettings lists every setting a Floor has a rule for.
func FloorSettings() []string {
	return []string{FloorSandbox, FloorWorkspace, FloorNet, FloorMemory, FloorCPUTime, FloorPids, FloorFileSize,
		FloorNofile, FloorAllowWrite, FloorAllowHost, FloorDenyRead, FloorUser, FloorUserCaches}
}

// A Floor is the operator's configured sandbox under sandbox_lock: a call
// may tighten it but never loosen it. Only the settings named in Held
// (the ones the operator configured) are held; the others are free.
type Floor struct {
	Settings
	Held []string
}

// Check returns a sandbox_locked error naming the first held setting that
// call loosens, or nil. A held name without a rule is an internal error,
// so that a setting marked as a floor can never be silently free.
//
// A held filesystem sandbox also holds what would open it up from the
// inside, configured or not: the writable paths (none beyond the
// configured ones), the user's own caches (not writable unless
// configured) and, in workspace-write, the workspace (the configured
// one, else Workspace as the caller sets it: the host's working
// directory; a call may name one inside it). A held proxy holds its
// allowlist the same way. Otherwise `--allow-write /etc`,
// `--user-caches` or `--workspace /` would loosen a locked sandbox by
// adding to what the operator left empty.
func (f Floor) Check(call Settings) error {
	for _, name := range f.held() {
		if err := f.loosened(name, call); err != nil {
			return err
		}
	}
	return nil
}

// held is Held with the settings a held sandbox or proxy implies.
func (f Floor) held() []string {
	held := append([]string(nil), f.Held...)
	add := func(name string) {
		for _, h := range held {
			if h == name {
				return
			}
		}
		held = append(held, name)
	}
	for _, h := range f.Held {
		switch {
		case h == FloorSandbox && modeRank[f.Mode] > 0:
			add(FloorAllowWrite)
			add(FloorUserCaches)
			if f.Mode == ModeWorkspaceWrite && f.Workspace != "" {
				add(FloorWorkspace)
			}
		case h == FloorNet && f.Net == NetProxy:
			add(FloorAllowHost)
		}
	}
	return held
}

// HoldsFiles reports whether the floor confines what the command may read
// or write: a held filesystem sandbox, or held hidden paths.
func (f Floor) HoldsFiles() bool {
	for _, h := range f.Held {
		if (h == FloorSandbox && modeRank[f.Mode] > 0) || (h == FloorDenyRead && len(f.DenyRead) > 0) {
			return true
		}
	}
	return false
}

// WriteRoots returns the directories a held filesystem sandbox lets the
// command write (in workspace-write the workspace and the allow-write
// directories, in read-only none), and whether the floor holds the
// filesystem at all. A program that changes files itself on a call's
// behalf, outside any sandbox (agentfs), holds itself to them.
func (f Floor) WriteRoots() ([]string, bool) {
	for _, h := range f.Held {
		if h != FloorSandbox || modeRank[f.Mode] == 0 {
			continue
		}
		roots := []string{}
		if f.Mode == ModeWorkspaceWrite {
			if f.Workspace != "" {
				roots = append(roots, f.Workspace)
			}
			roots = append(roots, f.AllowWrite...)
		}
		return roots, true
	}
	return nil, false
}

// Within reports whether path is root or below it, both with their
// symbolic links resolved as far as they exist (the floor's own rule for
// writable paths).
func Within(path, root string) bool { return within(path, root) }

// modeRank orders the filesystem modes from loosest to strictest.
var modeRank = map[string]int{ModeNone: 0, "": 0, ModeWorkspaceWrite: 1, ModeReadOnly: 2}

func (f Floor) loosened(name string, call Settings) error {
	switch name {
	case FloorSandbox:
		if modeRank[call.Mode] < modeRank[f.Mode] {
			return locked(name, f.Mode, call.Mode)
		}
	case FloorWorkspace:
		if call.Workspace != "" && !within(call.Workspace, f.Workspace) {
			return locked(name, f.Workspace, call.Workspace)
		}
	case FloorNet:
		switch {
		case f.Net == NetNone && call.Net != NetNone:
			return locked(name, NetNone, call.Net)
		case f.Net == NetProxy && (call.Net == NetHost || call.Net == "") && len(call.AllowHost) == 0:
			return locked(name, NetProxy, NetHost)
		}
	case FloorMemory:
		return limit(name, f.Memory, call.Memory, strconv.FormatInt(f.Memory, 10)+" bytes")
	case FloorCPUTime:
		return limit(name, int64(f.CPUTime), int64(call.CPUTime), f.CPUTime.String())
	case FloorPids:
		return limit(name, f.Pids, call.Pids, strconv.FormatInt(f.Pids, 10))
	case FloorFileSize:
		return limit(name, f.FileSize, call.FileSize, strconv.FormatInt(f.FileSize, 10)+" bytes")
	case FloorNofile:
		return limit(name, f.Nofile, call.Nofile, strconv.FormatInt(f.Nofile, 10))
	case FloorAllowWrite:
		// A writable path inside one the floor already makes writable
		// (its workspace included) adds nothing.
		roots := append([]string(nil), f.AllowWrite...)
		if f.Mode == ModeWorkspaceWrite && f.Workspace != "" {
			roots = append(roots, f.Workspace)
		}
		for _, w := range call.AllowWrite {
			ok := false
			for _, r := range roots {
				if w == r || within(abs(w), abs(r)) {
					ok = true
					break
				}
			}
			if !ok {
				return locked(name, orNone(roots), w)
			}
		}
	case FloorAllowHost:
		return subset(name, f.AllowHost, call.AllowHost)
	case FloorDenyRead:
		// Compared as the sandbox hides them: resolved (a call's policy
		// is checked again once Prepare resolved its paths).
		have := map[string]bool{}
		for _, d := range call.DenyRead {
			have[resolved(d)] = true
		}
		for _, d := range f.DenyRead {
			if !have[resolved(d)] {
				return locked(name, d, "without it")
			}
		}
	case FloorUser:
		// Another user is not comparable with the configured one (nor
		// root, the caller's own, with nobody): only that user holds.
		if f.User != "" && call.User != f.User {
			return locked(name, f.User, orCaller(call.User))
		}
	case FloorUserCaches:
		if call.UserCaches && !f.UserCaches {
			return locked(name, "false", "true")
		}
	default:
		return result.Errorf(result.CodeInternal, "--%s is held as a sandbox floor but has no floor rule", name)
	}
	return nil
}

func orNone(paths []string) string {
	if len(paths) == 0 {
		return "none"
	}
	return strings.Join(paths, ",")
}

func orCaller(user string) string {
	if user == "" {
		return "the caller's own"
	}
	return user
}

// limit: a configured limit of 0 holds nothing; a call's 0 is no limit,
// the loosest of all.
func limit(name string, floor, got int64, shown string) error {
	if floor > 0 && (got == 0 || got > floor) {
		return locked(name, shown, "a looser value")
	}
	return nil
}

// within reports whether path is root or below it, both absolute and
// with their symbolic links resolved as far as they exist (a workspace
// named through a link inside the floor's would open where the link
// points).
func within(path, root string) bool {
	path, root = resolved(path), resolved(root)
	return path == root || root == "/" || strings.HasPrefix(path, root+"/")
}

func abs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

func resolved(p string) string {
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	// A path that does not exist yet: its nearest existing parent, resolved.
	if dir := filepath.Dir(p); dir != p {
		return filepath.Join(resolved(dir), filepath.Base(p))
	}
	return p
}

// subset: an allowlist may only shrink; every entry of the call's must be
// one of the floor's.
func subset(name string, floor, got []string) error {
	allowed := map[string]bool{}
	for _, a := range floor {
		allowed[a] = true
	}
	for _, a := range got {
		if !allowed[a] {
			return locked(name, strings.Join(floor, ","), a)
		}
	}
	return nil
}

func locked(flag, floor, got string) error {
	return result.Errorf(result.CodeSandboxLocked, "the configured sandbox is locked: --%s may not be loosened from %s to %s", flag, floor, got).
		With("hint", "the operator's config sets sandbox_lock; only stricter values are accepted")
}

// ResolveRoots resolves the symbolic links of writable roots, as
// filepath.EvalSymlinks does, but refuses (sandbox_locked) a root whose path
// goes through a link lying inside another of them: a command sandboxed
// with those roots could have made that link (renamed the directory
// holding an allow-write root aside, put a link to anywhere in its place),
// so that the root, resolved again for the next call, would be wherever
// the link points (the user's home). A link outside every writable root is
// the system's or the operator's, and is followed. The resolved paths hold
// no link, so that opening them without following one (the helper's and
// agentfs's opens) reaches what this walk checked, or fails.
func ResolveRoots(roots []string) ([]string, error) {
	others := make([]string, len(roots))
	for i, r := range roots {
		others[i] = resolved(abs(r))
	}
	out := make([]string, len(roots))
	for i, r := range roots {
		real, link, err := resolveRoot(abs(r), func(dir string) bool {
			for j, o := range others {
				// A root of / (everything writable) protects nothing a
				// link could redirect, and would count every link.
				if j != i && o != "/" && (dir == o || strings.HasPrefix(dir, o+"/")) {
					return true
				}
			}
			return false
		})
		if link != "" {
			return nil, result.Errorf(result.CodeSandboxLocked, "the configured sandbox is locked: the writable root %s goes through the symbolic link %s, inside another writable root, where a command could have put it", r, link).
				With("hint", "replace the link with the directory the operator configured, or configure the directory it should reach")
		}
		if err != nil {
			return nil, err
		}
		out[i] = real
	}
	return out, nil
}

// resolveRoot walks path from / resolving links, and stops at the first
// link whose directory planted reports, returning it. A missing component
// ends the walk: the rest is kept as it is.
func resolveRoot(path string, planted func(dir string) bool) (real, link string, err error) {
	real, err = walkPath(filepath.Clean(path), func(dir, at string) bool {
		if planted(dir) {
			link = at
			return true
		}
		return false
	})
	if link != "" {
		return "", link, nil
	}
	return real, "", err
}

// walkPath resolves path (absolute) from / one component at a time, as the
// kernel does, and calls onLink with each symbolic link it meets (the
// directory the link lies in, and the link's path) before it follows it;
// onLink returning true ends the walk there. It returns the path resolved:
// from a missing component on, the rest as it is.
func walkPath(path string, onLink func(dir, at string) (stop bool)) (string, error) {
	pending := strings.Split(path, string(filepath.Separator))
	cur := "/"
	for n := 0; len(pending) > 0; {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return filepath.Join(append([]string{next}, pending...)...), nil
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if onLink(cur, next) {
			return "", nil
		}
		if n++; n > 40 {
			return "", &os.PathError{Op: "resolve", Path: path, Err: errTooManyLinks}
		}
		dest, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(dest) {
			cur = "/"
		}
		pending = append(strings.Split(dest, string(filepath.Separator)), pending...)
	}
	return cur, nil
}

var errTooManyLinks = errors.New("too many levels of symbolic links")
