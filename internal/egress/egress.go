// Package egress decides where connections the operator makes on a tenant's behalf may go. A
// tenant names URLs (a git remote, a repository host); without a policy the operator would reach
// whatever that name resolves to, including its own loopback, the cloud metadata endpoint and the
// cluster's private services, and report what they answer. The policy allows URL schemes by name
// and checks destinations after DNS resolution, at connect time, against the actual IP being
// connected, so a name that resolves to a public address when checked and to a private one when
// used (DNS rebinding) is still refused.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultSchemes are the URL schemes allowed when none are configured: encrypted transports only.
var DefaultSchemes = []string{"https", "ssh"}

// Settings name the configuration a refusal tells the platform team to change.
type Settings struct {
	// Hosts lists host:port pairs, hosts and CIDRs allowed even when private or loopback.
	Hosts string
	// Private opens every private network (RFC 1918, fc00::/7, 100.64.0.0/10).
	Private string
	// Schemes lists the allowed URL schemes.
	Schemes string
}

// Config is a policy as the platform team writes it.
type Config struct {
	// Schemes allowed in URLs; empty means DefaultSchemes.
	Schemes []string
	// Hosts are allowed whatever address they resolve to: "host:port" or "ip:port" (that port
	// only, what refusals suggest), or "host", an IP or a CIDR such as "10.1.0.0/16" (every port).
	Hosts []string
	// AllowPrivate allows private networks (RFC 1918, fc00::/7, 100.64.0.0/10). Loopback,
	// link-local, unspecified and multicast addresses stay refused unless listed in Hosts.
	AllowPrivate bool
	// Settings name the flags that configure this policy, for error messages.
	Settings Settings
}

// Policy is a validated Config. The zero value is not usable; use New.
type Policy struct {
	schemes   []string
	names     map[string]bool // lower-case host names, any port
	hostPorts map[string]bool // "host:port" with lower-case host (IPs in canonical form)
	prefixes  []netip.Prefix
	private   bool
	settings  Settings
}

// New validates c and returns its policy.
func New(c Config) (*Policy, error) {
	p := &Policy{names: map[string]bool{}, hostPorts: map[string]bool{}, private: c.AllowPrivate, settings: c.Settings}
	schemes := c.Schemes
	if len(schemes) == 0 {
		schemes = DefaultSchemes
	}
	for _, s := range schemes {
		s = strings.ToLower(strings.TrimSpace(s))
		switch s {
		case "":
			continue
		case "https", "http", "ssh", "file":
			p.schemes = append(p.schemes, s)
		default:
			return nil, fmt.Errorf("scheme %q is not supported; use https, ssh, http or file", s)
		}
	}
	for _, h := range c.Hosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if h == "" {
			continue
		}
		if pfx, err := netip.ParsePrefix(h); err == nil {
			p.prefixes = append(p.prefixes, pfx.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
			p.prefixes = append(p.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		if host, port, err := net.SplitHostPort(h); err == nil {
			if _, err := strconv.ParseUint(port, 10, 16); err != nil || host == "" {
				return nil, fmt.Errorf("allowed host %q: want host, host:port, IP, IP:port or CIDR", h)
			}
			p.hostPorts[hostPort(host, port)] = true
			continue
		}
		if strings.ContainsAny(h, "/:@ ") {
			return nil, fmt.Errorf("allowed host %q: want host, host:port, IP, IP:port or CIDR", h)
		}
		p.names[strings.TrimSuffix(h, ".")] = true
	}
	return p, nil
}

// MustNew is New for configurations known to be valid (tests, defaults); it panics otherwise.
func MustNew(c Config) *Policy {
	p, err := New(c)
	if err != nil {
		panic(err)
	}
	return p
}

// hostPort canonicalises a host (lower case, IPs unmapped) and port into a map key.
func hostPort(host, port string) string {
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	}
	return net.JoinHostPort(host, port)
}

// Refused is a connection or URL the policy does not allow. Its message names the destination
// and the setting that would allow it, never anything the destination answered.
type Refused struct {
	// What was refused: "scheme" or an address class such as "loopback" or "private".
	What string
	msg  string
}

func (e *Refused) Error() string { return e.msg }

// IsRefused reports whether err (or an error it wraps) is a policy refusal.
func IsRefused(err error) bool {
	var r *Refused
	return errors.As(err, &r)
}

// AllowsScheme reports whether URLs of scheme may be used.
func (p *Policy) AllowsScheme(scheme string) bool {
	return slices.Contains(p.schemes, strings.ToLower(scheme))
}

// CheckScheme returns a *Refused error unless URLs of scheme may be used.
func (p *Policy) CheckScheme(scheme string) error {
	if p.AllowsScheme(scheme) {
		return nil
	}
	return &Refused{What: "scheme", msg: fmt.Sprintf("URL scheme %q is not allowed (allowed: %s); the platform team can allow it with %s",
		strings.ToLower(scheme), strings.Join(p.schemes, ", "), orDefault(p.settings.Schemes, "the allowed schemes setting"))}
}

// classify names the kind of special address ip is, "" for a public unicast address.
func classify(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "link-local"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	case ip.IsPrivate():
		return "private"
	}
	for _, r := range reserved {
		if r.p.Contains(ip) {
			if r.class == "nat64" {
				// NAT64 embeds an IPv4 address in the last 32 bits: judge that address.
				b := ip.As16()
				return classify(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
			}
			return r.class
		}
	}
	return ""
}

var reserved = []struct {
	p     netip.Prefix
	class string
}{
	{netip.MustParsePrefix("100.64.0.0/10"), "private"}, // carrier-grade NAT, often cluster-internal
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // includes 255.255.255.255
	{netip.MustParsePrefix("64:ff9b::/96"), "nat64"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
}

// CheckAddr decides whether a connection to ip:port, reached by dialing host, may be made.
func (p *Policy) CheckAddr(host string, ip netip.Addr, port string) error {
	ip = ip.Unmap()
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if p.names[host] || p.hostPorts[hostPort(host, port)] || p.hostPorts[hostPort(ip.String(), port)] {
		return nil
	}
	for _, pfx := range p.prefixes {
		if pfx.Contains(ip) {
			return nil
		}
	}
	class := classify(ip)
	if class == "" || (class == "private" && p.private) {
		return nil
	}
	dest := net.JoinHostPort(ip.String(), port)
	if h := strings.Trim(host, "[]"); h != "" && h != ip.String() {
		dest += " (" + h + ")"
	}
	// The suggestion names the port: a bare host would open every port of it.
	how := fmt.Sprintf("add %s to %s", hostPort(orDefault(host, ip.String()), port), orDefault(p.settings.Hosts, "the allowed hosts"))
	if class == "private" {
		how += fmt.Sprintf(" or set %s", orDefault(p.settings.Private, "the allow-private-networks setting"))
	}
	return &Refused{What: class, msg: fmt.Sprintf("connection to %s refused: %s address; if the platform trusts it, %s", dest, class, how)}
}

// DialContext connects like net.Dialer.DialContext, checking every address actually connected
// (after resolution, for each address tried) against the policy.
func (p *Policy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	d := &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		ControlContext: func(_ context.Context, _, address string, _ syscall.RawConn) error {
			ipStr, port, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip, err := netip.ParseAddr(ipStr)
			if err != nil {
				return fmt.Errorf("connection to %s refused: not an IP address", address)
			}
			return p.CheckAddr(host, ip, port)
		},
	}
	return d.DialContext(ctx, network, addr)
}

// Transport returns an HTTP transport that dials through the policy, refuses URLs of schemes
// the policy does not allow (redirect targets included: every hop passes through it) and
// ignores proxy environment variables, which would reach the destination on the policy's behalf.
func (p *Policy) Transport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = p.DialContext
	t.DialTLSContext = nil
	return schemeCheck{p: p, next: t}
}

type schemeCheck struct {
	p    *Policy
	next http.RoundTripper
}

// CloseIdleConnections closes the transport's idle connections (http.Client.CloseIdleConnections
// reaches them through it).
func (s schemeCheck) CloseIdleConnections() {
	if c, ok := s.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (s schemeCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := s.p.CheckScheme(req.URL.Scheme); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	return s.next.RoundTrip(req)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
