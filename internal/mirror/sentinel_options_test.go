package mirror

import (
	"strings"
	"testing"
)

// TestRedisSentinelFlags: Sentinels stand in for --redis-addr everywhere Redis is needed (the
// CommitRequest webhook's client CA is required with them too), and naming both is refused.
func TestRedisSentinelFlags(t *testing.T) {
	o := parse(t, "--redis-sentinel-addrs=127.0.0.1:26379,127.0.0.1:26380", "--commitrequest-webhook-client-ca=/ca.pem")
	if err := o.Validate(); err != nil {
		t.Fatalf("Sentinels alone rejected: %v", err)
	}
	cfg := o.storeConfig()
	if len(cfg.SentinelAddrs) != 2 || cfg.SentinelMaster != "mymaster" || cfg.Addr != "" {
		t.Fatalf("store config = %+v, want the two Sentinels and master mymaster", cfg)
	}
	t.Setenv("REDIS_SENTINEL_PASSWORD", "from-env")
	if cfg := o.storeConfig(); cfg.SentinelPassword != "from-env" {
		t.Errorf("Sentinel password = %q, want it from $REDIS_SENTINEL_PASSWORD", cfg.SentinelPassword)
	}
	for args, want := range map[string]string{
		"--redis-sentinel-addrs=127.0.0.1:26379":                                                           "--commitrequest-webhook-client-ca",
		"--redis-sentinel-addrs=127.0.0.1:26379 --redis-addr=127.0.0.1:6379 --commitrequest-webhook=false": "both name the mirror's Redis",
	} {
		if err := parse(t, strings.Fields(args)...).Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Validate() = %v, want %q", args, err, want)
		}
	}
}
