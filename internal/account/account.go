// Package account looks up the machine's users for the programs: the
// sandbox's --user, the audit record's user name, the state directory's
// home when HOME is unusable.
//
// The released programs are built without cgo (scripts/install): a static
// program has no dynamic loader to run, which is about a quarter of a short
// call, and runs on any Linux whatever its libc. Without cgo the os/user
// package reads /etc/passwd and /etc/group only, where a cgo build asks NSS
// (LDAP, sssd, systemd-homed). So a user os/user does not find is asked of
// getent(1), which goes through NSS, before it is called unknown: both
// builds find the same users, and the lookup that files answer costs no
// process.
package account

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"time"
)

// User is an account: its name, ids, home and supplementary groups.
type User struct {
	Name   string
	UID    int
	GID    int
	Home   string
	Groups []int // the supplementary groups, the primary one included
}

// ErrUnknown is returned for a user neither os/user nor NSS knows.
var ErrUnknown = errors.New("account: unknown user")

// ErrNoAnswer is returned when getent (NSS: an LDAP server, say) did not
// answer within getentTimeout.
var ErrNoAnswer = errors.New("account: the user databases (NSS, through getent) did not answer in time")

// getentPaths are where getent is looked for: fixed paths, never the
// caller's PATH, since the answer decides which ids a command runs as.
var getentPaths = []string{"/usr/bin/getent", "/bin/getent"}

// getentTimeout bounds an NSS query (an LDAP server that does not answer).
var getentTimeout = 5 * time.Second

// Lookup finds the user named name, or, when name is a number that names
// no user, the user with that uid.
func Lookup(name string) (User, error) {
	if name == "" {
		return User{}, ErrUnknown
	}
	if u, err := user.Lookup(name); err == nil {
		return fromOS(u, true)
	}
	if id, ok := parseID(name); ok {
		return LookupID(id)
	}
	if isNumber(name) {
		// "007", "+0", 4294967296: a cgo LookupId would cut the last to
		// 32 bits, uid 0. Only the canonical decimal names a uid.
		return User{}, ErrUnknown
	}
	u, err := lookupNSS(name, true)
	if err != nil {
		return User{}, err
	}
	// The entry must be the one asked for.
	if u.Name != name {
		return User{}, ErrUnknown
	}
	return u, nil
}

// maxID is the largest id a user can have: (uid_t)-1 is "no change" to
// setresuid(2), and larger values do not fit in 32 bits.
const maxID = 1<<32 - 2

// parseID reads a uid in canonical decimal (no sign, no leading zero) in
// 0..maxID.
func parseID(s string) (int, bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > maxID || strconv.FormatUint(n, 10) != s {
		return 0, false
	}
	return int(n), true
}

func isNumber(s string) bool {
	s = strings.TrimLeft(s, "+-")
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func validID(n int) bool { return n >= 0 && n <= maxID }

// LookupID finds the user with uid id.
func LookupID(id int) (User, error) { return lookupID(id, true) }

// Describe finds the name and home of the user with uid id, without its
// groups: for a user the files hold it starts no process (the audit
// record and the state directory ask it on every call).
func Describe(id int) (User, error) { return lookupID(id, false) }

func lookupID(id int, groups bool) (User, error) {
	if !validID(id) {
		return User{}, ErrUnknown
	}
	if u, err := user.LookupId(strconv.Itoa(id)); err == nil {
		out, err := fromOS(u, groups)
		if err == nil && out.UID != id {
			return User{}, ErrUnknown
		}
		return out, err
	}
	u, err := lookupNSS(strconv.Itoa(id), groups)
	if err == nil && u.UID != id {
		return User{}, ErrUnknown
	}
	return u, err
}

func fromOS(u *user.User, groups bool) (User, error) {
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil || !validID(uid) || !validID(gid) {
		return User{}, errors.New("account: user " + strconv.Quote(u.Username) + " has invalid ids " + u.Uid + ":" + u.Gid)
	}
	out := User{Name: u.Username, UID: uid, GID: gid, Home: u.HomeDir}
	if !groups {
		return out, nil
	}
	if ids, err := u.GroupIds(); err == nil {
		out.Groups = numbers(ids)
	}
	if !nssInProcess || len(out.Groups) == 0 {
		// Without cgo, os/user read the groups from /etc/group only:
		// NSS adds those of LDAP, sssd and the like to a local account.
		groups, err := nssGroups(out.Name, gid)
		if err != nil {
			return User{}, err
		}
		out.Groups = dedupe(append(out.Groups, groups...))
	}
	return out, nil
}

// lookupNSS asks getent for the passwd entry of key (a name or a uid),
// and for the user's groups.
func lookupNSS(key string, groups bool) (User, error) {
	out, err := getent("passwd", key)
	if err != nil {
		return User{}, err
	}
	u, err := parsePasswd(out)
	if err != nil {
		return User{}, err
	}
	if !groups {
		return u, nil
	}
	if u.Groups, err = nssGroups(u.Name, u.GID); err != nil {
		return User{}, err
	}
	return u, nil
}

// parsePasswd reads the first line of getent passwd: name, password,
// uid, gid, gecos, home, shell.
func parsePasswd(out []byte) (User, error) {
	line, _, _ := bytes.Cut(out, []byte("\n"))
	f := strings.Split(string(line), ":")
	if len(f) < 7 || f[0] == "" {
		return User{}, ErrUnknown
	}
	uid, err1 := strconv.Atoi(f[2])
	gid, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil || !validID(uid) || !validID(gid) {
		return User{}, ErrUnknown
	}
	return User{Name: f[0], UID: uid, GID: gid, Home: f[5]}, nil
}

// nssGroups is the user's groups from getent initgroups (glibc's
// getgrouplist through NSS), the primary group always among them.
// A user NSS does not answer for has its primary group only; an NSS that
// does not answer in time is an error, not fewer groups.
func nssGroups(name string, gid int) ([]int, error) {
	groups := []int{gid}
	out, err := getent("initgroups", name)
	if errors.Is(err, ErrNoAnswer) {
		return nil, err
	}
	if err != nil {
		return groups, nil
	}
	groups = append(groups, parseInitgroups(out, name)...)
	return dedupe(groups), nil
}

// parseInitgroups reads "name gid gid ...", the line getent initgroups
// prints for name.
func parseInitgroups(out []byte, name string) []int {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != name {
			continue
		}
		return numbers(f[1:])
	}
	return nil
}

func getent(db, key string) ([]byte, error) {
	// A key that starts with '-' would be an option; one with ':' or a
	// space cannot be a name the databases hold.
	if key == "" || strings.HasPrefix(key, "-") || strings.ContainsAny(key, ": \t\n") {
		return nil, ErrUnknown
	}
	for _, p := range getentPaths {
		ctx, cancel := context.WithTimeout(context.Background(), getentTimeout)
		cmd := exec.CommandContext(ctx, p, db, key)
		cmd.Env = []string{"LC_ALL=C"}
		// A child of an NSS module that keeps stdout open must not hold
		// the lookup past the timeout.
		cmd.WaitDelay = 100 * time.Millisecond
		out, err := cmd.Output()
		timedOut := ctx.Err() != nil
		cancel()
		var ee *exec.ExitError
		switch {
		case timedOut:
			return nil, ErrNoAnswer
		case err == nil:
			return out, nil
		case errors.As(err, &ee):
			// getent ran: 2 is "not found"; anything else is no answer.
			return nil, ErrUnknown
		}
	}
	return nil, ErrUnknown
}

func numbers(s []string) []int {
	var out []int
	for _, v := range s {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			out = append(out, n)
		}
	}
	return out
}

func dedupe(ids []int) []int {
	seen := map[int]bool{}
	out := ids[:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
