package failover

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/metrics"
	"github.com/siteops/siteops/internal/tenant/resync"
	"github.com/siteops/siteops/internal/testenv"
)

// eventLog keeps the Events recorded through it, as the API server would store them.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, eventtype+" "+reason+": "+fmt.Sprintf(note, args...))
}

func (l *eventLog) find(substr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.events, func(e string) bool { return strings.Contains(e, substr) })
}

// fakeNode is a redis-server standing in for a tenant's pod that answers as a Valkey master; it
// records every command it receives with MONITOR.
type fakeNode struct {
	*servers.Process
	mu    sync.Mutex
	lines []string
}

func startFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	f := &fakeNode{Process: testenv.Redis(t, servers.RedisOptions{})}
	// MONITOR on a plain connection: each command the node runs arrives as one status line.
	conn, err := net.Dial("tcp", f.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(conn)
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			f.mu.Lock()
			f.lines = append(f.lines, sc.Text())
			f.mu.Unlock()
		}
	}()
	probe := redis.NewClient(&redis.Options{Addr: f.Addr})
	defer probe.Close()
	// MONITOR is on once a command shows up in it.
	testenv.Eventually(t, 5*time.Second, func() error {
		_ = probe.Echo(context.Background(), "monitor-ready").Err()
		if !f.saw("monitor-ready") {
			return errors.New("MONITOR has not shown a command yet")
		}
		return nil
	})
	return f
}

func (f *fakeNode) saw(substr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.ContainsFunc(f.lines, func(l string) bool { return strings.Contains(l, substr) })
}

var quoted = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)

// learned returns every argument of AUTH, HELLO and ACL commands the fake node received: what a
// tenant's pod would have kept.
func (f *fakeNode) learned() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, l := range f.lines {
		args := quoted.FindAllStringSubmatch(l, -1)
		if len(args) == 0 {
			continue
		}
		switch strings.ToLower(args[0][1]) {
		case "auth", "hello", "acl":
			for _, a := range args[1:] {
				out = append(out, strings.TrimLeft(a[1], "><#"))
			}
		}
	}
	return out
}

// assertLearnedNothing checks that the fake node got no AUTH, no HELLO with credentials and no
// ACL command (whatever MONITOR redacts, commandstats counts), no secret in any command, and no tenant user; and that
// nothing it saw logs in on the real master.
func (f *fakeNode) assertLearnedNothing(t *testing.T, master string, us []acl.User) {
	t.Helper()
	ctx := context.Background()
	for cmd, n := range testenv.RedisCommands(t, f.Addr) {
		if cmd == "auth" || strings.HasPrefix(cmd, "acl") {
			t.Errorf("the fake node received %s %d times", cmd, n)
		}
	}
	// The test's own clients say HELLO without credentials; a HELLO with AUTH would be a login.
	f.mu.Lock()
	for _, l := range f.lines {
		if low := strings.ToLower(l); strings.Contains(low, `"hello"`) && strings.Contains(low, `"auth"`) {
			t.Errorf("the fake node received a HELLO with credentials: %s", l)
		}
	}
	f.mu.Unlock()
	secrets := []string{adminPassword}
	for _, u := range us {
		secrets = append(secrets, u.Password)
	}
	for _, s := range secrets {
		if f.saw(s) {
			t.Errorf("the fake node saw the secret %q", s)
		}
	}
	c := redis.NewClient(&redis.Options{Addr: f.Addr})
	defer c.Close()
	if have, err := c.Do(ctx, "acl", "users").StringSlice(); err != nil || !slices.Equal(have, []string{"default"}) {
		t.Errorf("ACL USERS on the fake node = %v, %v; want only default", have, err)
	}
	for _, p := range f.learned() {
		for _, user := range append([]string{"default"}, names(us)...) {
			rc := redis.NewClient(&redis.Options{Addr: master, Username: user, Password: p, MaxRetries: -1})
			if rc.Ping(ctx).Err() == nil {
				t.Errorf("what the fake node received (%q) logs in as %s on the real master", p, user)
			}
			_ = rc.Close()
		}
	}
}

func names(us []acl.User) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.Name
	}
	return out
}

// repoint does what anyone who reaches an unauthenticated Sentinel can: forget the real master
// and monitor the fake node under the same name.
func repoint(t *testing.T, sentinel, master string, fake *fakeNode) {
	t.Helper()
	ctx := context.Background()
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel, MaxRetries: -1})
	defer sc.Close()
	if err := sc.Remove(ctx, master).Err(); err != nil {
		t.Fatalf("SENTINEL REMOVE on %s: %v", sentinel, err)
	}
	if err := sc.Monitor(ctx, master, fake.Host(), fmt.Sprint(fake.Port()), "2").Err(); err != nil {
		t.Fatalf("SENTINEL MONITOR on %s: %v", sentinel, err)
	}
	m, err := sc.GetMasterAddrByName(ctx, master).Result()
	if err != nil || net.JoinHostPort(m[0], m[1]) != fake.Addr {
		t.Fatalf("Sentinel %s reports master %v, %v after the re-pointing", sentinel, m, err)
	}
}

func masterOf(ctx context.Context, sentinel, name string) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel, MaxRetries: -1})
	defer sc.Close()
	m, err := sc.GetMasterAddrByName(ctx, name).Result()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(m[0], m[1]), nil
}

func authOn(ctx context.Context, addr string, u acl.User) error {
	c := redis.NewClient(&redis.Options{Addr: addr, Username: u.Name, Password: u.Password, MaxRetries: -1})
	defer c.Close()
	return c.Ping(ctx).Err()
}

func untrustedCount(addr string) float64 {
	return testutil.ToFloat64(metrics.UntrustedNodes.WithLabelValues(addr))
}

// TestRepointedSentinelGetsNoPassword: a tenant re-points the Sentinels (unauthenticated, as
// many are) at its own pod. The next passwords the operator issues must not reach that pod, nor
// must the admin AUTH; while one Sentinel still tells the truth provisioning goes on through it,
// and a real failover still brings every user to every node.
func TestRepointedSentinelGetsNoPassword(t *testing.T) {
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: 1, Password: adminPassword})
	ctx := context.Background()
	events := &eventLog{}
	reporter := &resync.UntrustedReporter{Events: events, Namespace: "siteops-system"}
	us := users(20)
	ns, _ := startWatcherConfig(t, set, acl.Config{
		SentinelAddrs: set.SentinelAddrs(), MasterName: set.MasterName, Password: adminPassword, Timeout: time.Second,
		// Loopback is what the test's nodes listen on; a platform lists its Valkey pods.
		AllowedNodes: []string{set.Master.Addr, set.Replicas[0].Addr}, OnUntrusted: reporter.Report,
	}, us)
	if err := ns.Upsert(ctx, us).Err(); err != nil {
		t.Fatal(err)
	}
	fake := startFakeNode(t)
	repoint(t, set.Sentinels[0].Addr, set.MasterName, fake)

	// A new tenant gets its password while the first Sentinel (asked first) lies.
	newTenant := acl.User{Name: "newtenant", Password: "new-tenant-clear-password"}
	all := append(slices.Clone(us), newTenant)
	if err := ns.Upsert(ctx, []acl.User{newTenant}).Err(); err != nil {
		t.Fatalf("provisioning with one re-pointed Sentinel: %v", err)
	}
	for _, addr := range []string{set.Master.Addr, set.Replicas[0].Addr} {
		if err := authOn(ctx, addr, newTenant); err != nil {
			t.Errorf("new tenant on %s: %v", addr, err)
		}
	}
	// A resync that asks the lying Sentinel first, as after its announcement.
	if err := ns.Sync(ctx, set.Sentinels[0].Addr, "", all).Err(); err != nil {
		t.Fatalf("resync preferring the re-pointed Sentinel: %v", err)
	}
	if n := untrustedCount(fake.Addr); n < 1 {
		t.Errorf("siteops_tenant_untrusted_node_total{node=%q} = %v, want at least 1", fake.Addr, n)
	}
	if !events.find("Warning " + resync.ReasonUntrustedNode + ": A Sentinel reports Valkey master " + fake.Addr) {
		t.Errorf("no %s Warning Event naming %s: %q", resync.ReasonUntrustedNode, fake.Addr, events.events)
	}

	// A real failover, through the Sentinels that were not re-pointed.
	sc := redis.NewSentinelClient(&redis.Options{Addr: set.Sentinels[1].Addr})
	defer sc.Close()
	if err := sc.Failover(ctx, set.MasterName).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		m, err := masterOf(ctx, set.Sentinels[1].Addr, set.MasterName)
		if err != nil {
			return err
		}
		if m != set.Replicas[0].Addr {
			return fmt.Errorf("master is still %s", m)
		}
		for _, addr := range []string{set.Replicas[0].Addr, set.Master.Addr} {
			if err := missingOn(ctx, addr, all); err != nil {
				return err
			}
		}
		return nil
	})
	if err := authOn(ctx, set.Replicas[0].Addr, newTenant); err != nil {
		t.Errorf("new tenant on the promoted master: %v", err)
	}

	// Every Sentinel lies now: the next password has nowhere to go, and is refused, not sent.
	for _, s := range set.Sentinels[1:] {
		repoint(t, s.Addr, set.MasterName, fake)
	}
	late := acl.User{Name: "latetenant", Password: "late-tenant-clear-password"}
	res := ns.Upsert(ctx, []acl.User{late})
	var untrusted *acl.UntrustedNodeError
	if err := res.Err(); !errors.As(err, &untrusted) || untrusted.Node.Addr != fake.Addr {
		t.Fatalf("provisioning with every Sentinel re-pointed: %v, want the fake master refused", err)
	}
	fake.assertLearnedNothing(t, set.Replicas[0].Addr, append(all, late))
}

// TestRepointedSentinelRefusedWithoutAllowList: with no --valkey-allowed-nodes the nodes the
// Sentinels reported first are the trusted ones; a master they report later is refused.
func TestRepointedSentinelRefusedWithoutAllowList(t *testing.T) {
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: 1, Password: adminPassword})
	ctx := context.Background()
	events := &eventLog{}
	reporter := &resync.UntrustedReporter{Events: events, Namespace: "siteops-system"}
	ns, err := acl.New(acl.Config{
		SentinelAddrs: set.SentinelAddrs(), MasterName: set.MasterName, Password: adminPassword, Timeout: time.Second,
		OnUntrusted: reporter.Report,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	us := users(3)
	if err := ns.Upsert(ctx, us).Err(); err != nil {
		t.Fatal(err)
	}
	pinned := ns.AllowList().Pinned()
	slices.Sort(pinned)
	want := []string{set.Master.Addr, set.Replicas[0].Addr}
	slices.Sort(want)
	if !slices.Equal(pinned, want) {
		t.Fatalf("trusted nodes %v, want the master and replica the Sentinels reported %v", pinned, want)
	}
	fake := startFakeNode(t)
	for _, s := range set.Sentinels {
		repoint(t, s.Addr, set.MasterName, fake)
	}
	lost := acl.User{Name: us[1].Name, Password: "reissued-after-a-lost-secret"}
	var untrusted *acl.UntrustedNodeError
	if err := ns.Upsert(ctx, []acl.User{lost}).Err(); !errors.As(err, &untrusted) {
		t.Errorf("provisioning through re-pointed Sentinels: %v, want the fake master refused", err)
	}
	if !events.find(resync.ReasonUntrustedNode) || untrustedCount(fake.Addr) < 1 {
		t.Errorf("refusal not reported: events %q, metric %v", events.events, untrustedCount(fake.Addr))
	}
	fake.assertLearnedNothing(t, set.Master.Addr, append(us, lost))
}

// TestAuthenticatedSentinels: with requirepass on the Sentinels, a client without the password
// cannot re-point them, and the watcher and discovery reach every Sentinel with it: a failover
// announced by the second Sentinel (the first is gone) provisions every user on the new master.
func TestAuthenticatedSentinels(t *testing.T) {
	const sentinelPassword = "sentinel-secret"
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: 1, Password: adminPassword, SentinelPassword: sentinelPassword})
	ctx := context.Background()
	for _, s := range set.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		err := sc.Remove(ctx, set.MasterName).Err()
		_ = sc.Close()
		if err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Fatalf("SENTINEL REMOVE without the password on %s: %v, want NOAUTH", s.Addr, err)
		}
	}
	us := users(20)
	ns, failovers := startWatcherConfig(t, set, acl.Config{
		SentinelAddrs: set.SentinelAddrs(), MasterName: set.MasterName, SentinelPassword: sentinelPassword,
		Password: adminPassword, Timeout: time.Second, AllowedNodes: []string{"127.0.0.0/8"},
	}, us)
	if r := ns.UpsertNode(ctx, acl.Node{Addr: set.Master.Addr, Role: acl.RoleMaster}, us); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := set.Sentinels[0].Kill(); err != nil {
		t.Fatal(err)
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: set.Sentinels[1].Addr, Password: sentinelPassword})
	defer sc.Close()
	if err := sc.Failover(ctx, set.MasterName).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if failovers.n.Load() != 1 {
			return fmt.Errorf("failovers counted: %d", failovers.n.Load())
		}
		return missingOn(ctx, set.Replicas[0].Addr, us)
	})
	nodes, err := ns.Discover(ctx, "")
	if err != nil || nodes[0].Addr != set.Replicas[0].Addr {
		t.Fatalf("discovery through authenticated Sentinels: %v, %v", nodes, err)
	}
}
