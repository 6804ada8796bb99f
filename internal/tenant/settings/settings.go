// Package settings judges whether a Valkey/Redis deployment is configured for many tenants: ACL
// users bound what a tenant may touch, not how much memory, how many connections or how large a
// single value it may take, and an open Sentinel or default user undoes the ACLs altogether. The
// checks here read values already fetched from the nodes, so they need no server to test.
package settings

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Setting names, as the siteops_tenant_node_setting_gaps metric and `siteops tenant doctor` show
// them. Each is a CONFIG parameter except DefaultUser and SentinelAuth; MaxClients judges
// maxclients together with timeout.
const (
	MaxMemory       = "maxmemory"
	MaxMemoryPolicy = "maxmemory-policy"
	ProtoMaxBulkLen = "proto-max-bulk-len"
	MaxClients      = "maxclients"
	DefaultUser     = "default-user"
	SentinelAuth    = "sentinel-auth"
)

// Timeout is the CONFIG parameter that closes idle connections; MaxClients is judged with it.
const Timeout = "timeout"

// ConfigParams are the parameters a data node is read with (CONFIG GET).
var ConfigParams = []string{MaxMemory, MaxMemoryPolicy, ProtoMaxBulkLen, MaxClients, Timeout}

// Defaults of Redis 7 and Valkey that do not suit a shared node.
const (
	// DefaultProtoMaxBulkLen is the server's default largest string (512 MiB): one SETRANGE or
	// APPEND of a tenant may allocate that much at once, past maxmemory.
	DefaultProtoMaxBulkLen = 512 << 20
	// DefaultMaxClients is the server's default connection limit.
	DefaultMaxClients = 10000
)

// Recommended are redis.conf lines that pass every data-node check; `siteops dev up` runs its
// Valkey stand-in with them, and docs/tenant.md shows them. maxmemory must still be sized for
// the node: 256mb is the development value.
var Recommended = []string{
	"maxmemory 256mb",
	"maxmemory-policy allkeys-lru",
	"proto-max-bulk-len 16mb",
	"maxclients 10000",
	"timeout 300",
}

// DataNode is what was read from one master or replica.
type DataNode struct {
	// Addr is the node's host:port and Role its role ("master" or "replica").
	Addr, Role string
	// Config holds the CONFIG GET answers for ConfigParams; a missing parameter fails its check.
	Config map[string]string
	// Default describes the node's default user (ACL GETUSER default).
	Default User
}

// User is what ACL GETUSER answered about a user.
type User struct {
	// Exists is false when ACL GETUSER answered nil.
	Exists bool
	// Flags are the user's flags ("on", "off", "nopass", …).
	Flags []string
	// Passwords is how many password digests the user accepts.
	Passwords int
}

// Sentinel is what was seen on one Sentinel.
type Sentinel struct {
	// Addr is the Sentinel's host:port.
	Addr string
	// Open is true when the Sentinel answered PING on a connection that sent no credentials.
	Open bool
}

// Finding is the verdict on one setting of one node.
type Finding struct {
	// Node is the node's host:port and Role its role ("master", "replica" or "sentinel").
	Node, Role string
	// Setting is one of the setting names above.
	Setting string
	// OK is true when the setting suits a shared node.
	OK bool
	// Have is the value found, as the server shows it.
	Have string
	// Fix says what to set when OK is false (empty otherwise).
	Fix string
}

// CheckDataNode returns one Finding per data-node setting, in a fixed order.
func CheckDataNode(n DataNode) []Finding {
	f := func(setting string, ok bool, have, fix string) Finding {
		if ok {
			fix = ""
		}
		return Finding{Node: n.Addr, Role: n.Role, Setting: setting, OK: ok, Have: have, Fix: fix}
	}
	get := func(p string) (string, int64, bool) {
		v, ok := n.Config[p]
		if !ok {
			return "(not reported)", 0, false
		}
		i, err := strconv.ParseInt(v, 10, 64)
		return v, i, err == nil
	}
	var out []Finding

	have, mem, ok := get(MaxMemory)
	out = append(out, f(MaxMemory, ok && mem > 0, have,
		"CONFIG SET maxmemory <about 3/4 of the node's memory limit> (and in the node's config file): without it one tenant's writes grow the node until it is killed for memory"))

	policy := n.Config[MaxMemoryPolicy]
	out = append(out, f(MaxMemoryPolicy, strings.HasPrefix(policy, "allkeys-"), orNotReported(policy),
		"CONFIG SET maxmemory-policy allkeys-lru: with noeviction a full node refuses every tenant's writes, and the volatile-* policies evict only keys with a TTL"))

	have, bulk, ok := get(ProtoMaxBulkLen)
	out = append(out, f(ProtoMaxBulkLen, ok && bulk < DefaultProtoMaxBulkLen, have,
		"CONFIG SET proto-max-bulk-len 16mb (the largest value a site stores, below the 512mb default): it bounds one SETRANGE, APPEND or SETBIT, which can allocate past maxmemory and stall the node long enough for a failover"))

	// Connections are bounded only together: maxclients not cut below the default by the file
	// limit, and idle ones, also ones that never authenticate, closed so they do not hold it.
	have, clients, okc := get(MaxClients)
	haveIdle, idle, oki := get(Timeout)
	out = append(out, f(MaxClients, okc && clients >= DefaultMaxClients && oki && idle > 0, "maxclients "+have+", timeout "+haveIdle,
		fmt.Sprintf("CONFIG SET timeout 300, and keep maxclients at %d or more (raise the node's open-file limit): otherwise connections that never authenticate, or a few tenants' pools, hold every slot", DefaultMaxClients)))

	out = append(out, checkDefaultUser(n))
	return out
}

func orNotReported(v string) string {
	if v == "" {
		return "(not reported)"
	}
	return v
}

// checkDefaultUser passes a default user that is off, or on with a password: an open default
// user is a full-access login for anyone who reaches the port, whatever the tenant ACLs say.
func checkDefaultUser(n DataNode) Finding {
	d := n.Default
	fd := Finding{Node: n.Addr, Role: n.Role, Setting: DefaultUser}
	switch {
	case !d.Exists:
		fd.OK, fd.Have = true, "absent"
	case slices.Contains(d.Flags, "off"):
		fd.OK, fd.Have = true, "off"
	case slices.Contains(d.Flags, "nopass") || d.Passwords == 0:
		fd.Have = "on, no password"
		fd.Fix = "ACL SETUSER default off (with an admin user for siteops: --valkey-admin-username), or give it a password (requirepass); save it with ACL SAVE or in the node's config"
	default:
		fd.OK, fd.Have = true, "on, password required"
	}
	return fd
}

// CheckSentinel returns the verdict on one Sentinel's authentication.
func CheckSentinel(s Sentinel) Finding {
	f := Finding{Node: s.Addr, Role: "sentinel", Setting: SentinelAuth, OK: !s.Open, Have: "password required"}
	if s.Open {
		f.Have = "answers without a password"
		f.Fix = "set requirepass on every Sentinel (and sentinel sentinel-pass for the others) and give siteops --valkey-sentinel-password: an open Sentinel lets anyone trigger a failover or re-point the master"
	}
	return f
}

// Gaps returns the findings that did not pass.
func Gaps(fs []Finding) []Finding {
	var out []Finding
	for _, f := range fs {
		if !f.OK {
			out = append(out, f)
		}
	}
	return out
}
