package acl

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/siteops/siteops/internal/tenant/metrics"
)

// Config says how to reach the nodes.
type Config struct {
	// SentinelAddrs are the Sentinels' host:port addresses. Either these or URL is required.
	SentinelAddrs []string
	// MasterName is the name the Sentinels monitor the master under.
	MasterName string
	// SentinelUsername and SentinelPassword authenticate to the Sentinels, when they require it.
	SentinelUsername, SentinelPassword string
	// URL addresses a single node directly (development without Sentinel).
	URL string
	// Username and Password are the admin credentials used on every data node.
	Username, Password string
	// TLS, when not nil, is used for every connection.
	TLS *tls.Config
	// Timeout bounds each dial, read and write; default 3s.
	Timeout time.Duration
	// AllowedNodes are the data nodes the operator may connect to (host:port, IP, CIDR or host
	// name, see ParseAllowList); a master or replica a Sentinel reports outside them gets
	// nothing, not even the admin AUTH. Empty: the nodes of the first discovery.
	AllowedNodes []string
	// OnUntrusted, when set, is told of every node refused as unknown (to record an Event); the
	// refusal is counted in siteops_tenant_untrusted_node_total either way.
	OnUntrusted func(Node)
}

// Role is a node's role at discovery time.
type Role string

// Node roles.
const (
	RoleMaster  Role = "master"
	RoleReplica Role = "replica"
)

// Node is one data node.
type Node struct {
	// Addr is the node's host:port.
	Addr string
	// Role is the node's role when it was discovered.
	Role Role
}

// NodeError is the failure of one node.
type NodeError struct {
	// Node is the node that failed.
	Node Node
	// Err is what failed there.
	Err error
}

// Error names the node and its role.
func (e *NodeError) Error() string {
	return fmt.Sprintf("%s %s: %v", e.Node.Role, e.Node.Addr, e.Err)
}

// Unwrap returns the node's underlying error.
func (e *NodeError) Unwrap() error { return e.Err }

// NodeResult is the outcome of a batch on one node.
type NodeResult struct {
	Node Node
	// Missing lists the users the node did not have before the batch (Sync only).
	Missing []string
	// Err is the node's error: the node could not be reached or a round trip failed as a whole.
	Err error
	// UserErrs holds, per username, a command the node refused for that user (or a user left out
	// because it is invalid). The other users of the batch were still applied.
	UserErrs map[string]error
}

func (r *NodeResult) userErr(user string, err error) {
	if r.UserErrs == nil {
		r.UserErrs = map[string]error{}
	}
	r.UserErrs[user] = err
}

// Result is the outcome of a batch on every node.
type Result struct {
	Nodes []NodeResult
	// DiscoveryErr is set when the node list could not be found; Nodes is then empty.
	DiscoveryErr error
}

// UserErrors returns, per username, the failures of that user on any node (one error per user,
// naming the node). Node-wide failures are in Err, not here.
func (r Result) UserErrors() map[string]error {
	out := map[string]error{}
	for _, n := range r.Nodes {
		for u, err := range n.UserErrs {
			out[u] = errors.Join(out[u], &NodeError{Node: n.Node, Err: err})
		}
	}
	return out
}

// Err joins every node's error (and the discovery error) into one, nil when all succeeded. A
// user's own failure (UserErrors) is not a node error: it never holds back the other users.
func (r Result) Err() error {
	errs := []error{r.DiscoveryErr}
	for _, n := range r.Nodes {
		if n.Err != nil {
			errs = append(errs, &NodeError{Node: n.Node, Err: n.Err})
		}
	}
	return errors.Join(errs...)
}

// MissingUsers returns every user some node lacked, once each.
func (r Result) MissingUsers() []string {
	var out []string
	for _, n := range r.Nodes {
		for _, u := range n.Missing {
			if !slices.Contains(out, u) {
				out = append(out, u)
			}
		}
	}
	slices.Sort(out)
	return out
}

// NodeSet talks to every node of one master's replication group.
type NodeSet struct {
	cfg     Config
	direct  *redis.Options
	allow   *AllowList
	mu      sync.Mutex
	clients map[string]*redis.Client
}

// New returns a NodeSet for cfg; it does not connect yet.
func New(cfg Config) (*NodeSet, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 3 * time.Second
	}
	allow, err := ParseAllowList(cfg.AllowedNodes)
	if err != nil {
		return nil, err
	}
	n := &NodeSet{cfg: cfg, allow: allow, clients: map[string]*redis.Client{}}
	switch {
	case cfg.URL != "":
		o, err := redis.ParseURL(cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("parse Valkey URL: %w", err)
		}
		if cfg.Username != "" {
			o.Username = cfg.Username
		}
		if cfg.Password != "" {
			o.Password = cfg.Password
		}
		if cfg.TLS != nil {
			o.TLSConfig = cfg.TLS
		}
		n.direct = o
	case len(cfg.SentinelAddrs) > 0:
		if cfg.MasterName == "" {
			return nil, errors.New("a Sentinel master name is required with Sentinel addresses")
		}
	default:
		return nil, errors.New("no Valkey address: give Sentinel addresses or a direct URL")
	}
	return n, nil
}

// Close closes every cached connection.
func (n *NodeSet) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for addr, c := range n.clients {
		errs = append(errs, c.Close())
		delete(n.clients, addr)
	}
	return errors.Join(errs...)
}

// SentinelClient returns a client for one Sentinel, authenticated as configured.
func (n *NodeSet) SentinelClient(addr string) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{
		Addr: addr, Username: n.cfg.SentinelUsername, Password: n.cfg.SentinelPassword, TLSConfig: n.cfg.TLS,
		DialTimeout: n.cfg.Timeout, ReadTimeout: n.cfg.Timeout, WriteTimeout: n.cfg.Timeout, MaxRetries: -1,
	})
}

// Config returns the configuration the set was made with.
func (n *NodeSet) Config() Config { return n.cfg }

// AllowList returns the nodes the set may connect to.
func (n *NodeSet) AllowList() *AllowList { return n.allow }

// Discover returns the current master and every replica Sentinel does not flag as down. It asks
// prefer first (the Sentinel that just announced a change knows the newest configuration), then
// the others in order. A master outside the allow-list is refused and the next Sentinel asked; a
// replica outside it is refused and left out.
func (n *NodeSet) Discover(ctx context.Context, prefer string) ([]Node, error) {
	if n.direct != nil {
		return []Node{{Addr: n.direct.Addr, Role: RoleMaster}}, nil
	}
	order := slices.Clone(n.cfg.SentinelAddrs)
	if i := slices.Index(order, prefer); i > 0 {
		order[0], order[i] = order[i], order[0]
	}
	var errs []error
	for _, addr := range order {
		nodes, down, err := n.discoverFrom(ctx, addr)
		if err == nil {
			// With no allow-list configured, the first answer is what the operator trusts,
			// replicas that are down included: they come back on the same address.
			n.allow.pinFirst(append(slices.Clone(nodes), down...))
			if nodes, err = n.trustedNodes(ctx, nodes); err == nil {
				return nodes, nil
			}
		}
		errs = append(errs, fmt.Errorf("sentinel %s: %w", addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("find Valkey nodes through Sentinel (check --valkey-sentinel-addrs and --valkey-sentinel-master): %w", errors.Join(errs...))
}

// trustedNodes refuses the nodes outside the allow-list: an untrusted master is an error, an
// untrusted replica is left out.
func (n *NodeSet) trustedNodes(ctx context.Context, nodes []Node) ([]Node, error) {
	out := make([]Node, 0, len(nodes))
	for _, node := range nodes {
		if err := n.Trust(ctx, node); err != nil {
			if node.Role == RoleMaster {
				return nil, err
			}
			continue
		}
		out = append(out, node)
	}
	return out, nil
}

// Trust returns an UntrustedNodeError, counted and reported, when node is outside the
// allow-list. The node given as --valkey-url is the platform's own and always trusted.
func (n *NodeSet) Trust(ctx context.Context, node Node) error {
	if n.direct != nil && node.Addr == n.direct.Addr {
		return nil
	}
	if n.allow.needsPin() {
		// Nothing configured and nothing discovered yet: what the Sentinels report now is trusted.
		if _, err := n.Discover(ctx, ""); n.allow.needsPin() {
			return fmt.Errorf("no Valkey node is trusted yet, the first discovery failed: %w", err)
		}
	}
	if n.allow.Allows(ctx, node.Addr) {
		return nil
	}
	metrics.CountUntrustedNode(node.Addr)
	if n.cfg.OnUntrusted != nil {
		n.cfg.OnUntrusted(node)
	}
	return &UntrustedNodeError{Node: node}
}

func (n *NodeSet) discoverFrom(ctx context.Context, addr string) (nodes, down []Node, err error) {
	sc := n.SentinelClient(addr)
	defer sc.Close()
	m, err := sc.GetMasterAddrByName(ctx, n.cfg.MasterName).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("get master address of %q: %w", n.cfg.MasterName, err)
	}
	if len(m) != 2 {
		return nil, nil, fmt.Errorf("unexpected master address reply %v", m)
	}
	master := net.JoinHostPort(m[0], m[1])
	nodes = []Node{{Addr: master, Role: RoleMaster}}
	replicas, err := sc.Replicas(ctx, n.cfg.MasterName).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("list replicas of %q: %w", n.cfg.MasterName, err)
	}
	for _, r := range replicas {
		a := net.JoinHostPort(r["ip"], r["port"])
		if a == master || slices.ContainsFunc(nodes, func(x Node) bool { return x.Addr == a }) {
			continue
		}
		if ReplicaDown(r["flags"]) {
			down = append(down, Node{Addr: a, Role: RoleReplica})
			continue
		}
		nodes = append(nodes, Node{Addr: a, Role: RoleReplica})
	}
	return nodes, down, nil
}

// ReplicaDown reports whether Sentinel's flags mark a replica as down. "disconnected" alone does
// not count: right after a failover Sentinel lists every replica as disconnected until its own
// link is up, and skipping them then would leave the replicas without the resync.
func ReplicaDown(flags string) bool {
	for _, f := range strings.Split(flags, ",") {
		switch f {
		case "s_down", "o_down":
			return true
		}
	}
	return false
}

func (n *NodeSet) client(addr string) *redis.Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.clients[addr]; ok {
		return c
	}
	var o redis.Options
	if n.direct != nil && addr == n.direct.Addr {
		o = *n.direct
	} else {
		o = redis.Options{Addr: addr, Username: n.cfg.Username, Password: n.cfg.Password, TLSConfig: n.cfg.TLS}
	}
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = n.cfg.Timeout, n.cfg.Timeout, n.cfg.Timeout
	// A node that is gone must fail fast: the caller retries the whole batch with fresh discovery.
	o.MaxRetries = -1
	o.PoolSize = 4
	o.Protocol = 2
	c := redis.NewClient(&o)
	n.clients[addr] = c
	return c
}

// Upsert creates or replaces users on every node.
func (n *NodeSet) Upsert(ctx context.Context, users []User) Result {
	return n.each(ctx, "", func(ctx context.Context, node Node) NodeResult { return n.UpsertNode(ctx, node, users) })
}

// Sync checks and re-applies users on every node (or only on the node at addr when addr is not
// empty), reporting per node which users were missing before. prefer is the Sentinel asked first.
func (n *NodeSet) Sync(ctx context.Context, prefer, addr string, users []User) Result {
	return n.each(ctx, prefer, func(ctx context.Context, node Node) NodeResult {
		if addr != "" && node.Addr != addr {
			return NodeResult{Node: node}
		}
		return n.SyncNode(ctx, node, users)
	})
}

// Delete removes users from every node; users that do not exist are not an error.
func (n *NodeSet) Delete(ctx context.Context, names []string) Result {
	return n.each(ctx, "", func(ctx context.Context, node Node) NodeResult {
		cmds := make([][]any, len(names))
		for i, name := range names {
			cmds[i] = []any{"acl", "deluser", name}
		}
		res, err := n.pipeline(ctx, node, cmds)
		r := NodeResult{Node: node, Err: err}
		if err == nil {
			for i, name := range names {
				if e := replyErr(res[i]); e != nil {
					r.userErr(name, e)
				}
			}
		}
		return r
	})
}

// Check reports, per node, which users are missing or do not accept exactly their passwords.
// It reads each user with ACL GETUSER, which costs the server milliseconds per user: use it for
// a few users, and Sync for the whole tenant list.
func (n *NodeSet) Check(ctx context.Context, users []User) Result {
	return n.each(ctx, "", func(ctx context.Context, node Node) NodeResult {
		cmds := make([][]any, len(users))
		for i, u := range users {
			cmds[i] = []any{"acl", "getuser", u.Name}
		}
		res, err := n.pipeline(ctx, node, cmds)
		r := NodeResult{Node: node, Err: err}
		if err == nil {
			for i, u := range users {
				if !userMatches(res[i], u) {
					r.Missing = append(r.Missing, u.Name)
				}
			}
		}
		return r
	})
}

// UpsertNode applies users on one node in one pipeline. An invalid user is left out and a user
// the node refuses is reported in UserErrs; neither stops the others.
func (n *NodeSet) UpsertNode(ctx context.Context, node Node, users []User) NodeResult {
	r := NodeResult{Node: node}
	valid := r.validUsers(users)
	cmds := make([][]any, len(valid))
	for i, u := range valid {
		cmds[i] = SetUserArgs(u)
	}
	res, err := n.pipeline(ctx, node, cmds)
	r.Err = err
	if err == nil {
		for i, u := range valid {
			if e := replyErr(res[i]); e != nil {
				r.userErr(u.Name, e)
			}
		}
	}
	return r
}

// validUsers returns the users that pass Validate and records the others in r.UserErrs.
func (r *NodeResult) validUsers(users []User) []User {
	out := make([]User, 0, len(users))
	for _, u := range users {
		if err := u.Validate(); err != nil {
			r.userErr(u.Name, fmt.Errorf("left out: %w", err))
			continue
		}
		out = append(out, u)
	}
	return out
}

// replyErr returns the server's refusal of one command, nil when it succeeded.
func replyErr(c *redis.Cmd) error {
	if c == nil {
		return nil
	}
	if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	return nil
}

// SyncNode lists the node's users and re-applies every user in a single pipeline, so Missing
// reports what the node had lost. ACL USERS is used rather than ACL GETUSER per user because
// GETUSER renders the whole rule and costs milliseconds per call.
//
// Each user's SETUSER stands alone: an invalid user is left out and one the node refuses is
// reported in UserErrs, and neither stops the other users' commands.
func (n *NodeSet) SyncNode(ctx context.Context, node Node, users []User) NodeResult {
	r := NodeResult{Node: node}
	valid := r.validUsers(users)
	cmds := make([][]any, 0, 1+len(valid))
	cmds = append(cmds, []any{"acl", "users"})
	for _, u := range valid {
		cmds = append(cmds, SetUserArgs(u))
	}
	res, err := n.pipeline(ctx, node, cmds)
	r.Err = err
	if err != nil {
		return r
	}
	if e := replyErr(res[0]); e != nil {
		r.Err = fmt.Errorf("acl users: %w", e)
		return r
	}
	have, _ := res[0].StringSlice()
	present := make(map[string]bool, len(have))
	for _, name := range have {
		present[name] = true
	}
	for i, u := range valid {
		if e := replyErr(res[i+1]); e != nil {
			r.userErr(u.Name, e)
			continue
		}
		if !present[u.Name] {
			r.Missing = append(r.Missing, u.Name)
		}
	}
	return r
}

// PasswordHashes returns the SHA-256 digests of the passwords user accepts on the node at addr,
// or nil when the user does not exist there.
func (n *NodeSet) PasswordHashes(ctx context.Context, addr, user string) ([]string, error) {
	res, err := n.pipeline(ctx, Node{Addr: addr, Role: RoleMaster}, [][]any{{"acl", "getuser", user}})
	if err != nil {
		return nil, err
	}
	if err := replyErr(res[0]); err != nil {
		return nil, fmt.Errorf("acl getuser: %w", err)
	}
	var out []string
	for _, h := range passwordsOf(res[0]) {
		if ValidHash(h) {
			out = append(out, h)
		}
	}
	return out, nil
}

func (n *NodeSet) each(ctx context.Context, prefer string, f func(context.Context, Node) NodeResult) Result {
	nodes, err := n.Discover(ctx, prefer)
	if err != nil {
		return Result{DiscoveryErr: err}
	}
	out := make([]NodeResult, len(nodes))
	var wg sync.WaitGroup
	for i, node := range nodes {
		wg.Go(func() { out[i] = f(ctx, node) })
	}
	wg.Wait()
	return Result{Nodes: out}
}

// pipelineChunk bounds the commands sent in one round trip. The read timeout covers a whole
// round trip, so a chunk must finish well within it even on a busy node; 1000 ACL SETUSER in one
// go can take most of a second.
const pipelineChunk = 200

// pipeline sends cmds to node in round trips of pipelineChunk commands and returns every
// command's reply. A command the server refuses is only in its own reply (callers read it per
// command, so one bad command never holds back the rest); err is set when a round trip failed as
// a whole (connection, timeout), and then the later chunks are not sent.
func (n *NodeSet) pipeline(ctx context.Context, node Node, cmds [][]any) ([]*redis.Cmd, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	// Checked before every use, not only at the first dial: the connection pool AUTHs each new
	// connection with the admin password, and a node's address can leave the allow-list.
	if err := n.Trust(ctx, node); err != nil {
		return nil, err
	}
	c := n.client(node.Addr)
	out := make([]*redis.Cmd, len(cmds))
	for start := 0; start < len(cmds); start += pipelineChunk {
		end := min(start+pipelineChunk, len(cmds))
		pipe := c.Pipeline()
		for i := start; i < end; i++ {
			out[i] = pipe.Do(ctx, cmds[i]...)
		}
		if _, err := pipe.Exec(ctx); err == nil {
			continue
		}
		for i := start; i < end; i++ {
			e := out[i].Err()
			var reply redis.Error
			if e != nil && !errors.Is(e, redis.Nil) && !errors.As(e, &reply) {
				return out, fmt.Errorf("%s %s: %w", cmds[i][0], cmds[i][1], e)
			}
		}
	}
	return out, nil
}

func userMatches(c *redis.Cmd, u User) bool {
	if c == nil || c.Err() != nil {
		return false
	}
	got := passwordsOf(c)
	slices.Sort(got)
	return slices.Equal(got, u.Hashes())
}

// passwordsOf extracts the "passwords" field of an ACL GETUSER reply (RESP2: a flat list).
func passwordsOf(c *redis.Cmd) []string {
	if c == nil || c.Err() != nil {
		return nil
	}
	var fields []any
	switch v := c.Val().(type) {
	case []any:
		fields = v
	case map[any]any:
		for k, val := range v {
			fields = append(fields, k, val)
		}
	}
	for i := 0; i+1 < len(fields); i += 2 {
		if k, _ := fields[i].(string); k == "passwords" {
			list, _ := fields[i+1].([]any)
			out := make([]string, 0, len(list))
			for _, p := range list {
				if s, ok := p.(string); ok {
					out = append(out, s)
				}
			}
			return out
		}
	}
	return []string{}
}
