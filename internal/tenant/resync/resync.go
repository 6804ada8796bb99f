// Package resync re-applies every managed tenant's ACL user on the Valkey nodes: after a Sentinel
// failover, when a node restarts, and on a jittered period, counting users a node had lost. Each
// round starts with an isolation proof (ACL DRYRUN of forbidden commands for every tenant user).
package resync

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/metrics"
)

// Event reasons recorded on namespaces by resyncs.
const (
	// ReasonUserFailed: the tenant's own user could not be applied; the others were.
	ReasonUserFailed = "ValkeyACLUserFailed"
	// ReasonIsolationViolation: a node allowed the tenant's user a forbidden command.
	ReasonIsolationViolation = "ValkeyACLIsolationViolation"
)

// Tenant is one managed namespace and the ACL user it should have.
type Tenant struct {
	// Namespace is the namespace the user belongs to; Events and per-tenant metrics name it.
	Namespace string
	// User is the ACL user, with password digests only.
	User acl.User
}

// TenantLister returns the tenants whose users should exist. It reads them from what only the
// platform can write (namespaces), never from tenant-writable objects.
type TenantLister func(ctx context.Context) ([]Tenant, error)

// Recorder records Events (the events.k8s.io API's recorder signature).
type Recorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// Syncer proves isolation on every node, then applies every listed user there in one pipeline
// per node. The proof runs first so it sees what the nodes had since the last round (a rule
// changed behind the operator's back), before the round's ACL SETUSER ... reset replaces it.
type Syncer struct {
	// Nodes reaches the Valkey nodes.
	Nodes *acl.NodeSet
	// Tenants lists the managed tenants.
	Tenants TenantLister
	// Prover runs the isolation proof at the start of each round; nil skips it.
	Prover *Prover
	// Events records per-tenant failures on namespaces; nil records none.
	Events Recorder
	// Guard, when set, is shared with the namespace controller: a round applies only the users
	// it can hold, so it never re-applies state that a concurrent rotation or opt-out has just
	// replaced, and never waits for one tenant's change (the controller applies that user).
	Guard *Guard
}

// tenants lists the managed tenants and holds, with Guard, those the round applies; release
// lets them go.
func (s *Syncer) tenants(ctx context.Context) (ts []Tenant, release func(), err error) {
	if s.Guard == nil {
		all, err := s.Tenants(ctx)
		if err != nil {
			return nil, func() {}, fmt.Errorf("list managed tenants: %w", err)
		}
		return all, func() {}, nil
	}
	mark, done := s.Guard.Mark()
	all, err := s.Tenants(ctx)
	if err != nil {
		done()
		return nil, func() {}, fmt.Errorf("list managed tenants: %w", err)
	}
	var releases []func()
	for _, t := range all {
		if r, ok := s.Guard.TryHold(t.User.Name, mark); ok {
			ts = append(ts, t)
			releases = append(releases, r)
		}
	}
	if n := len(all) - len(ts); n > 0 {
		logf.FromContext(ctx).V(1).Info("left tenants the namespace controller is changing to it", "count", n)
	}
	return ts, func() {
		for _, r := range releases {
			r()
		}
		done()
	}, nil
}

// ResyncAll checks and re-applies every user on the master and every replica; prefer is the
// Sentinel asked first for the node list.
func (s *Syncer) ResyncAll(ctx context.Context, prefer string) error {
	ts, release, err := s.tenants(ctx)
	defer release()
	if err != nil {
		return err
	}
	if s.Prover != nil {
		// A node that cannot be listed now is reported by Sync below.
		if nodes, err := s.Nodes.Discover(ctx, prefer); err == nil {
			s.Prover.Prove(ctx, nodes, ts, true)
		}
	}
	return s.record(ctx, ts, s.Nodes.Sync(ctx, prefer, "", Users(ts)))
}

// ResyncNode checks and re-applies every user on the node at addr, without asking Sentinel
// whether it is up yet: the caller just heard that it is.
func (s *Syncer) ResyncNode(ctx context.Context, _ string, addr string) error {
	ts, release, err := s.tenants(ctx)
	defer release()
	if err != nil {
		return err
	}
	node := acl.Node{Addr: addr, Role: acl.RoleReplica}
	// The address comes from a Sentinel's message: refuse it once, before the proof and the sync.
	if err := s.Nodes.Trust(ctx, node); err != nil {
		return err
	}
	if s.Prover != nil {
		s.Prover.Prove(ctx, []acl.Node{node}, ts, true)
	}
	r := s.Nodes.SyncNode(ctx, node, Users(ts))
	return s.record(ctx, ts, acl.Result{Nodes: []acl.NodeResult{r}})
}

// Users returns the ACL users of tenants.
func Users(ts []Tenant) []acl.User {
	out := make([]acl.User, len(ts))
	for i, t := range ts {
		out[i] = t.User
	}
	return out
}

// record counts healed users and per-tenant failures. It returns only node-wide failures: a
// tenant whose own user fails is counted, evented and retried next round, but does not make the
// round (and a failover's retry loop) fail for everyone.
func (s *Syncer) record(ctx context.Context, ts []Tenant, res acl.Result) error {
	healed := res.MissingUsers()
	metrics.SelfHealed.Add(float64(len(healed)))
	log := logf.FromContext(ctx)
	if len(healed) > 0 {
		log.Info("re-provisioned ACL users a node had lost", "count", len(healed))
	}
	if errs := res.UserErrors(); len(errs) > 0 {
		metrics.Errors.WithLabelValues(metrics.OpUpsert).Inc()
		for _, t := range ts {
			err, ok := errs[t.User.Name]
			if !ok {
				continue
			}
			metrics.UserErrors.WithLabelValues(t.Namespace).Inc()
			log.Error(err, "tenant ACL user not applied; the other tenants were", "namespace", t.Namespace, "user", t.User.Name)
			if s.Events != nil {
				s.Events.Eventf(Namespace(t.Namespace), nil, corev1.EventTypeWarning, ReasonUserFailed, "Resync",
					"Valkey ACL user %q was not applied: %v", t.User.Name, err)
			}
		}
	}
	if err := res.Err(); err != nil {
		metrics.Errors.WithLabelValues(metrics.OpUpsert).Inc()
		return err
	}
	return nil
}

// Namespace returns a reference object for recording an Event on the named namespace.
func Namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}
}

// Prover runs the isolation proof and keeps siteops_tenant_isolation_violations{node} current.
type Prover struct {
	// Nodes asks one node about its users.
	Nodes interface {
		ProveNode(ctx context.Context, node acl.Node, users []string) acl.ProofResult
	}
	// Events records a Warning on the namespace of every user found too powerful; nil records none.
	Events Recorder

	mu     sync.Mutex
	byNode map[string]map[string]int // node → user → allowed probes in the last proof
	last   map[string]NodeProof      // node → its last proof
	now    func() time.Time
}

// NodeProof is what the last isolation proof of one node found.
type NodeProof struct {
	// Node is the node's address.
	Node string
	// At is when the proof ran.
	At time.Time
	// Users is how many tenant users the proof checked.
	Users int
	// Violations counts, per user, the forbidden commands the node allowed (users found
	// allowed none are absent).
	Violations map[string]int
	// Err says why the node could not be asked; the counts are then those of an earlier proof.
	Err string
}

// Last returns each node's last proof, by address: what an operator's view shows.
func (p *Prover) Last() []NodeProof {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]NodeProof, 0, len(p.last))
	for _, np := range p.last {
		np.Violations = maps.Clone(np.Violations)
		out = append(out, np)
	}
	slices.SortFunc(out, func(a, b NodeProof) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// Prove checks every tenant on every node in parallel. With full, ts is every tenant and what
// an earlier proof found for other users of those nodes is forgotten; otherwise only the listed
// users' findings are replaced. It returns each node's result.
func (p *Prover) Prove(ctx context.Context, nodes []acl.Node, ts []Tenant, full bool) []acl.ProofResult {
	names := make([]string, 0, len(ts))
	nsOf := make(map[string]string, len(ts))
	for _, t := range ts {
		if t.User.Validate() != nil {
			continue
		}
		names = append(names, t.User.Name)
		nsOf[t.User.Name] = t.Namespace
	}
	slices.Sort(names)
	out := make([]acl.ProofResult, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { out[i] = p.Nodes.ProveNode(ctx, n, names) })
	}
	wg.Wait()
	log := logf.FromContext(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byNode == nil {
		p.byNode, p.last = map[string]map[string]int{}, map[string]NodeProof{}
	}
	now := time.Now()
	if p.now != nil {
		now = p.now()
	}
	for _, r := range out {
		if r.Err != nil {
			metrics.Errors.WithLabelValues(metrics.OpCheck).Inc()
			log.Error(r.Err, "isolation proof could not run on a node", "node", r.Node.Addr)
			np := p.last[r.Node.Addr]
			np.Node, np.At, np.Err = r.Node.Addr, now, "the node could not be asked"
			p.last[r.Node.Addr] = np
			continue
		}
		found := p.byNode[r.Node.Addr]
		if found == nil || full {
			found = map[string]int{}
		}
		for _, u := range names {
			delete(found, u)
		}
		probes := map[string][]string{}
		for _, v := range r.Violations {
			found[v.User]++
			probes[v.User] = append(probes[v.User], v.Probe)
		}
		p.byNode[r.Node.Addr] = found
		p.last[r.Node.Addr] = NodeProof{Node: r.Node.Addr, At: now, Users: len(names), Violations: maps.Clone(found)}
		total := 0
		for _, c := range found {
			total += c
		}
		metrics.IsolationViolations.WithLabelValues(r.Node.Addr).Set(float64(total))
		for u, list := range probes {
			log.Info("tenant ACL user is allowed forbidden commands", "node", r.Node.Addr, "user", u, "namespace", nsOf[u], "commands", list)
			if p.Events != nil {
				p.Events.Eventf(Namespace(nsOf[u]), nil, corev1.EventTypeWarning, ReasonIsolationViolation, "ProveIsolation",
					"Valkey node %s allowed user %q: %s. Its ACL rule differed from the one siteops applies (changed by hand or by another tool); siteops re-applies it now, find out who changed it",
					r.Node.Addr, u, strings.Join(list, ", "))
			}
		}
	}
	return out
}

// Periodic runs ResyncAll every Period, with up to JitterFactor of extra random delay so many
// operators (or restarts) do not hit the nodes in lockstep. It is a manager Runnable.
type Periodic struct {
	// Syncer does each round.
	Syncer *Syncer
	// Period is the time between rounds.
	Period time.Duration
	// JitterFactor adds up to Period*JitterFactor of random delay to each wait.
	JitterFactor float64
}

// NeedLeaderElection makes only the leader resync.
func (p *Periodic) NeedLeaderElection() bool { return true }

// Start resyncs on the period until ctx ends. A failed round is logged and counted; the next
// round comes on schedule.
func (p *Periodic) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("periodic-resync")
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		start := time.Now()
		if err := p.Syncer.ResyncAll(ctx, ""); err != nil {
			log.Error(err, "periodic ACL resync failed; the next round retries")
			return
		}
		log.V(1).Info("periodic ACL resync done", "took", time.Since(start))
	}, p.Period, p.JitterFactor, false)
	return nil
}
