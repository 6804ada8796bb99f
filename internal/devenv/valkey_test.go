package devenv

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/settings"
)

// TestDevValkeyRequiresAuth: dev up's Sentinels and data nodes require passwords, as production's
// should, so a pod that reaches them cannot re-point the master; the tenant part is configured
// with both passwords and trusts exactly the master and the replica.
func TestDevValkeyRequiresAuth(t *testing.T) {
	ctx := context.Background()
	s, mo := devValkey(t)
	for _, addr := range s.Valkey.SentinelAddrs() {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
		err := sc.Remove(ctx, s.Valkey.MasterName).Err()
		_ = sc.Close()
		if err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Fatalf("SENTINEL REMOVE without the password on %s: %v, want NOAUTH", addr, err)
		}
	}
	rc := redis.NewClient(&redis.Options{Addr: s.Valkey.Master.Addr, MaxRetries: -1})
	defer rc.Close()
	if err := rc.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("SET on the master without a password: %v, want NOAUTH", err)
	}
	for path, want := range map[string]string{s.ValkeyPasswordFile: mo.Tenant.AdminPassword, s.SentinelPasswordFile: mo.Tenant.SentinelPassword} {
		b, err := os.ReadFile(path)
		if err != nil || strings.TrimSpace(string(b)) != want || want == "" {
			t.Fatalf("password file %s: %q, %v", path, b, err)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
		}
	}
	cfg, err := mo.Tenant.NodeConfig()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := acl.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if ns.AllowList().Pinning() {
		t.Fatal("dev up leaves --valkey-allowed-nodes empty")
	}
	u := acl.User{Name: "devtenant", Password: "p"}
	res := ns.Upsert(ctx, []acl.User{u})
	if err := res.Err(); err != nil || len(res.Nodes) != 2 {
		t.Fatalf("provision through dev up's authenticated Sentinels: %d nodes, %v", len(res.Nodes), err)
	}
	tc := redis.NewClient(&redis.Options{Addr: s.Valkey.Replicas[0].Addr, Username: u.Name, Password: u.Password, MaxRetries: -1})
	defer tc.Close()
	if err := tc.Ping(ctx).Err(); err != nil {
		t.Fatalf("tenant AUTH on the replica: %v", err)
	}
}

// TestDevValkeyPassesTheDoctor: dev up's Valkey runs with the settings a node shared by tenants
// needs, so `siteops tenant doctor` against it finds no gap on any node or Sentinel.
func TestDevValkeyPassesTheDoctor(t *testing.T) {
	ctx := context.Background()
	_, mo := devValkey(t)
	cfg, err := mo.Tenant.NodeConfig()
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := acl.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer nodes.Close()
	fs, err := nodes.Doctor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gaps := settings.Gaps(fs); len(gaps) != 0 || len(fs) == 0 {
		t.Fatalf("dev up's Valkey: %d findings, gaps %+v", len(fs), gaps)
	}
}

// devValkey starts dev up's Valkey (data nodes and Sentinels) for the test, and returns it with
// the manager options it configured.
func devValkey(t *testing.T) (*Servers, manager.Options) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs redis-server and redis-sentinel; skipped in -short mode")
	}
	s := &Servers{}
	mo := manager.DefaultOptions()
	if err := startValkey(context.Background(), s, t.TempDir(), "127.0.0.1", &mo); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Valkey.Stop)
	return s, mo
}
