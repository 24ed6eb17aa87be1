package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Class: a planted temp area. The caller's area has a name anyone can
// work out (agentplane-sandbox.UID in a shared temp dir), so another user
// can put something there first. Nothing planted may deny the sandbox to
// the caller, be used as the caller's area, be followed, or be removed or
// changed.

// attacker is the uid that plants (nobody); the caller is the test's uid.
const attacker = 65534

// stickyTmp makes a directory like /tmp (1777, reachable by every user).
func stickyTmp(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "agentplane-plant-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	must(t, os.Chmod(d, 0o1777))
	// (MkdirTemp's parent is the temp dir of the test, whatever it is.)
	real, err := filepath.EvalSymlinks(d)
	must(t, err)
	return real
}

// useSystemTmp points the package's /tmp at dir for the test.
func useSystemTmp(t *testing.T, dir string) {
	t.Helper()
	old := systemTmp
	systemTmp = dir
	t.Cleanup(func() { systemTmp = old })
}

type planting struct {
	name string
	root bool // needs root (a file of another uid)
	// plant puts something at path, elsewhere being a directory of the
	// attacker's it may point at.
	plant func(t *testing.T, path, elsewhere string)
}

func chownAttacker(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() == 0 {
		must(t, os.Lchown(path, attacker, attacker))
	}
}

var plantings = []planting{
	{"directory of another uid", true, func(t *testing.T, path, _ string) {
		must(t, os.Mkdir(path, 0o711))
		chownAttacker(t, path)
	}},
	{"directory of another uid, mode 0777", true, func(t *testing.T, path, _ string) {
		must(t, os.Mkdir(path, 0o777))
		must(t, os.Chmod(path, 0o777))
		chownAttacker(t, path)
	}},
	{"symlink to a directory of another uid", false, func(t *testing.T, path, elsewhere string) {
		must(t, os.Symlink(elsewhere, path))
		chownAttacker(t, path)
	}},
	{"symlink to a directory of the caller", false, func(t *testing.T, path, _ string) {
		mine := filepath.Join(t.TempDir(), "mine")
		must(t, os.Mkdir(mine, 0o711))
		must(t, os.Chmod(mine, 0o711))
		must(t, os.Symlink(mine, path))
		chownAttacker(t, path)
	}},
	{"dangling symlink", false, func(t *testing.T, path, elsewhere string) {
		must(t, os.Symlink(filepath.Join(elsewhere, "new"), path))
		chownAttacker(t, path)
	}},
	{"regular file", false, func(t *testing.T, path, _ string) {
		must(t, os.WriteFile(path, []byte("x"), 0o644))
		chownAttacker(t, path)
	}},
	{"FIFO", false, func(t *testing.T, path, _ string) {
		must(t, unix.Mkfifo(path, 0o666))
		chownAttacker(t, path)
	}},
}

// snapshot is what a planted entry (and what a symlink points at) is.
type snapshot struct {
	ino, uid, mode, target uint64
	link                   string
	entries                int
}

func snap(t *testing.T, path string) snapshot {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Lstat(path, &st))
	s := snapshot{ino: st.Ino, uid: uint64(st.Uid), mode: uint64(st.Mode)}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		s.link, _ = os.Readlink(path)
		var tst unix.Stat_t
		if unix.Stat(path, &tst) == nil {
			s.target = uint64(tst.Mode)
			s.entries = names(path)
		}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		s.entries = names(path)
	}
	return s
}

// checkOwnArea fails unless own is a directory of the caller's, 0711, in
// dir and not at planted.
func checkOwnArea(t *testing.T, own, dir, planted string) {
	t.Helper()
	if own == planted || filepath.Dir(own) != dir {
		t.Fatalf("the run's area is %s; want one in %s that is not the planted %s", own, dir, planted)
	}
	var st unix.Stat_t
	must(t, unix.Lstat(own, &st))
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o7777 != 0o711 {
		t.Fatalf("the run's area %s: mode %o uid %d, want a directory of uid %d, 0711", own, st.Mode, st.Uid, os.Geteuid())
	}
}

// TestTempAreaPlanted plants each kind of thing at the caller's area in
// its temp dir and in /tmp: the run gets an area of its own beside it, the
// same one call after call, and the planted entry is neither used,
// covered as an area, followed nor touched.
func TestTempAreaPlanted(t *testing.T) {
	uid := strconv.Itoa(os.Geteuid())
	for _, where := range []string{"TMPDIR", "/tmp"} {
		for _, pl := range plantings {
			t.Run(where+"/"+pl.name, func(t *testing.T) {
				if pl.root && os.Geteuid() != 0 {
					t.Skip("planting a file of another uid needs root")
				}
				tmpdir, sys, other := stickyTmp(t), stickyTmp(t), stickyTmp(t)
				t.Setenv("TMPDIR", tmpdir)
				useSystemTmp(t, sys)
				dir := tmpdir
				if where == "/tmp" {
					dir = sys
				}
				elsewhere := filepath.Join(other, "attacker")
				must(t, os.Mkdir(elsewhere, 0o777))
				must(t, os.Chmod(elsewhere, 0o777))
				chownAttacker(t, elsewhere)
				planted := filepath.Join(dir, areaPrefix+uid)
				pl.plant(t, planted, elsewhere)
				before, target := snap(t, planted), snap(t, elsewhere)

				own, areas, err := tempAreas("")
				if err != nil {
					t.Fatalf("the planted area denies the sandbox: %v", err)
				}
				area := own
				if where == "/tmp" {
					area = ""
					for _, a := range areas {
						if filepath.Dir(a) == sys && strings.HasPrefix(filepath.Base(a), areaPrefix+uid) {
							area = a
						}
					}
				}
				checkOwnArea(t, area, dir, planted)
				for _, a := range areas {
					if a == planted || a == elsewhere || strings.HasPrefix(a, elsewhere+"/") {
						t.Errorf("the planted %s (or what it names) is covered as an area: %v", planted, areas)
					}
				}
				// The same area every time, and the planted entry as it was.
				own2, areas2, err := tempAreas("")
				must(t, err)
				if own2 != own || !slices.Equal(areas2, areas) {
					t.Errorf("second call: area %s %v, first %s %v", own2, areas2, own, areas)
				}
				if after := snap(t, planted); after != before {
					t.Errorf("the planted entry changed: %+v, was %+v", after, before)
				}
				if after := snap(t, elsewhere); after != target {
					t.Errorf("the attacker's directory changed: %+v, was %+v", after, target)
				}
				if where == "/tmp" {
					// The caller's areas elsewhere are listed in the one
					// in /tmp, whatever its name.
					b, err := os.ReadFile(filepath.Join(area, areaElsewhere))
					if err != nil || !strings.Contains(string(b), own+"\n") {
						t.Errorf("the area in /tmp does not list %s: %q %v", own, b, err)
					}
				}
			})
		}
	}
}

// A sandboxed run works beside a planted area, its TMPDIR in the area of
// its own, and so does a --user run, which lives in /tmp.
func TestTempAreaPlantedRun(t *testing.T) {
	requireSandbox(t)
	uid := strconv.Itoa(os.Geteuid())
	tmpdir, sys := stickyTmp(t), stickyTmp(t)
	for _, d := range []string{tmpdir, sys} {
		must(t, os.Symlink("/", filepath.Join(d, areaPrefix+uid)))
		chownAttacker(t, filepath.Join(d, areaPrefix+uid))
	}
	plantedRun(t, tmpdir, sys)
}

// plantedRun runs a command sandboxed with TMPDIR and /tmp at tmpdir and
// sys, where the caller's areas are planted.
func plantedRun(t *testing.T, tmpdir, sys string) {
	t.Helper()
	uid := strconv.Itoa(os.Geteuid())
	t.Setenv("TMPDIR", tmpdir)
	useSystemTmp(t, sys)
	res, prep := sandboxed(t, Policy{Mode: ModeReadOnly}, "/", "sh", "-c", `echo "$TMPDIR"; echo x > "$TMPDIR/f" && cat "$TMPDIR/f"`)
	if !strings.HasPrefix(prep.TempDir, tmpdir+"/"+areaPrefix+uid+".") || out(res) != prep.TempDir+"\nx\n" {
		t.Errorf("TMPDIR %s, output %q", prep.TempDir, out(res))
	}
	if os.Geteuid() != 0 {
		return
	}
	res, prep = sandboxed(t, Policy{Mode: ModeReadOnly, User: "nobody"}, "/", "sh", "-c", `id -u; echo x > "$TMPDIR/f" && cat "$TMPDIR/f"`)
	if !strings.HasPrefix(prep.TempDir, sys+"/"+areaPrefix+uid+".") || out(res) != "65534\nx\n" {
		t.Errorf("--user: TMPDIR %s, output %q (stderr %q)", prep.TempDir, out(res), text(res.Stderr))
	}
}

// TestTempAreaPlantedUnprivileged is TestTempAreaPlantedRun for a caller
// that is not root (nobody), the planted entries root's: a directory 0777
// in its TMPDIR and a symlink in /tmp.
func TestTempAreaPlantedUnprivileged(t *testing.T) {
	if os.Getenv("AGENTPLANE_PLANTED_TMP") != "" {
		// The child, as nobody.
		requireSandbox(t)
		plantedRun(t, os.Getenv("TMPDIR"), os.Getenv("AGENTPLANE_PLANTED_TMP"))
		return
	}
	requireRoot(t)
	if c := Probe(); !c.UserNS {
		t.Skip("unprivileged user namespaces are disabled")
	}
	dir := stickyTmp(t)
	must(t, os.Chmod(dir, 0o755))
	tmpdir, sys := filepath.Join(dir, "tmp"), filepath.Join(dir, "sys")
	for _, d := range []string{tmpdir, sys} {
		must(t, os.Mkdir(d, 0o1777))
		must(t, os.Chmod(d, 0o1777))
	}
	planted := filepath.Join(tmpdir, areaPrefix+strconv.Itoa(attacker))
	must(t, os.Mkdir(planted, 0o777))
	must(t, os.Chmod(planted, 0o777))
	must(t, os.Symlink("/", filepath.Join(sys, areaPrefix+strconv.Itoa(attacker))))
	data, err := os.ReadFile(self(t))
	must(t, err)
	bin := filepath.Join(dir, "sandbox.test")
	must(t, os.WriteFile(bin, data, 0o755))
	cmd := exec.Command(bin, "-test.v", "-test.count=1", "-test.run", "^TestTempAreaPlantedUnprivileged$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AGENTPLANE_SANDBOX_UNPRIVILEGED=1", "TMPDIR="+tmpdir, "AGENTPLANE_PLANTED_TMP="+sys)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attacker, Gid: attacker}}
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "--- PASS") || strings.Contains(string(b), "--- SKIP") {
		t.Fatalf("as nobody: %v\n%s", err, b)
	}
	if entries, _ := os.ReadDir(planted); len(entries) != 0 {
		t.Errorf("the run wrote in root's planted directory: %v", entries)
	}
}

// Only a directory of uid N named for N is N's area: another user cannot
// make every run cover thousands of directories of its (each a mount in
// the run's namespace, which the kernel bounds: mount-max, 100,000), and
// of N's areas with a suffix (when its own was planted) only the first
// maxFallbacks count.
func TestTempAreasFlood(t *testing.T) {
	requireRoot(t)
	dir := stickyTmp(t)
	t.Setenv("TMPDIR", dir)
	useSystemTmp(t, stickyTmp(t))
	for i := 0; i < 300; i++ {
		p := filepath.Join(dir, areaPrefix+strconv.Itoa(5000+i))
		must(t, os.Mkdir(p, 0o711))
		chownAttacker(t, p)
	}
	var want []string
	nobody := filepath.Join(dir, areaPrefix+strconv.Itoa(attacker))
	must(t, os.Mkdir(nobody, 0o711))
	chownAttacker(t, nobody)
	want = append(want, nobody)
	var suffixed []string
	for i := 0; i < 10; i++ {
		p := filepath.Join(dir, areaPrefix+strconv.Itoa(attacker)+"."+strings.Repeat(strconv.Itoa(i), fallbackHex))
		must(t, os.Mkdir(p, 0o711))
		chownAttacker(t, p)
		suffixed = append(suffixed, p)
	}
	own, areas, err := tempAreas("")
	must(t, err)
	want = append(append(want, suffixed[:maxFallbacks]...), own)
	var got []string
	for _, a := range areas {
		if filepath.Dir(a) == dir {
			got = append(got, a)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%d areas covered in the temp dir (the first: %v), want %v", len(got), got[:min(len(got), 8)], want)
	}
	// A name that only looks like an area is none.
	for _, name := range []string{"agentplane-sandbox.+1", "agentplane-sandbox.01", "agentplane-sandbox.1.ABCDEF012345", "agentplane-sandbox.1.abc", "agentplane-sandbox.1.abcdef0123456", "agentplane-sandbox.", "agentplane-sandbox.1.abcdef012345.x"} {
		if _, _, ok := parseArea(name); ok {
			t.Errorf("%s parsed as an area", name)
		}
	}
}

// Suffixed names of the caller's uid that are not its directories (another
// uid's, a FIFO, a symlink to one of the caller's) are neither taken nor
// covered; the caller's own suffixed area is the first of its in name
// order, and its others are covered.
func TestTempAreaPlantedSuffixed(t *testing.T) {
	requireRoot(t)
	uid := strconv.Itoa(os.Geteuid())
	dir := stickyTmp(t)
	t.Setenv("TMPDIR", dir)
	useSystemTmp(t, stickyTmp(t))
	name := func(c string) string { return filepath.Join(dir, areaPrefix+uid+"."+strings.Repeat(c, fallbackHex)) }
	must(t, os.Symlink("/", filepath.Join(dir, areaPrefix+uid)))
	must(t, os.Mkdir(name("1"), 0o711))
	must(t, os.Chown(name("1"), attacker, attacker))
	must(t, unix.Mkfifo(name("2"), 0o666))
	mine := filepath.Join(t.TempDir(), "mine")
	must(t, os.Mkdir(mine, 0o711))
	must(t, os.Symlink(mine, name("3")))
	own, areas, err := tempAreas("")
	must(t, err)
	checkOwnArea(t, own, dir, "")
	for _, c := range []string{"1", "2", "3"} {
		if own == name(c) || slices.Contains(areas, name(c)) {
			t.Errorf("the planted %s is used or covered: area %s, covers %v", name(c), own, areas)
		}
	}
	// A second suffixed area of the caller's, first in name order (0…0):
	// the next run takes it, and covers the other.
	must(t, os.Mkdir(name("0"), 0o711))
	must(t, os.Chmod(name("0"), 0o700))
	own2, areas2, err := tempAreas("")
	must(t, err)
	if own2 != name("0") || !slices.Contains(areas2, own) {
		t.Errorf("area %s covers %v: want %s, covering %s", own2, areas2, name("0"), own)
	}
	checkOwnArea(t, own2, dir, "")
}

// The caller's own area closed further than 0711 (a umask, a chmod) is
// set back to 0711 and used; one others could write (0777, 1777) may hold
// what they put there, and is not used, nor changed.
func TestTempAreaOwnMode(t *testing.T) {
	for _, c := range []struct {
		mode uint32
		used bool
	}{{0o700, true}, {0o000, true}, {0o755, true}, {0o777, false}, {0o1777, false}, {0o731, false}} {
		t.Run(strconv.FormatUint(uint64(c.mode), 8), func(t *testing.T) {
			dir := stickyTmp(t)
			t.Setenv("TMPDIR", dir)
			useSystemTmp(t, stickyTmp(t))
			own := filepath.Join(dir, areaPrefix+strconv.Itoa(os.Geteuid()))
			must(t, os.Mkdir(own, 0o700))
			mode := os.FileMode(c.mode & 0o777)
			if c.mode&0o1000 != 0 {
				mode |= os.ModeSticky
			}
			must(t, os.Chmod(own, mode))
			before := snap(t, own)
			got, areas, err := tempAreas("")
			must(t, err)
			if c.used {
				if got != own {
					t.Fatalf("area %s, want %s", got, own)
				}
				checkOwnArea(t, own, dir, "")
				return
			}
			checkOwnArea(t, got, dir, own)
			if slices.Contains(areas, own) {
				t.Errorf("the open area %s is covered: %v", own, areas)
			}
			if after := snap(t, own); after != before {
				t.Errorf("the open area changed: %+v, was %+v", after, before)
			}
		})
	}
}

// Suffixed areas of the caller's that it cannot use (open to others) do
// not make every call add one more: the one it made is found again,
// however many come before it.
func TestTempAreaSuffixedUnusable(t *testing.T) {
	uid := strconv.Itoa(os.Geteuid())
	dir := stickyTmp(t)
	t.Setenv("TMPDIR", dir)
	useSystemTmp(t, stickyTmp(t))
	must(t, os.Symlink("/", filepath.Join(dir, areaPrefix+uid)))
	for i := 0; i < maxFallbacks+2; i++ {
		p := filepath.Join(dir, areaPrefix+uid+"."+fmt.Sprintf("%0*x", fallbackHex, i)) // before any random one
		must(t, os.Mkdir(p, 0o777))
		must(t, os.Chmod(p, 0o777))
	}
	own, _, err := tempAreas("")
	must(t, err)
	checkOwnArea(t, own, dir, "")
	for i := 0; i < 3; i++ {
		again, _, err := tempAreas("")
		must(t, err)
		if again != own {
			t.Fatalf("call %d: area %s, the first took %s", i, again, own)
		}
	}
}

// Two first calls after a plant at the caller's area name in /tmp may
// each make a suffixed area there, and each lists its areas in other temp
// dirs in its own: later calls took the first in name order as theirs and
// read only its list, so a concurrent run's area listed in the other
// (its TMPDIR elsewhere) was covered by no later run. Every suffixed
// area's list counts.
func TestTempAreaElsewhereSuffixedHomes(t *testing.T) {
	uid := strconv.Itoa(os.Geteuid())
	sys := stickyTmp(t)
	useSystemTmp(t, sys)
	t.Setenv("TMPDIR", stickyTmp(t))
	must(t, os.Symlink("/", filepath.Join(sys, areaPrefix+uid)))
	name := func(c string) string { return filepath.Join(sys, areaPrefix+uid+"."+strings.Repeat(c, fallbackHex)) }
	for _, c := range []string{"0", "1"} {
		must(t, os.Mkdir(name(c), 0o711))
		must(t, os.Chmod(name(c), 0o711))
	}
	// The concurrent run's area, in a third temp dir, listed in the
	// second suffixed area only.
	other := filepath.Join(stickyTmp(t), areaPrefix+uid)
	must(t, os.Mkdir(other, 0o711))
	must(t, os.WriteFile(filepath.Join(name("1"), areaElsewhere), []byte(other+"\n"), 0o600))
	_, areas, err := tempAreas("")
	must(t, err)
	if !slices.Contains(areas, other) {
		t.Errorf("the area %s listed in %s is not covered: %v", other, name("1"), areas)
	}
}
