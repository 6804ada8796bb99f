package acl

import (
	"context"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestProveNodeFindsAWidenedRule(t *testing.T) {
	set, ns := newSet(t, 0)
	ctx := context.Background()
	users := []User{{Name: "loja", Password: "pa"}, {Name: "outra", Password: "pb"}}
	if err := ns.Upsert(ctx, users).Err(); err != nil {
		t.Fatal(err)
	}
	node := Node{Addr: set.Master.Addr, Role: RoleMaster}
	r := ns.ProveNode(ctx, node, []string{"loja", "outra", "never-provisioned"})
	if r.Err != nil || len(r.Violations) != 0 {
		t.Fatalf("proof of siteops' own rule: %+v", r)
	}
	c := redis.NewClient(&redis.Options{Addr: set.Master.Addr, Password: adminPassword, Protocol: 2})
	defer c.Close()
	// Only the cross-tenant key access is widened: the probes must notice a subtle change too.
	if err := c.Do(ctx, "acl", "setuser", "outra", "~loja:*").Err(); err != nil {
		t.Fatal(err)
	}
	r = ns.ProveNode(ctx, node, []string{"loja", "outra"})
	var got []string
	for _, v := range r.Violations {
		if v.User != "outra" {
			t.Errorf("violation blamed on %s", v.User)
		}
		got = append(got, v.Probe)
	}
	if want := []string{"GET of another tenant's key", "SET of another tenant's key"}; !slices.Equal(got, want) {
		t.Fatalf("violations %v, want %v", got, want)
	}
	if err := c.Do(ctx, "acl", "setuser", "loja", "+@all", "~*", "allchannels").Err(); err != nil {
		t.Fatal(err)
	}
	r = ns.ProveNode(ctx, node, []string{"loja", "outra"})
	n := 0
	for _, v := range r.Violations {
		if v.User == "loja" {
			n++
		}
	}
	if n != len(Probes("x")) {
		t.Fatalf("+@all ~* allchannels: %d of %d probes reported: %+v", n, len(Probes("x")), r.Violations)
	}
}

func TestSyncNodeReportsEachUser(t *testing.T) {
	set, ns := newSet(t, 0)
	ctx := context.Background()
	users := []User{
		{Name: "first", Password: "p1"},
		{Name: "bad", Password: "p2", RetiredHashes: []string{"garbage"}},
		{Name: "Bad Name", Password: "p3"},
		{Name: "last", Password: "p4"},
	}
	r := ns.SyncNode(ctx, Node{Addr: set.Master.Addr, Role: RoleMaster}, users)
	if r.Err != nil {
		t.Fatalf("node error for per-user problems: %v", r.Err)
	}
	if len(r.UserErrs) != 2 || r.UserErrs["bad"] == nil || r.UserErrs["Bad Name"] == nil {
		t.Fatalf("user errors %v", r.UserErrs)
	}
	if !slices.Equal(r.Missing, []string{"first", "last"}) {
		t.Fatalf("missing %v", r.Missing)
	}
	res := Result{Nodes: []NodeResult{r}}
	if res.Err() != nil || len(res.UserErrors()) != 2 {
		t.Fatalf("Result: err %v, user errors %v", res.Err(), res.UserErrors())
	}
}

// TestProveNodeFindsTracking: a rule that allows CLIENT TRACKING lets its user learn every key
// name written on the node; the proof must flag it although the key patterns are untouched.
func TestProveNodeFindsTracking(t *testing.T) {
	set, ns := newSet(t, 0)
	ctx := context.Background()
	if err := ns.Upsert(ctx, []User{{Name: "loja", Password: "pa"}, {Name: "outra", Password: "pb"}}).Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: set.Master.Addr, Password: adminPassword, Protocol: 2})
	defer c.Close()
	if err := c.Do(ctx, "acl", "setuser", "loja", "+client|tracking").Err(); err != nil {
		t.Fatal(err)
	}
	r := ns.ProveNode(ctx, Node{Addr: set.Master.Addr, Role: RoleMaster}, []string{"loja", "outra"})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if want := []Violation{{User: "loja", Probe: "CLIENT TRACKING"}}; !slices.Equal(r.Violations, want) {
		t.Fatalf("violations %+v, want %+v", r.Violations, want)
	}
}
