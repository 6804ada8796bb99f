package resync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/tenant/acl"
)

// answers is a node asker that returns, per node address, a fixed result.
type answers map[string]acl.ProofResult

func (a answers) ProveNode(_ context.Context, n acl.Node, _ []string) acl.ProofResult {
	r := a[n.Addr]
	r.Node = n
	return r
}

func TestProverKeepsEachNodesLastProof(t *testing.T) {
	nodes := []acl.Node{{Addr: "10.0.0.2:6379"}, {Addr: "10.0.0.1:6379"}}
	tenants := []Tenant{
		{Namespace: "shop", User: acl.User{Name: "shop", Password: "x"}},
		{Namespace: "blog", User: acl.User{Name: "blog", Password: "y"}},
	}
	clock := time.Unix(1000, 0)
	p := &Prover{Nodes: answers{"10.0.0.1:6379": {Violations: []acl.Violation{{User: "blog", Probe: "KEYS"}, {User: "blog", Probe: "SCAN"}}}},
		now: func() time.Time { return clock }}
	p.Prove(context.Background(), nodes, tenants, true)

	last := p.Last()
	if len(last) != 2 || last[0].Node != "10.0.0.1:6379" || last[1].Node != "10.0.0.2:6379" {
		t.Fatalf("proofs %+v, want both nodes by address", last)
	}
	if last[0].Users != 2 || last[0].Violations["blog"] != 2 || len(last[0].Violations) != 1 || !last[0].At.Equal(clock) {
		t.Errorf("node 1: %+v, want 2 users checked and blog allowed 2 forbidden commands", last[0])
	}
	if len(last[1].Violations) != 0 || last[1].Err != "" {
		t.Errorf("node 2: %+v, want a clean proof", last[1])
	}
	// A copy: what a view holds never changes the prover's state.
	last[0].Violations["blog"] = 0

	// The next round cannot reach node 1: its last findings stay, with the failure and its time.
	clock = clock.Add(time.Minute)
	p.Nodes = answers{"10.0.0.1:6379": {Err: errors.New("connection refused")}}
	p.Prove(context.Background(), nodes, tenants, true)
	last = p.Last()
	if last[0].Err == "" || last[0].Violations["blog"] != 2 || !last[0].At.Equal(clock) {
		t.Errorf("node 1 after a failed round: %+v, want the error, the earlier findings and the new time", last[0])
	}
}
