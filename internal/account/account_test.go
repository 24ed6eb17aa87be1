package account

import (
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// fakeGetent makes getent a script that knows one user os/user does not
// (as LDAP would), and records nothing else: each test gets its own.
func fakeGetent(t *testing.T, script string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "getent")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	old := getentPaths
	getentPaths = []string{filepath.Join(t.TempDir(), "missing"), p}
	t.Cleanup(func() { getentPaths = old })
}

const ldapUser = `case "$1 $2" in
"passwd ldapuser"|"passwd 4100123") echo 'ldapuser:*:4100123:4100000:LDAP user:/home/ldapuser:/bin/sh' ;;
"initgroups ldapuser") echo 'ldapuser              4100000 4100007 4100000' ;;
*) exit 2 ;;
esac
`

func TestLookupFromFiles(t *testing.T) {
	fakeGetent(t, "exit 99\n") // never asked: the files answer
	for _, key := range []string{"root", "0"} {
		u, err := Lookup(key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if u.Name != "root" || u.UID != 0 || u.GID != 0 || !slices.Contains(u.Groups, 0) {
			t.Errorf("%s: %+v", key, u)
		}
	}
	me, err := LookupID(os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	if me.UID != os.Getuid() || me.Name == "" {
		t.Errorf("LookupID(%d) = %+v", os.Getuid(), me)
	}
	if ou, err := user.Current(); err == nil && ou.HomeDir != me.Home {
		t.Errorf("home %q, os/user says %q", me.Home, ou.HomeDir)
	}
}

// A user only NSS knows (a static build's os/user reads the files only)
// is found through getent, with its groups.
func TestLookupFromNSS(t *testing.T) {
	fakeGetent(t, ldapUser)
	for _, key := range []string{"ldapuser", "4100123"} {
		u, err := Lookup(key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		want := User{Name: "ldapuser", UID: 4100123, GID: 4100000, Home: "/home/ldapuser", Groups: []int{4100000, 4100007}}
		if u.Name != want.Name || u.UID != want.UID || u.GID != want.GID || u.Home != want.Home || !slices.Equal(u.Groups, want.Groups) {
			t.Errorf("%s: %+v, want %+v", key, u, want)
		}
	}
	if u, err := LookupID(4100123); err != nil || u.Name != "ldapuser" {
		t.Errorf("LookupID = %+v, %v", u, err)
	}
}

func TestLookupUnknown(t *testing.T) {
	fakeGetent(t, ldapUser)
	for _, key := range []string{"", "no-such-user-x", "-s", "a:b", "a b", "4100999"} {
		if u, err := Lookup(key); !errors.Is(err, ErrUnknown) {
			t.Errorf("Lookup(%q) = %+v, %v", key, u, err)
		}
	}
	if _, err := LookupID(-1); !errors.Is(err, ErrUnknown) {
		t.Errorf("LookupID(-1): %v", err)
	}
	// No getent at all: unknown, not an error of another kind.
	getentPaths = []string{filepath.Join(t.TempDir(), "none")}
	if _, err := Lookup("ldapuser"); !errors.Is(err, ErrUnknown) {
		t.Errorf("without getent: %v", err)
	}
}

// An answer for another uid than asked (a getent that maps numbers
// oddly) is not taken.
func TestLookupIDMismatch(t *testing.T) {
	fakeGetent(t, "echo 'other:*:4100555:1:x:/:/bin/sh'\n")
	if u, err := LookupID(4100123); !errors.Is(err, ErrUnknown) {
		t.Errorf("LookupID = %+v, %v", u, err)
	}
	for _, key := range []string{"someone", "4100123"} {
		if u, err := Lookup(key); !errors.Is(err, ErrUnknown) {
			t.Errorf("Lookup(%q) = %+v, %v", key, u, err)
		}
	}
}

func TestParsePasswd(t *testing.T) {
	for _, bad := range []string{"", "\n", "a:b:c", "x:*:-1:0:g:/h:/s", "x:*:1:y:g:/h:/s", ":*:1:1:g:/h:/s"} {
		if u, err := parsePasswd([]byte(bad)); err == nil {
			t.Errorf("%q parsed as %+v", bad, u)
		}
	}
	u, err := parsePasswd([]byte("a:x:12:34:G:/home/a:/bin/sh\nb:x:1:1::/:/bin/sh\n"))
	if err != nil || u.Name != "a" || u.UID != 12 || u.GID != 34 || u.Home != "/home/a" {
		t.Errorf("%+v, %v", u, err)
	}
	if g := parseInitgroups([]byte("other 1 2\na 5 x 7 -3\n"), "a"); !slices.Equal(g, []int{5, 7}) {
		t.Errorf("groups %v", g)
	}
	if g := dedupe([]int{3, 1, 3, 2, 1}); !slices.Equal(g, []int{3, 1, 2}) {
		t.Errorf("dedupe %v", g)
	}
}

// Numbers that are not a uid's canonical decimal, or out of range, name
// nobody: a cgo LookupId would cut 4294967296 to uid 0.
func TestLookupNonCanonicalIDs(t *testing.T) {
	fakeGetent(t, "echo 'root:x:0:0:root:/root:/bin/sh'\n") // an NSS that answers anything with root
	for _, key := range []string{"4294967296", "18446744073709551616", "+0", "007", "-1", "00", "4294967295"} {
		if u, err := Lookup(key); !errors.Is(err, ErrUnknown) {
			t.Errorf("Lookup(%q) = %+v, %v", key, u, err)
		}
	}
	for _, id := range []int{-1, 1 << 32, 1<<32 - 1} {
		if u, err := LookupID(id); !errors.Is(err, ErrUnknown) {
			t.Errorf("LookupID(%d) = %+v, %v", id, u, err)
		}
	}
}

// An entry with ids out of range (setresuid would take -1 as "no change"
// and cut 2^32 to 0) is refused, from NSS and from the files alike.
func TestLookupInvalidIDs(t *testing.T) {
	fakeGetent(t, `case "$2" in
negu) echo 'negu:x:-1:-1::/tmp:/bin/sh' ;;
bigu) echo 'bigu:x:4294967296:4294967296::/tmp:/bin/sh' ;;
maxu) echo 'maxu:x:4294967295:1::/tmp:/bin/sh' ;;
*) exit 2 ;;
esac
`)
	for _, key := range []string{"negu", "bigu", "maxu"} {
		if u, err := Lookup(key); err == nil {
			t.Errorf("Lookup(%q) = %+v", key, u)
		}
	}
	if _, err := fromOS(&user.User{Username: "negu", Uid: "-1", Gid: "-1"}, false); err == nil {
		t.Error("a files entry with uid -1 was taken")
	}
	if _, err := fromOS(&user.User{Username: "bigu", Uid: "4294967296", Gid: "0"}, false); err == nil {
		t.Error("a files entry with uid 2^32 was taken")
	}
}

// An NSS that does not answer is an error of its own, within about the
// timeout, even when a child of it keeps getent's stdout open.
func TestLookupNSSNoAnswer(t *testing.T) {
	fakeGetent(t, "sleep 3 &\nsleep 3\n")
	old := getentTimeout
	getentTimeout = 200 * time.Millisecond
	t.Cleanup(func() { getentTimeout = old })
	start := time.Now()
	if _, err := Lookup("slowuser"); !errors.Is(err, ErrNoAnswer) {
		t.Errorf("err %v, want ErrNoAnswer", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the lookup took %v", d)
	}
}

// Without cgo, the groups NSS adds to a user of the files are kept.
func TestGroupsFromNSSForFilesUser(t *testing.T) {
	if nssInProcess {
		t.Skip("a cgo build asks NSS in the process")
	}
	fakeGetent(t, `[ "$1" = initgroups ] && [ "$2" = root ] && echo 'root 0 4242' && exit 0
exit 2
`)
	u, err := Lookup("root")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(u.Groups, 4242) || !slices.Contains(u.Groups, 0) {
		t.Errorf("groups %v, want 0 and 4242", u.Groups)
	}
	if d, err := Describe(0); err != nil || d.Name != "root" || d.Groups != nil {
		t.Errorf("Describe(0) = %+v, %v", d, err)
	}
}
