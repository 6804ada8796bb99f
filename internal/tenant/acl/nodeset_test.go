package acl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

const adminPassword = "admin-secret"

func newSet(t *testing.T, replicas int) (*servers.SentinelSet, *NodeSet) {
	t.Helper()
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: replicas, Password: adminPassword})
	ns, err := New(Config{SentinelAddrs: set.SentinelAddrs(), MasterName: set.MasterName, Password: adminPassword})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	return set, ns
}

func tenantClient(t *testing.T, addr, user, pass string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: pass, MaxRetries: -1, Protocol: 2})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func isNoPerm(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOPERM") }

func TestUpsertIsolatesTenantsOnEveryNode(t *testing.T) {
	set, ns := newSet(t, 1)
	ctx := context.Background()
	a := User{Name: "loja", Password: "pa"}
	b := User{Name: "outra", Password: "pb"}
	res := ns.Upsert(ctx, []User{a, b})
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if len(res.Nodes) != 2 {
		t.Fatalf("upsert reached %d nodes, want master and replica: %+v", len(res.Nodes), res.Nodes)
	}
	// The master is writable: data commands on the tenant's own keys work.
	ca := tenantClient(t, set.Master.Addr, "loja", "pa")
	if err := ca.Set(ctx, "loja:k", "v", 0).Err(); err != nil {
		t.Fatalf("tenant SET own key: %v", err)
	}
	if err := ca.Set(ctx, "lock:loja:x", "1", time.Minute).Err(); err != nil {
		t.Fatalf("tenant SET own lock: %v", err)
	}
	for name, err := range map[string]error{
		"INCR":   ca.Incr(ctx, "loja:n").Err(),
		"EXPIRE": ca.Expire(ctx, "loja:k", time.Hour).Err(),
		"TTL":    ca.TTL(ctx, "loja:k").Err(),
		"HSET":   ca.HSet(ctx, "loja:h", "f", "v").Err(),
		"DEL":    ca.Del(ctx, "loja:n").Err(),
		"PING":   ca.Ping(ctx).Err(),
		"EXISTS": ca.Exists(ctx, "loja:k").Err(),
	} {
		if err != nil {
			t.Errorf("tenant %s on own keys: %v", name, err)
		}
	}
	cb := tenantClient(t, set.Master.Addr, "outra", "pb")
	if err := cb.Set(ctx, "outra:k", "secret-b", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := ca.Get(ctx, "outra:k").Err(); !isNoPerm(err) {
		t.Errorf("tenant A GET tenant B key: %v, want NOPERM", err)
	}
	if err := ca.Set(ctx, "outra:k", "x", 0).Err(); !isNoPerm(err) {
		t.Errorf("tenant A SET tenant B key: %v, want NOPERM", err)
	}
	if err := ca.Set(ctx, "lock:outra:x", "x", 0).Err(); !isNoPerm(err) {
		t.Errorf("tenant A SET tenant B lock: %v, want NOPERM", err)
	}
	denied := map[string][]any{
		"FLUSHALL":  {"flushall"},
		"FLUSHDB":   {"flushdb"},
		"KEYS":      {"keys", "*"},
		"SCAN":      {"scan", "0"},
		"RANDOMKEY": {"randomkey"},
		"CONFIG":    {"config", "get", "*"},
		"DBSIZE":    {"dbsize"},
		"SUBSCRIBE": {"publish", "loja:c", "x"},
		"EVAL":      {"eval", "return redis.call('flushall')", "0"},
		"ACL":       {"acl", "list"},
		"SHUTDOWN":  {"shutdown", "nosave"},
		"MONITOR":   {"monitor"},
	}
	for name, cmd := range denied {
		if err := ca.Do(ctx, cmd...).Err(); !isNoPerm(err) {
			t.Errorf("tenant %s: %v, want NOPERM", name, err)
		}
	}
	// DEBUG is refused by the server's own switch before ACLs are consulted; ask the ACL itself.
	admin := redis.NewClient(&redis.Options{Addr: set.Master.Addr, Password: adminPassword})
	defer admin.Close()
	for _, cmd := range [][]any{{"debug", "sleep", "0"}, {"config", "set", "maxmemory", "1"}, {"flushall"}, {"keys", "*"}} {
		res, err := admin.Do(ctx, append([]any{"acl", "dryrun", "loja"}, cmd...)...).Text()
		if err != nil || !strings.Contains(res, "no permissions") {
			t.Errorf("ACL DRYRUN loja %v = %q, %v; want refused", cmd, res, err)
		}
	}
	if n, err := cb.Exists(ctx, "outra:k").Result(); err != nil || n != 1 {
		t.Fatalf("tenant B's key after tenant A's attempts: %d %v", n, err)
	}
	// The replica has the same users even though ACL commands are not replicated.
	ra := tenantClient(t, set.Replicas[0].Addr, "loja", "pa")
	testenv.Eventually(t, 5*time.Second, func() error { return ra.Get(ctx, "loja:k").Err() })
	if err := ra.Get(ctx, "outra:k").Err(); !isNoPerm(err) {
		t.Errorf("tenant A GET tenant B key on the replica: %v, want NOPERM", err)
	}
	if err := ra.Do(ctx, "scan", "0").Err(); !isNoPerm(err) {
		t.Errorf("tenant SCAN on the replica: %v, want NOPERM", err)
	}
	if err := tenantClient(t, set.Replicas[0].Addr, "loja", "wrong").Ping(ctx).Err(); err == nil {
		t.Error("wrong password accepted")
	}
}

func TestRetiredPasswordStaysValidUntilDropped(t *testing.T) {
	set, ns := newSet(t, 1)
	ctx := context.Background()
	if err := ns.Upsert(ctx, []User{{Name: "t1", Password: "old"}}).Err(); err != nil {
		t.Fatal(err)
	}
	rotated := User{Name: "t1", Password: "new", RetiredHashes: []string{HashPassword("old")}}
	if err := ns.Upsert(ctx, []User{rotated}).Err(); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{set.Master.Addr, set.Replicas[0].Addr} {
		for _, p := range []string{"old", "new"} {
			if err := tenantClient(t, addr, "t1", p).Ping(ctx).Err(); err != nil {
				t.Errorf("%s password %q during rotation: %v", addr, p, err)
			}
		}
	}
	if err := ns.Check(ctx, []User{rotated}).Err(); err != nil {
		t.Fatal(err)
	}
	if m := ns.Check(ctx, []User{rotated}).MissingUsers(); len(m) != 0 {
		t.Fatalf("check after rotation reports drift: %v", m)
	}
	done := User{Name: "t1", Password: "new"}
	if m := ns.Check(ctx, []User{done}).MissingUsers(); !slices.Equal(m, []string{"t1"}) {
		t.Fatalf("check must report the extra password as drift, got %v", m)
	}
	if err := ns.Upsert(ctx, []User{done}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := tenantClient(t, set.Master.Addr, "t1", "old").Ping(ctx).Err(); err == nil {
		t.Error("old password still accepted after the rotation finished")
	}
	h, err := ns.PasswordHashes(ctx, set.Master.Addr, "t1")
	if err != nil || !slices.Equal(h, []string{HashPassword("new")}) {
		t.Fatalf("PasswordHashes = %v, %v", h, err)
	}
	if h, err := ns.PasswordHashes(ctx, set.Master.Addr, "nobody"); err != nil || h != nil {
		t.Fatalf("PasswordHashes of a missing user = %v, %v", h, err)
	}
}

func TestSyncReportsMissingAndDeleteRemoves(t *testing.T) {
	set, ns := newSet(t, 1)
	ctx := context.Background()
	users := []User{{Name: "a", Password: "1"}, {Name: "b", Password: "2"}}
	res := ns.Sync(ctx, "", "", users)
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	for _, n := range res.Nodes {
		if !slices.Equal(n.Missing, []string{"a", "b"}) {
			t.Errorf("first sync on %s reported missing %v", n.Node.Addr, n.Missing)
		}
	}
	// Lose one user on the replica only, as a restarted node without persistence would.
	admin := redis.NewClient(&redis.Options{Addr: set.Replicas[0].Addr, Password: adminPassword})
	defer admin.Close()
	if err := admin.Do(ctx, "acl", "deluser", "b").Err(); err != nil {
		t.Fatal(err)
	}
	res = ns.Sync(ctx, "", set.Replicas[0].Addr, users)
	if err := res.Err(); err != nil || !slices.Equal(res.MissingUsers(), []string{"b"}) {
		t.Fatalf("node sync: missing %v err %v", res.MissingUsers(), err)
	}
	if err := ns.Delete(ctx, []string{"a", "b", "never-existed"}).Err(); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{set.Master.Addr, set.Replicas[0].Addr} {
		if h, err := ns.PasswordHashes(ctx, addr, "a"); err != nil || h != nil {
			t.Errorf("user a on %s after delete: %v %v", addr, h, err)
		}
	}
}

func TestDownReplicaIsSkippedAndErrorsArePerNode(t *testing.T) {
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: 2, Password: adminPassword, DownAfter: 500 * time.Millisecond})
	ctx := context.Background()
	ns, err := New(Config{SentinelAddrs: set.SentinelAddrs(), MasterName: set.MasterName, Password: adminPassword, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := set.Replicas[1].Kill(); err != nil {
		t.Fatal(err)
	}
	// Before Sentinel flags it, the dead replica is a per-node error; the others still get the user.
	res := ns.Upsert(ctx, []User{{Name: "x", Password: "p"}})
	var ne *NodeError
	if err := res.Err(); err != nil {
		if !errors.As(err, &ne) || ne.Node.Addr != set.Replicas[1].Addr {
			t.Fatalf("error not attributed to the dead replica: %v", err)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		nodes, err := ns.Discover(ctx, "")
		if err != nil {
			return err
		}
		if slices.ContainsFunc(nodes, func(n Node) bool { return n.Addr == set.Replicas[1].Addr }) {
			return fmt.Errorf("down replica still listed: %v", nodes)
		}
		if len(nodes) != 2 {
			return fmt.Errorf("nodes %v", nodes)
		}
		return nil
	})
	if err := ns.Upsert(ctx, []User{{Name: "x", Password: "p"}}).Err(); err != nil {
		t.Fatalf("upsert with a down replica flagged by Sentinel: %v", err)
	}
	// One dead Sentinel does not stop discovery.
	if err := set.Sentinels[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Discover(ctx, set.Sentinels[0].Addr); err != nil {
		t.Fatalf("discover with the first Sentinel down: %v", err)
	}
}

func TestDirectURL(t *testing.T) {
	r := testenv.Redis(t, servers.RedisOptions{Password: adminPassword})
	ns, err := New(Config{URL: "redis://:" + adminPassword + "@" + r.Addr + "/0"})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ctx := context.Background()
	if err := ns.Upsert(ctx, []User{{Name: "d", Password: "p"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := tenantClient(t, r.Addr, "d", "p").Set(ctx, "d:k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
}
