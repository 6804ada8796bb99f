// Package resync re-applies every managed tenant's ACL user on the Valkey nodes: after a Sentinel
// failover, when a node restarts, and on a jittered period, counting users a node had lost.
package resync

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/metrics"
)

// UserLister returns the users that should exist, with their current passwords.
type UserLister func(ctx context.Context) ([]acl.User, error)

// Syncer applies every listed user on every node in one pipeline per node.
type Syncer struct {
	// Nodes reaches the Valkey nodes.
	Nodes *acl.NodeSet
	// Users lists the managed tenants.
	Users UserLister
}

// ResyncAll checks and re-applies every user on the master and every replica; prefer is the
// Sentinel asked first for the node list.
func (s *Syncer) ResyncAll(ctx context.Context, prefer string) error {
	users, err := s.Users(ctx)
	if err != nil {
		return fmt.Errorf("list managed tenants: %w", err)
	}
	return s.record(ctx, s.Nodes.Sync(ctx, prefer, "", users))
}

// ResyncNode checks and re-applies every user on the node at addr, without asking Sentinel
// whether it is up yet: the caller just heard that it is.
func (s *Syncer) ResyncNode(ctx context.Context, _ string, addr string) error {
	users, err := s.Users(ctx)
	if err != nil {
		return fmt.Errorf("list managed tenants: %w", err)
	}
	r := s.Nodes.SyncNode(ctx, acl.Node{Addr: addr, Role: acl.RoleReplica}, users)
	return s.record(ctx, acl.Result{Nodes: []acl.NodeResult{r}})
}

func (s *Syncer) record(ctx context.Context, res acl.Result) error {
	healed := res.MissingUsers()
	metrics.SelfHealed.Add(float64(len(healed)))
	if len(healed) > 0 {
		logf.FromContext(ctx).Info("re-provisioned ACL users a node had lost", "count", len(healed))
	}
	if err := res.Err(); err != nil {
		metrics.Errors.WithLabelValues(metrics.OpUpsert).Inc()
		return err
	}
	return nil
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
