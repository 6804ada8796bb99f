package tenant

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/tenant/acl"
)

// TestLegacyEnvironment: the environment of a v0.11 Deployment (VALKEY_SENTINEL_URLS as redis://
// URLs, VALKEY_SENTINEL_MASTER_NAME, VALKEY_WATCH_FAILOVER, VALKEY_ADMIN_PASSWORD,
// VALKEY_ACL_RESYNC_PERIOD) configures the part as the siteops names would, with one
// deprecation line per v0.11-only name.
func TestLegacyEnvironment(t *testing.T) {
	t.Setenv(EnvLegacySentinelURLs, "redis://:sentinel-pw@127.0.0.1:26379, 127.0.0.1:26380")
	t.Setenv(EnvLegacySentinelMaster, "valkey-main")
	t.Setenv(EnvLegacyWatchFailover, "true")
	t.Setenv(EnvAdminPassword, "admin-pw")
	t.Setenv(EnvResyncPeriod, "5m")
	o, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.NodeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.SentinelAddrs, []string{"127.0.0.1:26379", "127.0.0.1:26380"}) || cfg.MasterName != "valkey-main" ||
		cfg.SentinelPassword != "sentinel-pw" || cfg.Password != "admin-pw" || o.ResyncPeriod != 5*time.Minute {
		t.Fatalf("v0.11 environment not applied: %+v, resync %s", cfg, o.ResyncPeriod)
	}
	d := o.Deprecations()
	if len(d) != 3 || !strings.Contains(strings.Join(d, "\n"), "use --valkey-sentinel-addrs") {
		t.Fatalf("deprecations = %q, want one line each for the sentinel URLs, master name and watch-failover", d)
	}
	for _, line := range d {
		if strings.Contains(line, "sentinel-pw") {
			t.Fatalf("a deprecation line carries the password: %q", line)
		}
	}

	t.Setenv(EnvLegacySentinelURLs, "")
	t.Setenv(EnvLegacyURL, "redis://:url-pw@127.0.0.1:6379")
	o, err = parse(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := o.NodeConfig(); err != nil || cfg.URL != "redis://:url-pw@127.0.0.1:6379" || len(cfg.SentinelAddrs) != 0 {
		t.Fatalf("VALKEY_URL: %+v, %v", cfg, err)
	}
	var help strings.Builder
	fs := pflag.NewFlagSet("help", pflag.ContinueOnError)
	(&Options{}).BindFlags(fs)
	fs.SetOutput(&help)
	fs.PrintDefaults()
	if strings.Contains(help.String(), "url-pw") || strings.Contains(help.String(), "sentinel-pw") {
		t.Fatal("--help shows a password from a v0.11 URL variable")
	}
	t.Setenv(EnvLegacyWatchFailover, "sometimes")
	if _, err := parse(t); err == nil || !strings.Contains(err.Error(), EnvLegacyWatchFailover) {
		t.Fatalf("an unparsable %s must fail at start, got %v", EnvLegacyWatchFailover, err)
	}
}

// TestLegacyFlags: v0.11's --valkey-sentinel-urls and --valkey-watch-failover are accepted,
// hidden from --help, and print one deprecation line each; the other v0.11 flags are siteops'
// own names. The master name defaults to mymaster, as in v0.11.
func TestLegacyFlags(t *testing.T) {
	o := &Options{}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	var out strings.Builder
	fs.SetOutput(&out)
	o.BindFlags(fs)
	o.BindLegacyFlags(fs)
	err := fs.Parse([]string{"--valkey-sentinel-urls=redis://127.0.0.1:26379,redis://127.0.0.1:26380", "--valkey-watch-failover=false",
		"--valkey-admin-password=pw", "--valkey-acl-resync-period=2m"})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.NodeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.SentinelAddrs, []string{"127.0.0.1:26379", "127.0.0.1:26380"}) || cfg.MasterName != DefaultMasterName || cfg.Password != "pw" || o.ResyncPeriod != 2*time.Minute {
		t.Fatalf("v0.11 flags not applied: %+v", cfg)
	}
	for _, name := range []string{FlagLegacySentinelURLs, FlagLegacyWatchFailover} {
		if !fs.Lookup(name).Hidden {
			t.Errorf("--%s shows in --help", name)
		}
		if n := strings.Count(out.String(), "Flag --"+name+" has been deprecated"); n != 1 {
			t.Errorf("--%s: %d deprecation lines, want 1; output %q", name, n, out.String())
		}
	}
	o.SentinelAddrs = []string{"http://127.0.0.1:26379"}
	if err := o.Validate(); err == nil {
		t.Error("an http:// Sentinel address was accepted")
	}
}

// TestLegacySentinelURLsReachSentinels: VALKEY_SENTINEL_URLS in v0.11's URL form finds the
// master and its replica through real Sentinels.
func TestLegacySentinelURLsReachSentinels(t *testing.T) {
	if _, err := servers.LookBinary("redis-sentinel"); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	set, err := servers.StartSentinelSet(ctx, servers.SentinelSetOptions{Dir: t.TempDir(), Password: "admin-pw"})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Stop()
	var urls []string
	for _, a := range set.SentinelAddrs() {
		urls = append(urls, "redis://"+a)
	}
	t.Setenv(EnvLegacySentinelURLs, strings.Join(urls, ","))
	t.Setenv(EnvAdminPassword, "admin-pw")
	o, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.NodeConfig()
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := acl.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer nodes.Close()
	found, err := nodes.Discover(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 {
		t.Fatalf("discovered %+v, want the master and its replica", found)
	}
}
