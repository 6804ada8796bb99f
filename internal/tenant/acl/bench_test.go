package acl

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// BenchmarkFullResync measures one periodic resync round: 1000 tenants checked and re-applied
// on a master and two replicas. Goal: at most 2s per round.
func BenchmarkFullResync(b *testing.B) {
	set := testenv.SentinelSet(b, servers.SentinelSetOptions{Replicas: 2, Password: adminPassword})
	ns, err := New(Config{SentinelAddrs: set.SentinelAddrs(), MasterName: set.MasterName, Password: adminPassword})
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Close()
	users := make([]User, 1000)
	for i := range users {
		p, _ := NewPassword()
		users[i] = User{Name: "tenant-" + strconv.Itoa(i), Password: p}
	}
	ctx := context.Background()
	if err := ns.Upsert(ctx, users).Err(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		res := ns.Sync(ctx, "", "", users)
		if err := res.Err(); err != nil {
			b.Fatal(err)
		}
		if len(res.Nodes) != 3 {
			b.Fatalf("resync reached %d nodes, want 3", len(res.Nodes))
		}
	}
}

// BenchmarkIsolationProof measures one round's isolation proof: 1000 tenants, eight ACL DRYRUN
// probes each, on a master and two replicas in parallel (24 000 commands). Goal: well under the
// 2 s a whole resync round may take.
func BenchmarkIsolationProof(b *testing.B) {
	set := testenv.SentinelSet(b, servers.SentinelSetOptions{Replicas: 2, Password: adminPassword})
	ns, err := New(Config{SentinelAddrs: set.SentinelAddrs(), MasterName: set.MasterName, Password: adminPassword})
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Close()
	users := make([]User, 1000)
	names := make([]string, len(users))
	for i := range users {
		p, _ := NewPassword()
		users[i] = User{Name: "tenant-" + strconv.Itoa(i), Password: p}
		names[i] = users[i].Name
	}
	ctx := context.Background()
	if err := ns.Upsert(ctx, users).Err(); err != nil {
		b.Fatal(err)
	}
	nodes, err := ns.Discover(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		res := make([]ProofResult, len(nodes))
		var wg sync.WaitGroup
		for i, n := range nodes {
			wg.Go(func() { res[i] = ns.ProveNode(ctx, n, names) })
		}
		wg.Wait()
		for _, r := range res {
			if r.Err != nil || len(r.Violations) > 0 {
				b.Fatalf("proof on %s: %d violations, %v", r.Node.Addr, len(r.Violations), r.Err)
			}
		}
	}
}
