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
	kinds := map[string]gitwriter.OpKind{}
	for _, h := range out.snapshot() {
		kinds[h.op.Cursor.RV] = h.op.Kind
		if h.op.Kind == gitwriter.OpMark && h.op.Change.Path != "" {
			t.Errorf("a mark carries a change: %+v", h.op.Change)
		}
	}
	if kinds["1"] != gitwriter.OpMark {
		t.Errorf("the ignored user's change was handed over as %v, want a mark: %s", kinds["1"], describe(out.snapshot()))
	}
	if kinds["2"] != gitwriter.OpUpsert || kinds["3"] != gitwriter.OpUpsert {
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
