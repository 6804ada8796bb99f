package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/testenv"
)

type events []string

func (e *events) Eventf(_ runtime.Object, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	*e = append(*e, eventtype+" "+reason+" "+fmt.Sprintf(note, args...))
}

// TestReporterMetricsAndEvents: a node with the server's defaults sets a gap per setting and
// records one Warning each; fixing a setting on the live node clears its gap in the next round.
func TestReporterMetricsAndEvents(t *testing.T) {
	r := testenv.Redis(t, servers.RedisOptions{})
	nodes, err := acl.New(acl.Config{URL: "redis://" + r.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer nodes.Close()
	var ev events
	rep := &Reporter{Nodes: nodes, Events: &ev, Namespace: "siteops-system"}
	ctx := context.Background()
	rep.Check(ctx)
	for _, s := range []string{"maxmemory", "maxmemory-policy", "proto-max-bulk-len", "maxclients", "default-user"} {
		if v := testutil.ToFloat64(SettingGaps.WithLabelValues(r.Addr, s)); v != 1 {
			t.Errorf("gap %s = %v, want 1", s, v)
		}
	}
	if len(ev) != 5 || !strings.Contains(ev[0], "Warning "+ReasonSettingGap) {
		t.Fatalf("events %v", ev)
	}
	rep.Check(ctx)
	if len(ev) != 5 {
		t.Fatalf("a gap already reported was evented again: %v", ev)
	}
	admin := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "maxmemory", "64mb").Err(); err != nil {
		t.Fatal(err)
	}
	rep.Check(ctx)
	if v := testutil.ToFloat64(SettingGaps.WithLabelValues(r.Addr, "maxmemory")); v != 0 {
		t.Fatalf("maxmemory gap after CONFIG SET = %v", v)
	}
	if !slices.ContainsFunc(ev, func(s string) bool { return strings.Contains(s, "CONFIG SET maxmemory-policy allkeys-lru") }) {
		t.Errorf("no event says what to set: %v", ev)
	}
}
