package attribution

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/siteops/siteops/internal/mirror/store"
)

// TestSettleWaitsForWaitingEvents: a CommitRequest's window must hold the change whose audit
// fact is still on its way, so Settle returns only once that event reached the writer.
func TestSettleWaitsForWaitingEvents(t *testing.T) {
	f := &facts{m: map[string]store.AuthorFact{}}
	r := New(Config{Index: f, Route: "r", Grace: 10 * time.Second, MaxPoll: 10 * time.Millisecond})
	out := &sink{}
	target := types.NamespacedName{Namespace: "ns", Name: "site"}
	s := r.NewStream(out, cm)
	r.track(target, streamID{cm, "ns"}, s)
	ctx := context.Background()
	must(t, s.EnqueueEvent(ctx, upsert("a", "1"), Event{UID: "a", RV: "1", ExactCapable: true}))
	go func() {
		time.Sleep(300 * time.Millisecond)
		f.set("a", "1", "alice")
		r.Notify()
	}()
	start := time.Now()
	r.Settle(ctx, target)
	waited := time.Since(start)
	got := out.snapshot()
	if len(got) != 1 || got[0].op.Change.Author == nil || got[0].op.Change.Author.Name != "alice" {
		t.Fatalf("after Settle the writer holds %q, want a@1 by alice", describe(got))
	}
	if waited < 250*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("Settle waited %v: want it to end when the fact arrived (~300ms), not at the grace", waited)
	}

	// Nothing waiting, other targets, or attribution off: no wait.
	start = time.Now()
	r.Settle(ctx, target)
	r.Settle(ctx, types.NamespacedName{Namespace: "ns", Name: "other"})
	New(Config{}).Settle(ctx, target)
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("Settle without waiting events took %v", d)
	}
}
