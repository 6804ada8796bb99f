package devenv

import (
	"context"
	"testing"

	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/settings"
)

// TestDevValkeyPassesTheDoctor: dev up's Valkey runs with the settings a node shared by tenants
// needs, so `siteops tenant doctor` against it finds no gap on any node or Sentinel.
func TestDevValkeyPassesTheDoctor(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server and redis-sentinel; skipped in -short mode")
	}
	ctx := context.Background()
	s := &Servers{}
	mo := manager.DefaultOptions()
	if err := startValkey(ctx, s, t.TempDir(), "127.0.0.1", &mo); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Valkey.Stop)
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
