package failover

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/testenv"
)

// BenchmarkSwitchMasterToAllNodes measures, for 1000 tenants on a master and two replicas, the
// time from Sentinel's +switch-master announcement until every user exists on every node of the
// new topology. The replicas lose every user first, so the failover resync does all the work.
// Sentinel refuses a second failover of a master within twice its failover timeout, so each run
// measures one failover and reports it as ms/switch. Goal: at most 2000 ms.
func BenchmarkSwitchMasterToAllNodes(b *testing.B) {
	set := testenv.SentinelSet(b, servers.SentinelSetOptions{Replicas: 2, Password: adminPassword})
	ctx := context.Background()
	us := users(1000)
	ns, _ := startWatcher(b, set, us)
	if r := ns.UpsertNode(ctx, acl.Node{Addr: set.Master.Addr}, us); r.Err != nil {
		b.Fatal(r.Err)
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: set.Sentinels[0].Addr})
	defer sc.Close()
	ps := sc.Subscribe(ctx, ChannelSwitchMaster)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	runs := 0
	b.ResetTimer()
	for range b.N {
		if runs > 0 {
			b.Skip("Sentinel allows one failover per failover-timeout window")
		}
		if err := sc.Failover(ctx, set.MasterName).Err(); err != nil {
			b.Fatal(err)
		}
		msg, err := ps.ReceiveMessage(ctx)
		if err != nil {
			b.Fatal(err)
		}
		switched := time.Now()
		sw, err := ParseSwitch(msg.Payload)
		if err != nil {
			b.Fatal(err)
		}
		var nodes []string
		for _, p := range append([]*servers.Process{set.Master}, set.Replicas...) {
			nodes = append(nodes, p.Addr)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := allPresent(ctx, nodes, us)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("after switch to %s: %v", sw.New, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		total += time.Since(switched)
		runs++
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(runs), "ms/switch")
}

func allPresent(ctx context.Context, nodes []string, us []acl.User) error {
	for _, n := range nodes {
		if err := missingOn(ctx, n, us); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	return nil
}
