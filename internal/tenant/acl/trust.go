package acl

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
)

// AllowList is the set of data-node addresses the operator may connect to: what the platform
// configured (--valkey-allowed-nodes), or, when it configured none, the nodes the Sentinels
// reported when the operator started. Sentinel's answers are not trusted beyond it: anyone who
// can reach an unauthenticated Sentinel can make it report a master of their own.
type AllowList struct {
	prefixes  []netip.Prefix  // IPs and CIDRs, any port
	names     map[string]bool // host names, any port
	hostPorts map[string]bool // host:port, host lower case or a canonical IP
	resolve   func(ctx context.Context, host string) ([]string, error)

	mu     sync.Mutex
	pinned map[string]bool // nodes trusted on first use, when nothing was configured
	pin    bool            // nothing configured: the first discovery pins the nodes
}

// ParseAllowList parses entries as host:port (that port only), an IP, a CIDR or a host name
// (every port). Host names are resolved when an IP is checked, so a StatefulSet pod's stable name
// keeps matching after its IP changed. An empty list pins the nodes of the first discovery.
func ParseAllowList(entries []string) (*AllowList, error) {
	a := &AllowList{names: map[string]bool{}, hostPorts: map[string]bool{}, resolve: net.DefaultResolver.LookupHost}
	for _, e := range entries {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" {
			continue
		}
		if p, err := netip.ParsePrefix(e); err == nil {
			a.prefixes = append(a.prefixes, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
			a.prefixes = append(a.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		if host, port, err := net.SplitHostPort(e); err == nil {
			if _, err := strconv.ParseUint(port, 10, 16); err != nil || host == "" {
				return nil, fmt.Errorf("allowed Valkey node %q: want host:port, IP, CIDR or host name", e)
			}
			a.hostPorts[canonicalHostPort(host, port)] = true
			continue
		}
		if strings.ContainsAny(e, "/:@ ") {
			return nil, fmt.Errorf("allowed Valkey node %q: want host:port, IP, CIDR or host name", e)
		}
		a.names[strings.TrimSuffix(e, ".")] = true
	}
	a.pin = len(a.prefixes) == 0 && len(a.names) == 0 && len(a.hostPorts) == 0
	if a.pin {
		a.pinned = map[string]bool{}
	}
	return a, nil
}

// Pinning reports whether the list was configured empty and trusts the nodes of the first
// discovery.
func (a *AllowList) Pinning() bool { return a.pin }

// pinFirst trusts nodes when nothing was configured and nothing is pinned yet. It reports
// whether it pinned them.
func (a *AllowList) pinFirst(nodes []Node) bool {
	if !a.pin {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pinned) > 0 {
		return false
	}
	for _, n := range nodes {
		a.pinned[canonicalAddr(n.Addr)] = true
	}
	return true
}

// needsPin reports whether the list waits for its first discovery.
func (a *AllowList) needsPin() bool {
	if !a.pin {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pinned) == 0
}

// Pinned returns the nodes trusted on first use, nil when the list was configured.
func (a *AllowList) Pinned() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for addr := range a.pinned {
		out = append(out, addr)
	}
	return out
}

// Allows reports whether addr (host:port) is a known node. A reported IP matches IP and CIDR
// entries, host:port entries, and host-name entries that resolve to it now; a reported host name
// matches only the same name, never by what it resolves to (its answer could change by the time
// it is dialled).
func (a *AllowList) Allows(ctx context.Context, addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	key := canonicalHostPort(host, port)
	if a.pin {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.pinned[key]
	}
	if a.hostPorts[key] {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		return a.names[strings.TrimSuffix(strings.ToLower(host), ".")]
	}
	ip = ip.Unmap()
	for _, p := range a.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	for name := range a.names {
		if a.resolvesTo(ctx, name, ip) {
			return true
		}
	}
	for hp := range a.hostPorts {
		h, p, _ := net.SplitHostPort(hp)
		if p == port && a.resolvesTo(ctx, h, ip) {
			return true
		}
	}
	return false
}

func (a *AllowList) resolvesTo(ctx context.Context, host string, ip netip.Addr) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return false
	}
	addrs, err := a.resolve(ctx, host)
	if err != nil {
		return false
	}
	for _, s := range addrs {
		if got, err := netip.ParseAddr(s); err == nil && got.Unmap() == ip {
			return true
		}
	}
	return false
}

func canonicalAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return canonicalHostPort(host, port)
}

// canonicalHostPort lower-cases a host name and writes an IP in its canonical form.
func canonicalHostPort(host, port string) string {
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	}
	return net.JoinHostPort(host, port)
}

// UntrustedNodeError is a node the operator refused to connect to: nothing was sent to it, not
// the admin password and no ACL command.
type UntrustedNodeError struct {
	// Node is the refused node, as a Sentinel reported it.
	Node Node
}

// Error says what was refused and what to check.
func (e *UntrustedNodeError) Error() string {
	return fmt.Sprintf("%s %s is not a known Valkey node, nothing was sent to it: a Sentinel reports a node outside --valkey-allowed-nodes (check SENTINEL MASTERS and SENTINEL REPLICAS on every Sentinel, require Sentinel auth, or add the node to --valkey-allowed-nodes)", e.Node.Role, e.Node.Addr)
}
