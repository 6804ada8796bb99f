package tenant

import (
	"slices"
	"strings"
	"testing"
)

func TestAllowedNodesAndSentinelAuthFlags(t *testing.T) {
	o, err := parse(t, "--valkey-sentinel-addrs=127.0.0.1:26379", "--valkey-sentinel-username=siteops",
		"--valkey-sentinel-password=s3cret", "--valkey-allowed-nodes=10.0.0.5:6379,10.1.0.0/24,valkey-0.valkey.cache.svc")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.NodeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SentinelUsername != "siteops" || cfg.SentinelPassword != "s3cret" ||
		!slices.Equal(cfg.AllowedNodes, []string{"10.0.0.5:6379", "10.1.0.0/24", "valkey-0.valkey.cache.svc"}) {
		t.Fatalf("node config %+v", cfg)
	}
	if _, err := parse(t, "--valkey-sentinel-addrs=127.0.0.1:26379", "--valkey-allowed-nodes=10.0.0.5:port"); err == nil ||
		!strings.Contains(err.Error(), "--valkey-allowed-nodes") {
		t.Fatalf("a bad allowed node: %v, want a start-up error naming the flag", err)
	}
}
