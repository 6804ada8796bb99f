package acl

import (
	"context"
	"slices"
	"testing"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/tenant/settings"
	"github.com/siteops/siteops/internal/testenv"
)

func gapsByNode(fs []settings.Finding) map[string][]string {
	out := map[string][]string{}
	for _, f := range fs {
		if _, ok := out[f.Node]; !ok {
			out[f.Node] = []string{}
		}
		if !f.OK {
			out[f.Node] = append(out[f.Node], f.Setting)
		}
	}
	return out
}

// TestDoctorReportsServerDefaults: a master, a replica and Sentinels started as the packages
// ship them are unfit to share between tenants, and every gap is named on every node.
func TestDoctorReportsServerDefaults(t *testing.T) {
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: 1})
	ns, err := New(Config{SentinelAddrs: set.SentinelAddrs(), MasterName: set.MasterName})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	fs, err := ns.Doctor(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := gapsByNode(fs)
	data := []string{settings.MaxMemory, settings.MaxMemoryPolicy, settings.ProtoMaxBulkLen, settings.MaxClients, settings.DefaultUser}
	for _, addr := range []string{set.Master.Addr, set.Replicas[0].Addr} {
		if !slices.Equal(got[addr], data) {
			t.Errorf("%s: gaps %v, want %v", addr, got[addr], data)
		}
	}
	for _, addr := range set.SentinelAddrs() {
		if !slices.Equal(got[addr], []string{settings.SentinelAuth}) {
			t.Errorf("sentinel %s: gaps %v, want sentinel-auth", addr, got[addr])
		}
	}
	if len(got) != 2+len(set.Sentinels) {
		t.Errorf("findings for %d nodes, want %d: %v", len(got), 2+len(set.Sentinels), got)
	}
}

// TestDoctorPassesSharedSettings: the same set run with settings.Recommended, a password on the
// default user and on the Sentinels has no gap.
func TestDoctorPassesSharedSettings(t *testing.T) {
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: 1, Password: adminPassword, SentinelPassword: "sentinel-secret", NodeConfig: settings.Recommended})
	ns, err := New(Config{SentinelAddrs: set.SentinelAddrs(), MasterName: set.MasterName, Password: adminPassword, SentinelPassword: "sentinel-secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	fs, err := ns.Doctor(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if gaps := settings.Gaps(fs); len(gaps) != 0 {
		t.Fatalf("gaps on a node with the settings: %+v", gaps)
	}
	if n := len(gapsByNode(fs)); n != 2+len(set.Sentinels) {
		t.Fatalf("findings for %d nodes, want %d", n, 2+len(set.Sentinels))
	}
}
