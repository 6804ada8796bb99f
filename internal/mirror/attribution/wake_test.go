package attribution

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/siteops/siteops/internal/mirror/store"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// countingLookup counts the lookups a resolver makes (each is one Redis round trip).
type countingLookup struct {
	*store.AttributionIndex
	n atomic.Int64
}

func (c *countingLookup) Find(ctx context.Context, q store.Query) (store.AuthorResolution, error) {
	c.n.Add(1)
	return c.AttributionIndex.Find(ctx, q)
}

// A waiting event does not poll: it reads its facts when it starts, when the receiver announces
// them (here from another client, as another replica would), and at the end of its grace.
func TestWaitingEventsAreWokenNotPolling(t *testing.T) {
	srv := testenv.Redis(t, servers.RedisOptions{})
	st, err := store.NewRedisStore(store.RedisStoreConfig{Addr: srv.Addr, KeyPrefix: "wake"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	other, err := store.NewRedisStore(store.RedisStoreConfig{Addr: srv.Addr, KeyPrefix: "wake"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	receiver := other.AttributionIndex(time.Minute)
	idx := &countingLookup{AttributionIndex: st.AttributionIndex(time.Minute)}
	r := New(Config{Index: idx, Announcements: idx.AttributionIndex, Route: "r", Grace: 3 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Start(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 5*time.Second, func() error {
		if !r.subscribed.Load() {
			return fmt.Errorf("not subscribed")
		}
		return nil
	})

	got := make(chan Resolved, 2)
	go func() { got <- r.Resolve(ctx, cm, "u1", "5", true) }()
	// An unrelated object's event waits too; announcements for u1 must not wake it.
	go func() { got <- r.Resolve(ctx, cm, "u2", "6", true) }()
	time.Sleep(700 * time.Millisecond) // the audit batch is on its way
	ev := auditEvent("alice", "u1", "5")
	must(t, receiver.RecordFact(ctx, "r", ev))
	must(t, receiver.Announce(ctx, "r", []auditv1.Event{ev}))
	first := <-got
	if first.UID != "u1" || first.Author == nil || first.Author.Name != "alice" || first.Waited > 2*time.Second {
		t.Fatalf("u1 = %+v, want alice, woken by the announcement", first)
	}
	second := <-got
	if second.UID != "u2" || second.Result != store.AttributionAbsent || second.Waited < 3*time.Second {
		t.Fatalf("u2 = %+v, want absent after the grace", second)
	}
	// u1: the first look and the one its announcement woke; u2: the first look and the last
	// one at the end of its grace. Polling would have made dozens.
	if n := idx.n.Load(); n != 4 {
		t.Fatalf("%d lookups for two events, want 4", n)
	}
}

// BenchmarkWaitingForFacts measures the Redis commands one attributed change costs, from the
// audit receiver's writes to the resolver's lookups, on a real redis-server (INFO
// commandstats), without an API server: 200 changes/s whose facts arrive in audit batches
// every 250 ms, 500 ms after their watch events, as an API server with batch-max-wait=1s
// delivers them. "announced" is the resolver woken by announcements; "polling" the same
// resolver without a subscription, looking up every waiting event on a timer (20 ms doubling
// to 200 ms), as it did before announcements.
func BenchmarkWaitingForFacts(b *testing.B) {
	for _, mode := range []string{"announced", "polling"} {
		b.Run(mode, func(b *testing.B) {
			srv := testenv.Redis(b, servers.RedisOptions{})
			st, err := store.NewRedisStore(store.RedisStoreConfig{Addr: srv.Addr, KeyPrefix: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			idx := st.AttributionIndex(time.Minute)
			cfg := Config{Index: idx, Route: "r", Grace: 3 * time.Second}
			if mode == "announced" {
				cfg.Announcements = idx
			}
			r := New(cfg)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = r.Start(ctx) }()
			defer func() { cancel(); <-done }()
			if mode == "announced" {
				testenv.Eventually(b, 5*time.Second, func() error {
					if !r.subscribed.Load() {
						return fmt.Errorf("not subscribed")
					}
					return nil
				})
			}
			changes := max(b.N, 1000)
			before := testenv.RedisCommands(b, srv.Addr)
			results := make(chan Resolved, changes)
			batches := make(chan []auditv1.Event, changes)
			b.ResetTimer()
			go func() {
				// The audit webhook: batches every 250 ms of what happened 500 ms earlier.
				tick := time.NewTicker(250 * time.Millisecond)
				defer tick.Stop()
				var pending []auditv1.Event
				var due []time.Time
				for {
					select {
					case evs, ok := <-batches:
						if !ok {
							batches = nil
							continue
						}
						for range evs {
							due = append(due, time.Now().Add(500*time.Millisecond))
						}
						pending = append(pending, evs...)
					case <-tick.C:
						n := 0
						for n < len(due) && time.Now().After(due[n]) {
							n++
						}
						if n > 0 {
							for _, ev := range pending[:n] {
								_ = idx.RecordFact(ctx, "r", ev)
							}
							_ = idx.Announce(ctx, "r", pending[:n])
							pending, due = pending[n:], due[n:]
						}
						if batches == nil && len(pending) == 0 {
							return
						}
					}
				}
			}()
			tick := time.NewTicker(5 * time.Millisecond) // 200 changes/s
			for i := range changes {
				<-tick.C
				uid, rv := fmt.Sprintf("u%d", i%40), fmt.Sprint(i+1)
				go func() { results <- r.Resolve(ctx, cm, types.UID(uid), rv, true) }()
				batches <- []auditv1.Event{auditEvent("alice", uid, rv)}
			}
			tick.Stop()
			close(batches)
			exact := 0
			for range changes {
				if res := <-results; res.Result == store.AttributionExactUser {
					exact++
				}
			}
			b.StopTimer()
			after := testenv.RedisCommands(b, srv.Addr)
			total := int64(0)
			for name, n := range after {
				total += n - before[name]
			}
			b.ReportMetric(float64(total)/float64(changes), "redis-cmds/change")
			b.ReportMetric(100*float64(exact)/float64(changes), "%exact")
			b.Logf("%s: %d changes, redis commands %v", mode, changes, servers.CommandsSince(before, after))
		})
	}
}
