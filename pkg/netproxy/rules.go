package netproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one parsed --allow-host pattern: an exact host name, a "*."
// wildcard over a domain's subdomains, or an IP address, each with an
// optional port (no port: any port).
type Rule struct {
	// Pattern is the rule as the operator wrote it, normalised (lower
	// case, no trailing dot); reports and refusals quote it.
	Pattern  string
	name     string     // exact host, or the domain under "*." (wildcard)
	wildcard bool       // name is a suffix: any subdomain of it matches
	addr     netip.Addr // an IP rule, when valid
	port     int        // 0: any port
}

// IsAddr reports whether the rule names an IP address rather than a host name.
func (r Rule) IsAddr() bool { return r.addr.IsValid() }

// ParseRule parses one pattern: "github.com", "*.example.org",
// "registry.npmjs.org:443", "127.0.0.1:8080", "::1", "[::1]:8080". A bare
// "*" is refused: allowing every host is --net host, said plainly.
func ParseRule(s string) (Rule, error) {
	orig := s
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return Rule{}, errors.New("empty host pattern")
	}
	if strings.ContainsAny(s, "/@?# ") {
		return Rule{}, fmt.Errorf("host pattern %q: give a host, *.domain or address with an optional :port (github.com, *.example.org, 127.0.0.1:8080), not a URL", orig)
	}
	host, port := s, 0
	if a, err := netip.ParseAddr(s); err == nil {
		// A bare IPv6 address holds colons but no port.
		if a.Zone() != "" {
			return Rule{}, fmt.Errorf("host pattern %q: zoned addresses are not supported", orig)
		}
		return addrRule(a, 0), nil
	}
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Rule{}, fmt.Errorf("host pattern %q: port %q is not a number from 1 to 65535", orig, p)
		}
		host, port = h, n
	} else if strings.Contains(s, "]") || strings.Count(s, ":") > 0 {
		return Rule{}, fmt.Errorf("host pattern %q: %v", orig, err)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return Rule{}, fmt.Errorf("host pattern %q: zoned addresses are not supported", orig)
		}
		return addrRule(a, port), nil
	}
	r := Rule{port: port}
	if strings.HasPrefix(host, "*.") {
		r.wildcard = true
		host = host[2:]
	}
	host = strings.TrimSuffix(host, ".")
	if err := checkName(host); err != nil {
		return Rule{}, fmt.Errorf("host pattern %q: %v", orig, err)
	}
	r.name = host
	r.Pattern = host
	if r.wildcard {
		r.Pattern = "*." + host
	}
	if port != 0 {
		r.Pattern += ":" + strconv.Itoa(port)
	}
	return r, nil
}

func addrRule(a netip.Addr, port int) Rule {
	a = a.Unmap()
	p := a.String()
	if port != 0 {
		p = netip.AddrPortFrom(a, uint16(port)).String()
	}
	return Rule{Pattern: p, addr: a, port: port}
}

// checkName accepts a DNS host name: dot-separated labels of letters,
// digits, '-' and '_' (used by some service names), 1-63 bytes each, at
// most 253 in all. Anything else (a '*' inside, a space, a slash) is a
// mistake the operator should hear about.
func checkName(h string) error {
	if h == "" {
		return errors.New("no host name")
	}
	if len(h) > 253 {
		return errors.New("host name longer than 253 bytes")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("bad label %q in host name %q", label, h)
		}
		for _, c := range label {
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok {
				return fmt.Errorf("character %q is not allowed in host name %q (only a leading \"*.\" is a wildcard)", c, h)
			}
		}
	}
	return nil
}

// Rules is an allowlist. The zero value allows nothing.
type Rules []Rule

// ParseRules parses every pattern, dropping duplicates.
func ParseRules(patterns []string) (Rules, error) {
	var rs Rules
	seen := map[string]bool{}
	for _, p := range patterns {
		r, err := ParseRule(p)
		if err != nil {
			return nil, err
		}
		if seen[r.Pattern] {
			continue
		}
		seen[r.Pattern] = true
		rs = append(rs, r)
	}
	return rs, nil
}

// Patterns returns the rules as written, for reports.
func (rs Rules) Patterns() []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Pattern)
	}
	return out
}

// HasLoopback reports whether a rule names a loopback address, which
// decides whether the command's own loopback bypasses the proxy.
func (rs Rules) HasLoopback() bool {
	for _, r := range rs {
		if r.IsAddr() && r.addr.IsLoopback() {
			return true
		}
	}
	return false
}

// matchName returns the first name rule that allows host:port.
func (rs Rules) matchName(host string, port int) (Rule, bool) {
	for _, r := range rs {
		if r.IsAddr() || (r.port != 0 && r.port != port) {
			continue
		}
		if r.wildcard {
			if strings.HasSuffix(host, "."+r.name) {
				return r, true
			}
		} else if host == r.name {
			return r, true
		}
	}
	return Rule{}, false
}

// matchAddr returns the first IP rule that allows a:port.
func (rs Rules) matchAddr(a netip.Addr, port int) (Rule, bool) {
	a = a.Unmap()
	for _, r := range rs {
		if r.IsAddr() && r.addr == a && (r.port == 0 || r.port == port) {
			return r, true
		}
	}
	return Rule{}, false
}

// Special reports whether a is an address a public host name must not
// resolve to unless a rule names the address itself: loopback, private
// (RFC 1918, unique local), link-local, carrier-grade NAT, unspecified,
// multicast, and the other ranges that reach this machine or its network
// rather than the internet. This is what stops DNS rebinding: an allowed
// name whose record is changed to 127.0.0.1 or 169.254.169.254 does not
// take the command to a local service.
func Special(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return true
	}
	for _, p := range specialPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

var specialPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64: may embed a private IPv4
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("2002::/16"),       // 6to4: may embed a private IPv4
	netip.MustParsePrefix("fec0::/10"),       // deprecated site-local
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("::ffff:0:0/96"),   // mapped (Unmap covers it; kept for clarity)
	netip.MustParsePrefix("::/128"),          // unspecified
	netip.MustParsePrefix("2001::/32"),       // Teredo: embeds an IPv4
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
}

// Resolver looks host names up; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Refusal is why a connection was not allowed. Its message names the
// host, the port and the rule (or the missing rule) that decided.
type Refusal struct {
	Host   string
	Port   int
	Reason string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("connection to %s not allowed: %s", hostPort(r.Host, r.Port), r.Reason)
}

func hostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// Checker decides connections against an allowlist, resolving names
// itself so that the addresses it returns are the only ones the caller
// connects to: a name is checked, then every address it resolves to.
type Checker struct {
	Rules    Rules
	Resolver Resolver
}

// Check decides whether host:port may be reached. On success it returns
// the addresses to connect to (at least one) and the rule that allowed
// them; otherwise a *Refusal, or another error when the lookup failed.
func (c *Checker) Check(ctx context.Context, host string, port int) ([]netip.AddrPort, string, error) {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if port < 1 || port > 65535 {
		return nil, "", &Refusal{Host: host, Port: port, Reason: "the port is not from 1 to 65535"}
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		a = a.Unmap().WithZone("")
		r, ok := c.Rules.matchAddr(a, port)
		if !ok {
			return nil, "", &Refusal{Host: a.String(), Port: port, Reason: "no --allow-host rule names this address" + c.allowedText()}
		}
		return []netip.AddrPort{netip.AddrPortFrom(a, uint16(port))}, r.Pattern, nil
	}
	if err := checkName(host); err != nil {
		return nil, "", &Refusal{Host: host, Port: port, Reason: err.Error()}
	}
	r, ok := c.Rules.matchName(host, port)
	if !ok {
		return nil, "", &Refusal{Host: host, Port: port, Reason: "no --allow-host rule matches it" + c.allowedText()}
	}
	res := c.Resolver
	if res == nil {
		res = net.DefaultResolver
	}
	addrs, err := res.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, "", fmt.Errorf("cannot resolve %s: %w", host, err)
	}
	var out []netip.AddrPort
	var refused []string
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if Special(a) {
			if _, ok := c.Rules.matchAddr(a, port); !ok {
				refused = append(refused, a.String())
				continue
			}
		}
		out = append(out, netip.AddrPortFrom(a, uint16(port)))
	}
	if len(out) == 0 {
		if len(refused) == 0 {
			return nil, "", fmt.Errorf("cannot resolve %s: no addresses", host)
		}
		return nil, "", &Refusal{Host: host, Port: port, Reason: fmt.Sprintf(
			"rule %s allows the name, but it resolves to %s, a loopback, private or otherwise local address no rule names (allow the address itself, e.g. --allow-host %s)",
			r.Pattern, strings.Join(refused, ", "), hostPort(refused[0], port))}
	}
	return out, r.Pattern, nil
}

func (c *Checker) allowedText() string {
	if len(c.Rules) == 0 {
		return " (no hosts are allowed)"
	}
	return " (allowed: " + strings.Join(c.Rules.Patterns(), ", ") + ")"
}
