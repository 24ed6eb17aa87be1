package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/sandbox/confine"
)

// These tests run on every platform: they read the generated Seatbelt
// profile back with a small SBPL reader and check its structure. Whether
// macOS enforces the profile as read here is not tested on this machine
// (no macOS hardware); see the README's platform section.

// sx is one SBPL datum: an atom (a symbol or a number), a string, a regex
// (#"..."), or a list.
type sx struct {
	atom   string
	str    *string
	regex  *string
	list   []sx
	isList bool
}

func (x sx) head() string {
	if !x.isList || len(x.list) == 0 {
		return ""
	}
	return x.list[0].atom
}

func (x sx) String() string {
	switch {
	case x.str != nil:
		return fmt.Sprintf("%q", *x.str)
	case x.regex != nil:
		return "#" + fmt.Sprintf("%q", *x.regex)
	case x.isList:
		parts := make([]string, len(x.list))
		for i, e := range x.list {
			parts[i] = e.String()
		}
		return "(" + strings.Join(parts, " ") + ")"
	}
	return x.atom
}

// readSBPL parses a whole profile into its top-level forms. It accepts
// what the generator writes and fails on anything unbalanced.
func readSBPL(t *testing.T, text string) []sx {
	t.Helper()
	r := &sbplReader{s: text}
	var out []sx
	for {
		r.skip()
		if r.i >= len(r.s) {
			return out
		}
		x, err := r.read()
		if err != nil {
			t.Fatalf("profile does not parse at byte %d: %v\n%s", r.i, err, text)
		}
		out = append(out, x)
	}
}

type sbplReader struct {
	s string
	i int
}

func (r *sbplReader) skip() {
	for r.i < len(r.s) {
		switch c := r.s[r.i]; {
		case c == ';':
			for r.i < len(r.s) && r.s[r.i] != '\n' {
				r.i++
			}
		case c == ' ' || c == '\n' || c == '\t':
			r.i++
		default:
			return
		}
	}
}

func (r *sbplReader) read() (sx, error) {
	r.skip()
	if r.i >= len(r.s) {
		return sx{}, errors.New("unexpected end")
	}
	switch c := r.s[r.i]; {
	case c == '(':
		r.i++
		x := sx{isList: true}
		for {
			r.skip()
			if r.i >= len(r.s) {
				return sx{}, errors.New("unclosed list")
			}
			if r.s[r.i] == ')' {
				r.i++
				return x, nil
			}
			e, err := r.read()
			if err != nil {
				return sx{}, err
			}
			x.list = append(x.list, e)
		}
	case c == ')':
		return sx{}, errors.New("unexpected )")
	case c == '"':
		s, err := r.str()
		return sx{str: &s}, err
	case c == '#' && r.i+1 < len(r.s) && r.s[r.i+1] == '"':
		r.i++
		s, err := r.str()
		return sx{regex: &s}, err
	default:
		start := r.i
		for r.i < len(r.s) && !strings.ContainsRune(" \n\t()\";", rune(r.s[r.i])) {
			r.i++
		}
		return sx{atom: r.s[start:r.i]}, nil
	}
}

func (r *sbplReader) str() (string, error) {
	r.i++ // opening quote
	var b strings.Builder
	for r.i < len(r.s) {
		c := r.s[r.i]
		switch {
		case c == '"':
			r.i++
			return b.String(), nil
		case c == '\n':
			return "", errors.New("raw newline in a string")
		case c == '\\' && r.i+1 < len(r.s):
			n := r.s[r.i+1]
			switch n {
			case '"', '\\':
				b.WriteByte(n)
				r.i += 2
			case 'x':
				var v byte
				if _, err := fmt.Sscanf(r.s[r.i+2:r.i+4], "%02x", &v); err != nil {
					return "", err
				}
				b.WriteByte(v)
				r.i += 4
			default:
				return "", fmt.Errorf("unknown escape \\%c", n)
			}
		default:
			b.WriteByte(c)
			r.i++
		}
	}
	return "", errors.New("unclosed string")
}

// params returns the parameter names x refers to, in order.
func (x sx) params() []string {
	var out []string
	var walk func(sx)
	walk = func(e sx) {
		if e.head() == "param" && len(e.list) == 2 && e.list[1].str != nil {
			out = append(out, *e.list[1].str)
			return
		}
		for _, c := range e.list {
			walk(c)
		}
	}
	walk(x)
	return out
}

// excluded returns the parameter names x refers to only inside a
// require-not.
func (x sx) excluded() []string {
	var out []string
	var walk func(sx, bool)
	walk = func(e sx, not bool) {
		if e.head() == "param" && len(e.list) == 2 && e.list[1].str != nil {
			if not {
				out = append(out, *e.list[1].str)
			}
			return
		}
		for _, c := range e.list {
			walk(c, not || e.head() == "require-not")
		}
	}
	walk(x, false)
	return out
}

// ops are the operations a rule names: the atoms after allow/deny.
func (x sx) ops() []string {
	var out []string
	for _, e := range x.list[1:] {
		if e.isList || e.str != nil || e.regex != nil {
			break
		}
		out = append(out, e.atom)
	}
	return out
}

// filters are the filter forms of a rule, after its operations.
func (x sx) filters() []sx {
	return x.list[1+len(x.ops()):]
}

func hasOp(ops []string, prefix string) bool {
	for _, o := range ops {
		if strings.HasPrefix(o, prefix) {
			return true
		}
	}
	return false
}

func paramsByPrefix(ps []seatbeltParam, prefix string) map[string]string {
	out := map[string]string{}
	for _, p := range ps {
		if strings.HasPrefix(p.Key, prefix+"_") {
			out[p.Key] = p.Value
		}
	}
	return out
}

func TestSeatbeltStartsClosed(t *testing.T) {
	for _, sp := range []seatbeltPolicy{
		{Writable: []string{"/w"}},
		{WriteAll: true, NetNone: true},
		{Writable: []string{"/w"}, DenyRead: []string{"/s"}, NetNone: true},
	} {
		forms := readSBPL(t, sp.profile().Text)
		if len(forms) < 2 || forms[0].String() != "(version 1)" || forms[1].String() != "(deny default)" {
			t.Fatalf("profile does not start with (version 1) (deny default): %v", forms[:2])
		}
		for _, f := range forms {
			if h := f.head(); h != "version" && h != "allow" && h != "deny" {
				t.Errorf("unexpected top-level form %v", f)
			}
			if f.head() == "allow" && len(f.filters()) == 0 && !slices.Contains(unconditional, strings.Join(f.ops(), " ")) {
				t.Errorf("unconditional allow %v", f)
			}
		}
	}
}

// unconditional are the only operations allowed without a filter.
var unconditional = []string{
	"process-exec", "process-fork", "sysctl-read", "mach-host*", "user-preference-read",
	"ipc-posix-sem", "pseudo-tty", "network*", "system-socket",
}

// TestSeatbeltWritableRootsOnlyInWriteRules: the writable roots appear in
// write rules (and, under --net none, Unix-socket rules) and nowhere else;
// every write rule is limited to a writable root or a harmless device.
func TestSeatbeltWritableRootsOnlyInWriteRules(t *testing.T) {
	for _, netNone := range []bool{false, true} {
		sp := seatbeltPolicy{
			Writable:  []string{"/Users/me/proj", "/Users/me/cache", "/private/var/folders/x/T/agentplane-sandbox-1/tmp"},
			Protected: protectedUnder([]string{"/Users/me/proj", "/Users/me/cache"}),
			NetNone:   netNone,
		}
		prof := sp.profile()
		roots := paramsByPrefix(prof.Params, paramWritable)
		if len(roots) != 3 {
			t.Fatalf("writable parameters %v, want 3", roots)
		}
		for k, v := range roots {
			if !slices.Contains(sp.Writable, v) {
				t.Errorf("parameter %s=%s is not a writable root", k, v)
			}
		}
		protected := paramsByPrefix(prof.Params, paramProtected)
		if len(protected) != 4 {
			t.Fatalf("protected parameters %v, want 4", protected)
		}
		seenWrite := map[string]bool{}
		for _, f := range readSBPL(t, prof.Text) {
			ops := f.ops()
			refs := f.params()
			for _, r := range refs {
				if _, ok := roots[r]; !ok {
					continue
				}
				socket := strings.Contains(f.String(), "unix-socket")
				switch {
				case f.head() == "allow" && reflect.DeepEqual(ops, []string{"file-write*"}):
					seenWrite[r] = true
				case f.head() == "allow" && socket && netNone:
				default:
					t.Errorf("writable root %s in a rule that is not a write rule: %v", r, f)
				}
			}
			if f.head() == "allow" && hasOp(ops, "file-write") {
				for _, flt := range f.filters() {
					s := flt.String()
					devices := !strings.Contains(s, "param") && strings.HasPrefix(s, `(literal "/dev/`)
					tty := strings.Contains(s, "/dev/ptmx") || strings.Contains(s, "/dev/ttys") || s == `(regex #"^/dev/fd/[0-9]+$")`
					if !devices && !tty && !strings.Contains(s, `(subpath (param "WRITABLE_ROOT_`) {
						t.Errorf("write rule not limited to a writable root: %v", f)
					}
				}
				if reflect.DeepEqual(ops, []string{"file-write*"}) {
					// Every protected path is cut out of every root.
					ex := f.excluded()
					for k := range protected {
						if !slices.Contains(ex, k) {
							t.Errorf("write rule %v does not exclude %s", f, k)
						}
					}
				}
			}
		}
		for k := range roots {
			if !seenWrite[k] {
				t.Errorf("writable root %s has no write rule", k)
			}
		}
	}
}

// TestSeatbeltProtectedPathsDenied: .git/hooks and .git/config of a
// workspace end in a write denial placed after every allow.
func TestSeatbeltProtectedPathsDenied(t *testing.T) {
	sp := seatbeltPolicy{Writable: []string{"/w"}, Protected: protectedUnder([]string{"/w"})}
	prof := sp.profile()
	if got := paramsByPrefix(prof.Params, paramProtected); !reflect.DeepEqual(got, map[string]string{
		"PROTECTED_0": "/w/.git/hooks", "PROTECTED_1": "/w/.git/config"}) {
		t.Fatalf("protected parameters %v", got)
	}
	forms := readSBPL(t, prof.Text)
	denied, lastAllow := -1, -1
	for i, f := range forms {
		if f.head() == "allow" && hasOp(f.ops(), "file-write") {
			lastAllow = i
		}
		if f.head() == "deny" && reflect.DeepEqual(f.ops(), []string{"file-write*"}) {
			if got := f.params(); reflect.DeepEqual(got, []string{"PROTECTED_0", "PROTECTED_0", "PROTECTED_1", "PROTECTED_1"}) {
				denied = i
			}
		}
	}
	if denied < 0 || denied < lastAllow {
		t.Fatalf("no write denial of the protected paths after the write allows (deny at %d, last allow at %d):\n%s", denied, lastAllow, prof.Text)
	}
}

// TestSeatbeltDenyRead: a --deny-read path is cut out of the read rule and
// of every write rule, and denied for reading and writing after them.
func TestSeatbeltDenyRead(t *testing.T) {
	for _, sp := range []seatbeltPolicy{
		{Writable: []string{"/Users/me/proj"}, DenyRead: []string{"/Users/me/.ssh", "/Users/me/proj/.env"}},
		{WriteAll: true, Writable: []string{"/t"}, DenyRead: []string{"/Users/me/.ssh", "/Users/me/proj/.env"}},
	} {
		prof := sp.profile()
		deny := paramsByPrefix(prof.Params, paramDenyRead)
		if len(deny) != 2 {
			t.Fatalf("deny-read parameters %v", deny)
		}
		forms := readSBPL(t, prof.Text)
		lastAllow, denyAt := -1, -1
		readAllows := 0
		for i, f := range forms {
			ops := f.ops()
			if f.head() == "allow" {
				lastAllow = i
				// An allow may name a denied path only to exclude it.
				ex := f.excluded()
				for _, r := range f.params() {
					if _, ok := deny[r]; ok && !slices.Contains(ex, r) {
						t.Errorf("allow names the denied path %s outside a require-not: %v", r, f)
					}
				}
				if hasOp(ops, "file-read") || hasOp(ops, "file-write") && reflect.DeepEqual(ops, []string{"file-write*"}) {
					if hasOp(ops, "file-read") && strings.Contains(f.String(), `(subpath "/")`) {
						readAllows++
					}
					if strings.Contains(f.String(), `(subpath "/")`) || strings.Contains(f.String(), "WRITABLE_ROOT") {
						for k := range deny {
							if !slices.Contains(ex, k) {
								t.Errorf("%v does not exclude %s", f, k)
							}
						}
					}
				}
			}
			if f.head() == "deny" && reflect.DeepEqual(ops, []string{"file-read*", "file-write*"}) {
				got := f.params()
				for k := range deny {
					if !slices.Contains(got, k) {
						t.Errorf("deny rule %v lacks %s", f, k)
					}
				}
				denyAt = i
			}
		}
		if readAllows != 1 {
			t.Errorf("%d read rules over the whole filesystem, want 1", readAllows)
		}
		if denyAt < 0 || denyAt < lastAllow {
			t.Errorf("deny-read rule at %d, last allow at %d: the denial must come last", denyAt, lastAllow)
		}
	}
}

// TestSeatbeltNetNone: under --net none the only network rules are
// loopback IP and Unix sockets under the writable roots; no rule allows
// outbound traffic in general, and the network's Mach services are not
// reachable.
func TestSeatbeltNetNone(t *testing.T) {
	for _, sp := range []seatbeltPolicy{
		{Writable: []string{"/w", "/t"}, NetNone: true},
		{WriteAll: true, Writable: []string{"/t"}, NetNone: true},
	} {
		prof := sp.profile()
		if strings.Contains(prof.Text, "com.apple.SystemConfiguration") || strings.Contains(prof.Text, "com.apple.networkd") {
			t.Errorf("--net none reaches the network's Mach services:\n%s", prof.Text)
		}
		outbound := 0
		for _, f := range readSBPL(t, prof.Text) {
			ops := f.ops()
			if f.head() != "allow" || !hasOp(ops, "network") && !hasOp(ops, "system-socket") {
				continue
			}
			if len(ops) != 1 || ops[0] == "network*" || ops[0] == "system-socket" {
				t.Errorf("--net none allows %v", f)
				continue
			}
			s := f.String()
			loopback := s == `(allow network-outbound (remote ip "localhost:*"))` ||
				s == `(allow network-inbound (local ip "localhost:*"))` ||
				s == `(allow network-bind (local ip "localhost:*"))`
			socket := strings.HasPrefix(s, `(allow network-outbound (remote unix-socket (subpath (param "WRITABLE_ROOT_`) ||
				strings.HasPrefix(s, `(allow network-bind (local unix-socket (subpath (param "WRITABLE_ROOT_`)
			if !loopback && !socket {
				t.Errorf("--net none allows %v", f)
			}
			if ops[0] == "network-outbound" {
				outbound++
			}
		}
		if outbound != 1+len(sp.Writable) {
			t.Errorf("%d outbound rules, want loopback and one per writable root", outbound)
		}
	}
	host := seatbeltPolicy{Writable: []string{"/w"}}.profile().Text
	if !strings.Contains(host, "\n(allow network*)\n") {
		t.Errorf("--net host profile does not allow the network:\n%s", host)
	}
}

// TestSeatbeltHostilePaths: whatever a path holds, it reaches sandbox-exec
// only as a -D value, byte for byte; the profile text does not depend on
// the paths at all, so no path can add a rule.
func TestSeatbeltHostilePaths(t *testing.T) {
	hostile := []string{
		`/Users/me/a"b`,
		`/Users/me/x")) (allow file-write* (subpath "/")) ; `,
		"/Users/me/new\nline",
		`/Users/me/back\slash`,
		"/Users/me/=equals=",
		"/Users/me/ünïcode and spaces",
	}
	benign := make([]string, len(hostile))
	for i := range benign {
		benign[i] = fmt.Sprintf("/b%d", i)
	}
	mk := func(paths []string) seatbeltPolicy {
		return seatbeltPolicy{Writable: paths[:2], Protected: paths[2:4], DenyRead: paths[4:], NetNone: true}
	}
	bad, good := mk(hostile).profile(), mk(benign).profile()
	if bad.Text != good.Text {
		t.Fatalf("the profile text depends on the paths:\n%s", bad.Text)
	}
	for _, h := range hostile {
		if strings.Contains(bad.Text, h) {
			t.Errorf("path %q appears in the profile text", h)
		}
	}
	args := bad.Args()
	if args[0] != SeatbeltExec || args[1] != "-p" || args[2] != bad.Text || args[len(args)-1] != "--" {
		t.Fatalf("argv shape: %q", args)
	}
	defs := args[3 : len(args)-1]
	if len(defs) != 2*len(hostile) {
		t.Fatalf("%d definition arguments, want %d: %q", len(defs), 2*len(hostile), defs)
	}
	var got []string
	for i := 0; i < len(defs); i += 2 {
		if defs[i] != "-D" {
			t.Fatalf("argument %q, want -D", defs[i])
		}
		k, v, ok := strings.Cut(defs[i+1], "=")
		if !ok || strings.Trim(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789") != "" {
			t.Fatalf("definition %q: key is not [A-Z0-9_]+", defs[i+1])
		}
		got = append(got, v)
	}
	if !reflect.DeepEqual(got, hostile) {
		t.Fatalf("values %q, want %q", got, hostile)
	}
}

func TestSbplString(t *testing.T) {
	for _, s := range []string{"plain", `a"b`, `back\slash`, "new\nline", "tab\t", "\x7f", `"); (allow default) ("`, "ü"} {
		q := sbplString(s)
		forms := readSBPL(t, "(x "+q+")")
		if len(forms) != 1 || len(forms[0].list) != 2 || forms[0].list[1].str == nil || *forms[0].list[1].str != s {
			t.Errorf("sbplString(%q) = %s does not read back as one string", s, q)
		}
	}
}

// TestSeatbeltFor: how a Policy becomes a Seatbelt policy.
func TestSeatbeltFor(t *testing.T) {
	ws := t.TempDir()
	aw := t.TempDir()
	home := t.TempDir()
	t.Setenv("HOME", home)
	state := t.TempDir()
	if err := os.WriteFile(filepath.Join(aw, ".git"), []byte("gitdir: /elsewhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	report := map[string]any{}
	sb := seatbeltFor(Policy{Mode: ModeWorkspaceWrite, Workspace: ws, AllowWrite: []string{aw}, Net: NetNone,
		DenyRead: []string{filepath.Join(ws, "secret")},
		Protect:  []string{state}, Hide: []string{filepath.Join(state, "secret.key"), filepath.Join(state, "sessions")}}, "/t", report)
	if sb.WriteAll || !reflect.DeepEqual(sb.Writable, []string{ws, aw, "/t"}) || !sb.NetNone {
		t.Fatalf("workspace-write: %+v", sb)
	}
	wantProtected := []string{ws + "/.git/hooks", ws + "/.git/config", aw + "/.git", aw + "/.git/hooks", aw + "/.git/config",
		state, home + "/.gitconfig", home + "/.config/git"}
	if !reflect.DeepEqual(sb.Protected, wantProtected) {
		t.Fatalf("protected %v\nwant %v", sb.Protected, wantProtected)
	}
	if want := []string{ws + "/secret", state + "/secret.key", state + "/sessions"}; !reflect.DeepEqual(sb.DenyRead, want) {
		t.Fatalf("denied %v, want %v", sb.DenyRead, want)
	}
	if report["filesystem"] != "seatbelt" || report["network"] != "seatbelt" || report["hidden"] == nil {
		t.Fatalf("report %v", report)
	}
	// The sessions' sockets are out of reach as sockets too.
	text := sb.profile().Text
	if !strings.Contains(text, `(deny network-outbound (remote unix-socket (subpath (param "DENY_READ_2"))))`) {
		t.Fatalf("no socket denial for the sessions:\n%s", text)
	}

	sb = seatbeltFor(Policy{Mode: ModeReadOnly, Net: NetHost}, "/t", map[string]any{})
	if sb.WriteAll || !reflect.DeepEqual(sb.Writable, []string{"/t"}) || sb.NetNone || len(sb.Protected) != 2 {
		t.Fatalf("read-only: %+v", sb)
	}

	sb = seatbeltFor(Policy{Mode: ModeNone, Net: NetNone}, "/t", map[string]any{})
	if !sb.WriteAll || !sb.NetNone {
		t.Fatalf("--net none alone: %+v", sb)
	}
}

// TestResolveMissing: a --deny-read path that does not exist yet is named
// by the real path of its nearest existing ancestor, as Seatbelt will see
// it once it is created.
func TestResolveMissing(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	realResolved, _ := filepath.EvalSymlinks(real)
	if got := resolveMissing(filepath.Join(link, "not", "yet")); got != filepath.Join(realResolved, "not", "yet") {
		t.Fatalf("got %s", got)
	}
	if got := resolveMissing(link); got != realResolved {
		t.Fatalf("existing: got %s", got)
	}
}

// TestSeatbeltRefusal: what macOS cannot enforce is refused with
// sandbox_unavailable, and nothing that needs Seatbelt runs without it.
func TestSeatbeltRefusal(t *testing.T) {
	cases := []struct {
		name     string
		p        Policy
		seatbelt bool
		refused  bool
	}{
		{"memory", Policy{Mode: ModeNone, Net: NetHost, Memory: 1 << 20}, true, true},
		{"pids", Policy{Mode: ModeNone, Net: NetHost, Pids: 10}, true, true},
		{"user", Policy{Mode: ModeNone, Net: NetHost, User: "nobody"}, true, true},
		{"net proxy: no network namespaces", Policy{Mode: ModeNone, Net: NetProxy, AllowHosts: []string{"github.com"}}, true, true},
		{"read-only without sandbox-exec", Policy{Mode: ModeReadOnly, Net: NetHost}, false, true},
		{"net none without sandbox-exec", Policy{Mode: ModeNone, Net: NetNone}, false, true},
		{"deny-read without sandbox-exec", Policy{Mode: ModeNone, Net: NetHost, DenyRead: []string{"/x"}}, false, true},
		{"a network policy Seatbelt does not know", Policy{Mode: ModeNone, Net: "proxy"}, true, true},
		{"workspace-write", Policy{Mode: ModeWorkspaceWrite, Net: NetNone, Workspace: "/w"}, true, false},
		{"rlimits alone need no Seatbelt", Policy{Mode: ModeNone, Net: NetHost, CPUTime: 1e9, FileSize: 1, Nofile: 8}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := seatbeltRefusal(tc.p, tc.seatbelt)
			if !tc.refused {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var re *result.Error
			if !errors.As(err, &re) || re.Code != result.CodeSandboxUnavailable {
				t.Fatalf("got %v, want %s", err, result.CodeSandboxUnavailable)
			}
		})
	}
}

// TestBuildSeatbelt: the macOS Prepared, built here: the helper's spec
// carries sandbox-exec's invocation with the generated profile and the
// paths as parameters, the rlimits, and the status file; the private
// TMPDIR is the temp dir the profile makes writable.
func TestBuildSeatbelt(t *testing.T) {
	ws := t.TempDir()
	base := t.TempDir()
	p := Policy{Mode: ModeWorkspaceWrite, Workspace: ws, Net: NetNone, CPUTime: 2 * time.Second, FileSize: 1000, Nofile: 64}
	prep, err := buildSeatbelt(p, "/opt/bin/agentsh", base)
	if err != nil {
		t.Fatal(err)
	}
	argv := prep.Argv([]string{"make", "test"})
	if len(argv) != 6 || argv[0] != "/opt/bin/agentsh" || argv[1] != HelperCommand || argv[2] != "3" || argv[3] != "--" || argv[4] != "make" || argv[5] != "test" {
		t.Fatalf("argv %q", argv)
	}
	sp := launchedSpec(t, prep)
	if !strings.HasPrefix(sp.Status, base+"/") || len(sp.Rlimits) != 3 || sp.UID != -1 {
		t.Fatalf("spec %+v", sp)
	}
	sb := sp.Seatbelt
	if len(sb) < 4 || sb[0] != SeatbeltExec || sb[1] != "-p" || sb[len(sb)-1] != "--" {
		t.Fatalf("sandbox-exec invocation %q", sb)
	}
	readSBPL(t, sb[2])
	defs := strings.Join(sb[3:], "\n")
	for _, want := range []string{"WRITABLE_ROOT_0=" + ws, "WRITABLE_ROOT_1=" + prep.TempDir, "PROTECTED_0=" + ws + "/.git/hooks"} {
		if !strings.Contains(defs, "-D\n"+want+"\n") {
			t.Errorf("no -D %s in %q", want, sb[3:])
		}
	}
	if st, err := os.Stat(prep.TempDir); err != nil || !st.IsDir() || !strings.HasPrefix(prep.TempDir, base+"/") {
		t.Fatalf("temp dir %s: %v", prep.TempDir, err)
	}
	if !slices.Contains(prep.Env, "TMPDIR="+prep.TempDir) {
		t.Fatalf("env %q", prep.Env)
	}
	r := prep.Report
	if r["filesystem"] != "seatbelt" || r["network"] != "seatbelt" || r["cpu_time_ms"] != int64(2000) || r["file_size"] != int64(1000) || r["nofile"] != 64 {
		t.Fatalf("report %v", r)
	}
	if prep.SysProcAttr != nil {
		t.Fatal("macOS needs no namespaces")
	}

	// Classify names the rlimit a signal reports, and the helper's error
	// first.
	if c := prep.Classify(128+int(unix.SIGXFSZ), ""); c != result.CodeFileSizeLimit {
		t.Fatalf("SIGXFSZ classified %q", c)
	}
	if c := prep.Classify(0, "SIGXCPU"); c != result.CodeCPULimit {
		t.Fatalf("SIGXCPU classified %q", c)
	}
	if c := prep.Classify(1, ""); c != "" {
		t.Fatalf("exit 1 classified %q", c)
	}
	if err := prep.Failure(); err != nil {
		t.Fatalf("failure before the helper ran: %v", err)
	}
	if err := os.WriteFile(sp.Status, []byte(`{"code":"command_not_found","message":"command not found: make"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var re *result.Error
	if err := prep.Failure(); !errors.As(err, &re) || re.Code != result.CodeCommandNotFound {
		t.Fatalf("failure %v", err)
	}

	// Limits alone need no Seatbelt: the helper execs the command itself.
	prep, err = buildSeatbelt(Policy{Mode: ModeNone, Net: NetHost, CPUTime: time.Second}, "/opt/bin/agentsh", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sp = launchedSpec(t, prep)
	if len(sp.Seatbelt) != 0 || len(sp.Rlimits) != 1 || prep.Report["filesystem"] != "host" {
		t.Fatalf("limits alone: spec %+v report %v", sp, prep.Report)
	}
}

// launchedSpec is the spec Launch hands the helper, on the pipe that is
// its first file.
func launchedSpec(t *testing.T, prep *Prepared) spec {
	t.Helper()
	files, started, err := prep.Launch()
	if err != nil {
		t.Fatal(err)
	}
	defer started()
	if len(files) == 0 {
		t.Fatal("Launch returned no spec pipe")
	}
	data, err := io.ReadAll(files[0])
	if err != nil {
		t.Fatal(err)
	}
	sp, err := confine.ParseSpec(data)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}
