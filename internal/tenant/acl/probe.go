package acl

import (
	"context"
	"fmt"
	"strings"
)

// ProbePrefix names the foreign key a tenant is probed with when there is no other tenant. No
// tenant can own it: usernames come from namespace names, which cannot hold a dot.
const ProbePrefix = "siteops.isolation-probe"

// Probe is one command a tenant must be refused, checked with ACL DRYRUN.
type Probe struct {
	// Name says what the command would do, for Events and logs (for example "GET foreign key").
	Name string
	// Args is the command, as ACL DRYRUN takes it after the username.
	Args []any
}

// Probes returns the commands a tenant user must never be allowed to run: reading and writing
// a key of another tenant (foreign is that tenant's username), enumerating or wiping the shared
// keyspace, running scripts, reading the server's configuration, publishing, and client-side
// caching's tracking, whose broadcast mode names every key written on the node.
func Probes(foreign string) []Probe {
	key := foreign + ":isolation-probe"
	return []Probe{
		{"GET of another tenant's key", []any{"get", key}},
		{"SET of another tenant's key", []any{"set", key, "x"}},
		{"SCAN", []any{"scan", "0"}},
		{"KEYS", []any{"keys", "*"}},
		{"FLUSHALL", []any{"flushall"}},
		{"EVAL", []any{"eval", "return 1", "0"}},
		{"CONFIG GET", []any{"config", "get", "maxmemory"}},
		{"PUBLISH", []any{"publish", key, "x"}},
		{"CLIENT TRACKING", []any{"client", "tracking", "on", "bcast"}},
	}
}

// Violation is one probe a node allowed a tenant user.
type Violation struct {
	// User is the tenant username.
	User string
	// Probe names what the user was allowed to do.
	Probe string
}

// ProofResult is the outcome of an isolation proof on one node.
type ProofResult struct {
	Node Node
	// Violations lists every probe the node allowed.
	Violations []Violation
	// Err is set when the node could not be asked; Violations is then incomplete.
	Err error
}

// ProveNode asks the node, with ACL DRYRUN, whether each user could run any of the Probes, all
// in one pipeline (about 9 commands per user, answered in microseconds each). The foreign key of
// each user belongs to the next user in the list, so every proof is a real cross-tenant read. A
// user the node does not know is skipped: Sync reports it.
func (n *NodeSet) ProveNode(ctx context.Context, node Node, users []string) ProofResult {
	r := ProofResult{Node: node}
	type probe struct{ user, name string }
	var cmds [][]any
	var index []probe
	for i, u := range users {
		foreign := ProbePrefix
		if len(users) > 1 {
			foreign = users[(i+1)%len(users)]
		}
		for _, p := range Probes(foreign) {
			cmds = append(cmds, append([]any{"acl", "dryrun", u}, p.Args...))
			index = append(index, probe{u, p.Name})
		}
	}
	res, err := n.pipeline(ctx, node, cmds)
	if err != nil {
		r.Err = fmt.Errorf("acl dryrun: %w", err)
		return r
	}
	for i, c := range res {
		if err := c.Err(); err != nil {
			// A user the node lacks is Sync's business; any other refusal (a server without
			// ACL DRYRUN, an admin user not allowed it) means the proof did not run.
			if !strings.Contains(err.Error(), "not found") && r.Err == nil {
				r.Err = fmt.Errorf("acl dryrun for user %s: %w", index[i].user, err)
			}
			continue
		}
		// DRYRUN answers OK when the user may run the command, and a bulk string saying why not
		// otherwise.
		if s, ok := c.Val().(string); ok && strings.EqualFold(s, "OK") {
			r.Violations = append(r.Violations, Violation{User: index[i].user, Probe: index[i].name})
		}
	}
	return r
}
