package attribution

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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
