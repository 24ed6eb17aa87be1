package netproxy

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	good := []struct{ in, pattern string }{
		{"github.com", "github.com"},
		{"GitHub.COM.", "github.com"},
		{"*.example.org", "*.example.org"},
		{"registry.npmjs.org:443", "registry.npmjs.org:443"},
		{"127.0.0.1:8080", "127.0.0.1:8080"},
		{"127.0.0.1", "127.0.0.1"},
		{"::1", "::1"},
		{"[::1]:8080", "[::1]:8080"},
		{"[::ffff:10.0.0.1]:80", "10.0.0.1:80"},
		{"_svc.example.com", "_svc.example.com"},
	}
	for _, c := range good {
		r, err := ParseRule(c.in)
		if err != nil || r.Pattern != c.pattern {
			t.Errorf("ParseRule(%q) = %q, %v; want %q", c.in, r.Pattern, err, c.pattern)
		}
	}
	bad := []string{"", "*", "*.", "a.*.com", "exa mple.com", "example.com:0", "example.com:65536",
		"example.com:http", "http://example.com", "example.com/path", "[::1", "a..b", "fe80::1%eth0",
		strings.Repeat("a", 64) + ".com", "1.2.3.4:5:6", "ex*ample.com", "*example.com"}
	for _, in := range bad {
		if r, err := ParseRule(in); err == nil {
			t.Errorf("ParseRule(%q) = %q, want an error", in, r.Pattern)
		}
	}
}

// fakeResolver answers from a table, so that rebinding can be tested
// without DNS.
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := f[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	var out []netip.Addr
	for _, a := range addrs {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

func TestCheck(t *testing.T) {
	rules, err := ParseRules([]string{"github.com", "*.example.org", "npm.test:443", "127.0.0.1:8080",
		"rebind.test", "mixed.test", "local.test", "10.1.2.3", "v6.test"})
	if err != nil {
		t.Fatal(err)
	}
	res := fakeResolver{
		"github.com":      {"140.82.112.3"},
		"a.example.org":   {"93.184.216.34"},
		"a.b.example.org": {"93.184.216.35"},
		"example.org":     {"93.184.216.34"},
		"npm.test":        {"104.16.0.1"},
		"rebind.test":     {"127.0.0.1"},
		"mixed.test":      {"127.0.0.1", "8.8.8.8", "169.254.169.254"},
		"local.test":      {"10.1.2.3"},
		"v6.test":         {"::ffff:127.0.0.1", "fd00::1"},
		"evil.test":       {"8.8.4.4"},
	}
	c := &Checker{Rules: rules, Resolver: res}
	cases := []struct {
		host  string
		port  int
		addrs string // "" means refused
		why   string // part of the refusal
	}{
		{"github.com", 443, "140.82.112.3:443", ""},
		{"GITHUB.com.", 22, "140.82.112.3:22", ""},
		{"evil.test", 443, "", "no --allow-host rule matches"},
		{"a.example.org", 443, "93.184.216.34:443", ""},
		{"a.b.example.org", 80, "93.184.216.35:80", ""},
		{"example.org", 443, "", "no --allow-host rule"}, // *. is subdomains only
		{"badexample.org", 443, "", "no --allow-host rule"},
		{"npm.test", 443, "104.16.0.1:443", ""},
		{"npm.test", 80, "", "no --allow-host rule"},
		{"127.0.0.1", 8080, "127.0.0.1:8080", ""},
		{"127.0.0.1", 8081, "", "no --allow-host rule names this address"},
		{"[::ffff:127.0.0.1]", 8080, "127.0.0.1:8080", ""},
		{"::1", 8080, "", "names this address"},
		{"rebind.test", 80, "", "resolves to 127.0.0.1"},
		{"rebind.test", 8080, "127.0.0.1:8080", ""}, // the address is allowed explicitly
		{"mixed.test", 443, "8.8.8.8:443", ""},      // the local answers are dropped
		{"local.test", 5432, "10.1.2.3:5432", ""},   // 10.1.2.3 is allowed on any port
		{"v6.test", 80, "", "resolves to 127.0.0.1, fd00::1"},
		{"github.com", 0, "", "port"},
		{"github.com", 70000, "", "port"},
		{"bad host", 80, "", "not allowed in host name"},
		{"169.254.169.254", 80, "", "names this address"},
	}
	for _, tc := range cases {
		addrs, _, err := c.Check(context.Background(), tc.host, tc.port)
		var got []string
		for _, a := range addrs {
			got = append(got, a.String())
		}
		if tc.addrs != "" {
			if err != nil || strings.Join(got, ",") != tc.addrs {
				t.Errorf("Check(%s, %d) = %v, %v; want %s", tc.host, tc.port, got, err, tc.addrs)
			}
			continue
		}
		var ref *Refusal
		if !errors.As(err, &ref) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("Check(%s, %d) = %v, %v; want a refusal saying %q", tc.host, tc.port, got, err, tc.why)
		}
	}
}

func TestCheckLookupFailureIsNotARefusal(t *testing.T) {
	rules, _ := ParseRules([]string{"gone.test"})
	c := &Checker{Rules: rules, Resolver: fakeResolver{}}
	_, _, err := c.Check(context.Background(), "gone.test", 443)
	var ref *Refusal
	if err == nil || errors.As(err, &ref) {
		t.Fatalf("err = %v, want a lookup error that is not a refusal", err)
	}
}

func TestSpecial(t *testing.T) {
	special := []string{"127.0.0.1", "127.255.0.1", "10.0.0.1", "172.16.0.1", "192.168.1.1", "169.254.169.254",
		"100.64.0.1", "0.0.0.0", "0.1.2.3", "224.0.0.1", "255.255.255.255", "::1", "::", "fd00::1", "fe80::1",
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::a00:1", "2002:a00:1::", "ff02::1"}
	public := []string{"8.8.8.8", "140.82.112.3", "2606:4700::1111", "1.1.1.1"}
	for _, s := range special {
		if !Special(netip.MustParseAddr(s)) {
			t.Errorf("Special(%s) = false", s)
		}
	}
	for _, s := range public {
		if Special(netip.MustParseAddr(s)) {
			t.Errorf("Special(%s) = true", s)
		}
	}
}
