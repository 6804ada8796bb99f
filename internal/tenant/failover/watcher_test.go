package failover

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/metrics"
	"github.com/siteops/siteops/internal/tenant/resync"
	"github.com/siteops/siteops/internal/testenv"
)

const adminPassword = "admin-secret"

func init() { logf.SetLogger(logr.Discard()) }

type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) Inc() { c.n.Add(1) }

func users(n int) []acl.User {
	out := make([]acl.User, n)
	for i := range out {
		out[i] = acl.User{Name: "t" + strconv.Itoa(i), Password: "p" + strconv.Itoa(i)}
	}
	return out
}

// startWatcher runs a Watcher over set whose resyncer applies us, and waits for its subscriptions.
func startWatcher(t testing.TB, set *servers.SentinelSet, us []acl.User) (*acl.NodeSet, *atomicCounter) {
	t.Helper()
	return startWatcherConfig(t, set, acl.Config{SentinelAddrs: set.SentinelAddrs(), MasterName: set.MasterName, Password: adminPassword, Timeout: time.Second}, us)
}

// startWatcherConfig is startWatcher with the node set configured by cfg.
func startWatcherConfig(t testing.TB, set *servers.SentinelSet, cfg acl.Config, us []acl.User) (*acl.NodeSet, *atomicCounter) {
	t.Helper()
	ns, err := acl.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	c := &atomicCounter{}
	w := &Watcher{
		Sentinels: set.SentinelAddrs(), MasterName: set.MasterName, Client: ns.SentinelClient, Failovers: c,
		Resyncer: &resync.Syncer{Nodes: ns, Tenants: func(context.Context) ([]resync.Tenant, error) {
			ts := make([]resync.Tenant, len(us))
			for i, u := range us {
				ts[i] = resync.Tenant{Namespace: "sites-" + u.Name, User: u}
			}
			return ts, nil
		}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-w.Subscribed():
	case <-time.After(10 * time.Second):
		t.Fatal("watcher did not subscribe to the Sentinels")
	}
	return ns, c
}

// missingOn returns an error naming the first user the node at addr lacks.
func missingOn(ctx context.Context, addr string, us []acl.User) error {
	c := redis.NewClient(&redis.Options{Addr: addr, Password: adminPassword, MaxRetries: -1, Protocol: 2})
	defer c.Close()
	have, err := c.Do(ctx, "acl", "users").StringSlice()
	if err != nil {
		return fmt.Errorf("list users on %s: %w", addr, err)
	}
	present := map[string]bool{}
	for _, u := range have {
		present[u] = true
	}
	for _, u := range us {
		if !present[u.Name] {
			return fmt.Errorf("user %s missing on %s", u.Name, addr)
		}
	}
	return nil
}

// switchAnnouncements counts +switch-master messages from every Sentinel of set.
func switchAnnouncements(t testing.TB, set *servers.SentinelSet) *atomic.Int64 {
	var n atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, addr := range set.SentinelAddrs() {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
		ps := sc.Subscribe(ctx, ChannelSwitchMaster)
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ps.Close(); _ = sc.Close() })
		go func() {
			for range ps.Channel() {
				n.Add(1)
			}
		}()
	}
	return &n
}

func currentMaster(ctx context.Context, set *servers.SentinelSet) (string, error) {
	var lastErr error
	for _, s := range set.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		m, err := sc.GetMasterAddrByName(ctx, set.MasterName).Result()
		_ = sc.Close()
		if err == nil {
			return net.JoinHostPort(m[0], m[1]), nil
		}
		lastErr = err
	}
	return "", lastErr
}

func TestSentinelFailoverProvisionsNewMasterCountedOnce(t *testing.T) {
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: 1, Password: adminPassword})
	ctx := context.Background()
	us := users(50)
	ns, failovers := startWatcher(t, set, us)
	// Every Sentinel drops the watcher's subscription: it must come back by itself.
	for _, addr := range set.SentinelAddrs() {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
		kill := redis.NewIntCmd(ctx, "client", "kill", "type", "pubsub")
		if err := sc.Process(ctx, kill); err != nil || kill.Val() < 1 {
			t.Fatalf("drop subscriptions on %s: killed %d, %v", addr, kill.Val(), err)
		}
		_ = sc.Close()
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, addr := range set.SentinelAddrs() {
			sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
			cmd := redis.NewStringCmd(ctx, "client", "list", "type", "pubsub")
			err := sc.Process(ctx, cmd)
			_ = sc.Close()
			if err != nil {
				return err
			}
			if !strings.Contains(cmd.Val(), "sub=4") {
				return fmt.Errorf("sentinel %s has no subscriber yet: %q", addr, cmd.Val())
			}
		}
		return nil
	})
	announced := switchAnnouncements(t, set)
	// Only the master has the users: the watcher, not the earlier provisioning, must bring them to
	// the replica that gets promoted.
	if r := ns.UpsertNode(ctx, acl.Node{Addr: set.Master.Addr}, us); r.Err != nil {
		t.Fatal(r.Err)
	}
	if missingOn(ctx, set.Replicas[0].Addr, us) == nil {
		t.Fatal("replica has the users before the failover; the test proves nothing")
	}
	start := time.Now()
	sc := redis.NewSentinelClient(&redis.Options{Addr: set.Sentinels[1].Addr})
	defer sc.Close()
	if err := sc.Failover(ctx, set.MasterName).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		m, err := currentMaster(ctx, set)
		if err != nil {
			return err
		}
		if m != set.Replicas[0].Addr {
			return fmt.Errorf("master is still %s", m)
		}
		return missingOn(ctx, m, us)
	})
	t.Logf("every user on the new master %v after SENTINEL FAILOVER", time.Since(start))
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := announced.Load(); n < 3 {
			return fmt.Errorf("%d Sentinels announced the switch", n)
		}
		return nil
	})
	if n := failovers.n.Load(); n != 1 {
		t.Fatalf("failover counted %d times after %d announcements, want 1", n, announced.Load())
	}
	// The demoted master keeps its users: ACLs are per node and survive a role change.
	testenv.Eventually(t, 10*time.Second, func() error { return missingOn(ctx, set.Master.Addr, us) })
}

func TestKilledMasterRestartedWithoutPersistenceIsReprovisioned(t *testing.T) {
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: 1, Password: adminPassword, DownAfter: 500 * time.Millisecond})
	ctx := context.Background()
	us := users(50)
	ns, failovers := startWatcher(t, set, us)
	if err := ns.Upsert(ctx, us).Err(); err != nil {
		t.Fatal(err)
	}
	healedBefore := testutil.ToFloat64(metrics.SelfHealed)
	// The first Sentinel is gone: the watch must not depend on the first address.
	if err := set.Sentinels[0].Kill(); err != nil {
		t.Fatal(err)
	}
	old := set.Master
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		m, err := currentMaster(ctx, set)
		if err != nil {
			return err
		}
		if m != set.Replicas[0].Addr {
			return fmt.Errorf("master is still %s", m)
		}
		if failovers.n.Load() != 1 {
			return fmt.Errorf("failovers counted: %d", failovers.n.Load())
		}
		return missingOn(ctx, m, us)
	})
	// Restart the old master on its port as a replica of the new one, with an empty data folder:
	// it comes back without any ACL user.
	restarted, err := servers.StartRedis(ctx, servers.RedisOptions{
		Dir: filepath.Join(t.TempDir(), "restarted"), Port: old.Port(), ReplicaOf: set.Replicas[0].Addr, Password: adminPassword,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = restarted.Stop() })
	testenv.Eventually(t, 30*time.Second, func() error { return missingOn(ctx, restarted.Addr, us) })
	if healed := testutil.ToFloat64(metrics.SelfHealed) - healedBefore; healed < float64(len(us)) {
		t.Fatalf("self-healed counter rose by %v, want at least %d", healed, len(us))
	}
	// The re-provisioned node accepts the tenants' passwords.
	c := redis.NewClient(&redis.Options{Addr: restarted.Addr, Username: us[3].Name, Password: us[3].Password})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("tenant AUTH on the restarted node: %v", err)
	}
}
