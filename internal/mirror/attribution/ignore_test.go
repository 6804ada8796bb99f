package attribution

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/store"
	"github.com/siteops/siteops/internal/testenv"
)

// TestIgnoredUserIsNotCommitted: a change whose audit fact names an ignored user exactly reaches
// the writer as a mark (its cursor only); other users' changes, and an ignored user's weak
// match, are committed with their authors.
func TestIgnoredUserIsNotCommitted(t *testing.T) {
	f := &weakFacts{facts: facts{m: map[string]store.AuthorFact{}}, weak: map[string]bool{}}
	r := New(Config{Index: f, Route: "r", Grace: 2 * time.Second, MaxPoll: 10 * time.Millisecond})
	out := &sink{}
	s := r.NewStream(out, cm)
	s.ignoreUsers = []string{"system:serviceaccount:flux-system:kustomize-controller"}
	ctx := context.Background()
	ev := func(uid, rv string) Event { return Event{UID: types.UID(uid), RV: rv, ExactCapable: true} }
	f.set("a", "1", "system:serviceaccount:flux-system:kustomize-controller")
	f.set("b", "2", "alice")
	f.set("c", "3", "system:serviceaccount:flux-system:kustomize-controller")
	f.weak["c/3"] = true
	must(t, s.EnqueueEvent(ctx, upsert("a", "1"), ev("a", "1")))
	must(t, s.EnqueueEvent(ctx, upsert("b", "2"), ev("b", "2")))
	must(t, s.EnqueueEvent(ctx, upsert("c", "3"), ev("c", "3")))
	testenv.Eventually(t, 5*time.Second, func() error {
		if len(out.snapshot()) < 3 {
			return fmt.Errorf("handed over %s", describe(out.snapshot()))
		}
		return nil
	})
	// A mark carries the stream's cursor, which may be a later event's when "a" resolves last,
	// so changes are told apart by path and marks are counted.
	upserts, marks := map[string]bool{}, 0
	for _, h := range out.snapshot() {
		switch h.op.Kind {
		case gitwriter.OpMark:
			marks++
			if h.op.Change.Path != "" {
				t.Errorf("a mark carries a change: %+v", h.op.Change)
			}
		case gitwriter.OpUpsert:
			upserts[h.op.Change.Path] = true
		}
	}
	if upserts["a"] || marks != 1 {
		t.Errorf("the ignored user's change was committed or not handed over as one mark: %s", describe(out.snapshot()))
	}
	if !upserts["b"] || !upserts["c"] {
		t.Errorf("other changes were not committed: %s", describe(out.snapshot()))
	}
}

// weakFacts answers some lookups with a weak match.
type weakFacts struct {
	facts
	weak map[string]bool
}

func (f *weakFacts) Find(ctx context.Context, q store.Query) (store.AuthorResolution, error) {
	res, err := f.facts.Find(ctx, q)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.weak[string(q.UID)+"/"+q.RV] {
		res.Result = store.AttributionWeak
	}
	return res, err
}
