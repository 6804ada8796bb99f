package attribution

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/store"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

var cm = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func TestIdentitySignature(t *testing.T) {
	id := Identity{}
	for _, tc := range []struct {
		name string
		fact store.AuthorFact
		want gitwriter.Signature
	}{
		{"claims", store.AuthorFact{Author: "oidc:1234", DisplayName: "Alice Liddell", Email: "alice@example.com"}, gitwriter.Signature{Name: "Alice Liddell", Email: "alice@example.com"}},
		{"username only", store.AuthorFact{Author: "bob"}, gitwriter.Signature{Name: "bob", Email: "bob@users.noreply.invalid"}},
		{"email username behind prefix", store.AuthorFact{Author: "oidc:carol@example.org"}, gitwriter.Signature{Name: "oidc:carol@example.org", Email: "carol@example.org"}},
		{"odd characters", store.AuthorFact{Author: "CN=Dave Smith,O=ops"}, gitwriter.Signature{Name: "CN=Dave Smith,O=ops", Email: "cn-dave-smith-o-ops@users.noreply.invalid"}},
		{"service account", store.AuthorFact{Author: "system:serviceaccount:ci:deployer", IsServiceAccount: true, DisplayName: "ignored"},
			gitwriter.Signature{Name: "system:serviceaccount:ci:deployer", Email: "system-serviceaccount-ci-deployer@users.noreply.invalid"}},
		{"empty", store.AuthorFact{Author: ":::"}, gitwriter.Signature{Name: ":::", Email: "unknown@users.noreply.invalid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := id.Signature(tc.fact); got != tc.want {
				t.Fatalf("Signature = %+v, want %+v", got, tc.want)
			}
		})
	}
	if got := (Identity{NoreplyDomain: "noreply.example.com"}).Noreply("x"); got != "x@noreply.example.com" {
		t.Fatalf("custom domain: %s", got)
	}
	got := id.CommandSignature(store.CommandAuthor{Author: "system:serviceaccount:a:b"})
	if got.Name != "system:serviceaccount:a:b" || !strings.HasPrefix(got.Email, "system-serviceaccount-a-b@") {
		t.Fatalf("command SA signature = %+v", got)
	}
}

// facts is an in-memory fact table for ordering tests (pure logic).
type facts struct {
	mu sync.Mutex
	m  map[string]store.AuthorFact // uid/rv
}

func (f *facts) set(uid, rv, author string) {
	f.mu.Lock()
	f.m[uid+"/"+rv] = store.AuthorFact{Author: author, UID: uid, ResourceVersion: rv}
	f.mu.Unlock()
}

func (f *facts) Find(_ context.Context, q store.Query) (store.AuthorResolution, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.m[string(q.UID)+"/"+q.RV]; ok {
		return store.AuthorResolution{Fact: v, Result: store.AttributionExactUser}, nil
	}
	return store.AuthorResolution{Result: store.AttributionAbsent}, nil
}

type handed struct {
	op gitwriter.Op
	at time.Time
}

type sink struct {
	mu  sync.Mutex
	ops []handed
}

func (s *sink) Enqueue(_ context.Context, op gitwriter.Op) error {
	s.mu.Lock()
	s.ops = append(s.ops, handed{op, time.Now()})
	s.mu.Unlock()
	return nil
}

func (s *sink) snapshot() []handed {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]handed(nil), s.ops...)
}

func upsert(path, rv string) gitwriter.Op {
	return gitwriter.Op{Kind: gitwriter.OpUpsert, Change: gitwriter.Change{Path: path, Ref: path}, Cursor: gitwriter.Cursor{TargetUID: "t", GVR: cm, Namespace: "ns", RV: rv}}
}

func describe(hs []handed) string {
	var parts []string
	for _, h := range hs {
		a := "committer"
		if h.op.Change.Author != nil {
			a = h.op.Change.Author.Name
		}
		p := h.op.Change.Path
		if h.op.Kind == gitwriter.OpSweep {
			p = "sweep"
		}
		if h.op.Kind == gitwriter.OpMark {
			p = "mark"
		}
		parts = append(parts, fmt.Sprintf("%s@%s(%s)", p, h.op.Cursor.RV, a))
	}
	return strings.Join(parts, " ")
}

func TestStreamOrdering(t *testing.T) {
	f := &facts{m: map[string]store.AuthorFact{}}
	r := New(Config{Index: f, Route: "r", Grace: 3 * time.Second, MaxPoll: 10 * time.Millisecond})
	out := &sink{}
	s := r.NewStream(out, cm)
	ctx := context.Background()
	ev := func(uid, rv string) Event { return Event{UID: types.UID(uid), RV: rv, ExactCapable: true} }

	// a@1 waits for its fact; b@2 has one; a@3 (same object) must wait behind a@1; mark@4 and
	// c@5 go ahead but carry no cursor while a@1 is outstanding.
	f.set("b", "2", "bob")
	f.set("c", "5", "carol")
	f.set("a", "3", "alice")
	must(t, s.EnqueueEvent(ctx, upsert("a", "1"), ev("a", "1")))
	must(t, s.EnqueueEvent(ctx, upsert("b", "2"), ev("b", "2")))
	must(t, s.EnqueueEvent(ctx, upsert("a", "3"), ev("a", "3")))
	must(t, s.Enqueue(ctx, gitwriter.Op{Kind: gitwriter.OpMark, Cursor: gitwriter.Cursor{TargetUID: "t", GVR: cm, Namespace: "ns", RV: "4"}}))
	must(t, s.EnqueueEvent(ctx, upsert("c", "5"), ev("c", "5")))
	testenv.Eventually(t, 2*time.Second, func() error {
		// Independent objects resolve concurrently, so their order is free; none may carry a
		// cursor while a@1 is outstanding.
		parts := strings.Fields(describe(out.snapshot()))
		sort.Strings(parts)
		if got := strings.Join(parts, " "); got != "b@(bob) c@(carol) mark@(committer)" {
			return fmt.Errorf("handed over %q", got)
		}
		return nil
	})
	if s.Pending() != 2 {
		t.Fatalf("pending = %d, want 2 (a@1, a@3)", s.Pending())
	}
	// a@1's fact arrives: a@1 then a@3 go, and a@3 (the last of the handed-over prefix) carries
	// the cursor of everything up to RV 5.
	f.set("a", "1", "alice")
	r.Notify()
	testenv.Eventually(t, 2*time.Second, func() error {
		if got := describe(out.snapshot()[3:]); got != "a@(alice) a@5(alice)" {
			return fmt.Errorf("handed over %q", got)
		}
		return nil
	})
	if c := out.snapshot()[4].op.Cursor; c.TargetUID != "t" || c.Namespace != "ns" || c.GVR != cm {
		t.Fatalf("carried cursor = %+v", c)
	}

	// A sweep is a barrier: it waits for d@6 and e@8 waits for the sweep.
	must(t, s.EnqueueEvent(ctx, upsert("d", "6"), ev("d", "6")))
	must(t, s.Enqueue(ctx, gitwriter.Op{Kind: gitwriter.OpSweep, SweepDir: "x", Cursor: gitwriter.Cursor{TargetUID: "t", GVR: cm, Namespace: "ns", RV: "7"}}))
	f.set("e", "8", "erin")
	must(t, s.EnqueueEvent(ctx, upsert("e", "8"), ev("e", "8")))
	time.Sleep(100 * time.Millisecond)
	if n := len(out.snapshot()); n != 5 {
		t.Fatalf("ops passed the barrier: %s", describe(out.snapshot()))
	}
	f.set("d", "6", "dave")
	r.Notify()
	testenv.Eventually(t, 2*time.Second, func() error {
		got := describe(out.snapshot()[5:])
		if got != "d@(dave) sweep@(committer) e@8(erin)" {
			return fmt.Errorf("handed over %q", got)
		}
		return nil
	})
}

func TestStreamGraceExpiresToCommitter(t *testing.T) {
	f := &facts{m: map[string]store.AuthorFact{}}
	var mu sync.Mutex
	var results []store.AttributionResult
	r := New(Config{Index: f, Route: "r", Grace: 150 * time.Millisecond, OnResolved: func(res Resolved) {
		mu.Lock()
		results = append(results, res.Result)
		mu.Unlock()
	}})
	out := &sink{}
	s := r.NewStream(out, cm)
	start := time.Now()
	must(t, s.EnqueueEvent(context.Background(), upsert("a", "1"), Event{UID: "a", RV: "1", ExactCapable: true}))
	testenv.Eventually(t, 2*time.Second, func() error {
		if len(out.snapshot()) != 1 {
			return fmt.Errorf("not handed over")
		}
		return nil
	})
	h := out.snapshot()[0]
	if h.op.Change.Author != nil || h.op.Cursor.RV != "1" {
		t.Fatalf("absent op = %+v", h.op)
	}
	if d := h.at.Sub(start); d < 150*time.Millisecond {
		t.Fatalf("handed over after %v, before the grace", d)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(results) != 1 || results[0] != store.AttributionAbsent {
		t.Fatalf("results = %v", results)
	}
	// Disabled attribution: no wait, committer.
	out2 := &sink{}
	off := New(Config{}).NewStream(out2, cm)
	must(t, off.EnqueueEvent(context.Background(), upsert("a", "1"), Event{UID: "a", RV: "1", ExactCapable: true}))
	if got := describe(out2.snapshot()); got != "a@1(committer)" {
		t.Fatalf("disabled: %q", got)
	}
}

// TestSlowFactDoesNotDelayOthers: against a real Redis, an event whose fact never comes waits its
// whole grace period without delaying another author's event whose fact is stored after the
// watch event. The grace runs on a fake clock that moves only when the test steps it, so what is
// asserted is order, not how long a loaded machine took: the fast event is handed over while no
// time has passed and the slow one still waits, and the slow one only once its grace is over.
func TestSlowFactDoesNotDelayOthers(t *testing.T) {
	srv := testenv.Redis(t, servers.RedisOptions{})
	st, err := store.NewRedisStore(store.RedisStoreConfig{Addr: srv.Addr, KeyPrefix: "wait"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	idx := st.AttributionIndex(time.Minute)
	const grace = 2 * time.Second
	clk := clocktesting.NewFakeClock(time.Now())
	resolved := &resolutions{}
	r := New(Config{Index: idx, Route: "r", Grace: grace, Clock: clk, OnResolved: resolved.add})
	out := &sink{}
	s := r.NewStream(out, cm)
	ctx := context.Background()
	must(t, s.EnqueueEvent(ctx, upsert("slow", "1"), Event{UID: "slow", RV: "1", ExactCapable: true}))
	must(t, s.EnqueueEvent(ctx, upsert("fast", "2"), Event{UID: "fast", RV: "2", ExactCapable: true}))
	must(t, idx.RecordFact(ctx, "r", auditEvent("bob", "fast", "2")))
	r.Notify()
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := describe(out.snapshot()); got != "fast@(bob)" {
			return fmt.Errorf("handed over %q, want only fast, by bob", got)
		}
		return nil
	})
	if n := s.Pending(); n != 1 {
		t.Fatalf("pending = %d, want 1 (slow, waiting for its fact)", n)
	}
	if fast := resolved.of("fast"); fast.Waited != 0 {
		t.Fatalf("fast event resolved after %v of the fake clock, want 0: it waited for something", fast.Waited)
	}

	// The slow event's grace timer is the only one left; ending it hands the slow event over as
	// the committer's, carrying the cursor of both.
	waitOnClock(t, clk)
	clk.Step(grace)
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := describe(out.snapshot()); got != "fast@(bob) slow@2(committer)" {
			return fmt.Errorf("handed over %q", got)
		}
		return nil
	})
	if slow := resolved.of("slow"); slow.Result != store.AttributionAbsent || slow.Waited < grace {
		t.Fatalf("slow event resolved %s after %v of the fake clock, want absent after the grace %v", slow.Result, slow.Waited, grace)
	}
}

// resolutions records what a Resolver's OnResolved reports, by UID.
type resolutions struct {
	mu sync.Mutex
	m  map[types.UID]Resolved
}

func (r *resolutions) add(res Resolved) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[types.UID]Resolved{}
	}
	r.m[res.UID] = res
}

func (r *resolutions) of(uid types.UID) Resolved {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[uid]
}

// waitOnClock waits until something waits on clk (a waiting event's grace timer), so a Step
// that follows ends that wait.
func waitOnClock(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		if !clk.HasWaiters() {
			return fmt.Errorf("nothing waits on the clock")
		}
		return nil
	})
}

func auditEvent(user, uid, rv string) auditv1.Event {
	return auditv1.Event{
		Stage: auditv1.StageResponseComplete, Verb: "update", User: authnv1.UserInfo{Username: user},
		ObjectRef:      &auditv1.ObjectReference{Resource: "configmaps", Namespace: "ns", Name: uid},
		ResponseStatus: &metav1.Status{Code: 200},
		ResponseObject: &runtime.Unknown{Raw: fmt.Appendf(nil, `{"metadata":{"uid":%q,"resourceVersion":%q}}`, uid, rv)},
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A removal whose only match is the :last pointer of an earlier write waits for the deleting
// request's fact, and falls back to the earlier writer only when the grace ends. The grace runs
// on a fake clock: the removal must resolve on the delete fact with no time passed, and the
// fallback only after the test ends the grace.
func TestRemovalWaitsForTheDeletingRequest(t *testing.T) {
	srv := testenv.Redis(t, servers.RedisOptions{})
	st, err := store.NewRedisStore(store.RedisStoreConfig{Addr: srv.Addr, KeyPrefix: "rm"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	idx := st.AttributionIndex(time.Minute)
	ctx := context.Background()
	const grace = 800 * time.Millisecond
	clk := clocktesting.NewFakeClock(time.Now())
	r := New(Config{Index: idx, Route: "r", Grace: grace, Clock: clk})
	must(t, idx.RecordFact(ctx, "r", auditEvent("bob", "u1", "5")))
	must(t, idx.RecordFact(ctx, "r", auditEvent("bob", "u2", "7")))
	resolve := func(uid types.UID, rv string) <-chan Resolved {
		done := make(chan Resolved, 1)
		go func() { done <- r.Resolve(ctx, cm, uid, rv, false) }()
		return done
	}
	result := func(done <-chan Resolved, what string) Resolved {
		t.Helper()
		select {
		case res := <-done:
			return res
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not resolve", what)
			return Resolved{}
		}
	}

	// Only bob's earlier write matches: the removal waits (its grace timer set) until the
	// deleting request's fact is stored.
	done := resolve("u1", "6")
	waitOnClock(t, clk)
	del := auditEvent("alice", "", "")
	del.Verb = "delete"
	del.ObjectRef.Name = "u1"
	del.ResponseObject = &runtime.Unknown{Raw: []byte(`{"kind":"Status","status":"Success","details":{"name":"u1","uid":"u1"}}`)}
	must(t, idx.RecordFact(ctx, "r", del))
	r.Notify()
	res := result(done, "the removal, after the deleting request's fact was stored,")
	if res.Author == nil || res.Author.Name != "alice" || res.Fact.Verb != "delete" || res.Result != store.AttributionWeak {
		t.Fatalf("removal = %+v", res)
	}
	if res.Waited != 0 {
		t.Fatalf("resolved after %v of the fake clock; want on the delete fact, before any of the grace passed", res.Waited)
	}

	// No delete fact: the previous writer, weakly, once the grace is over and not before.
	done = resolve("u2", "8")
	waitOnClock(t, clk)
	clk.Step(grace)
	res = result(done, "the removal without a delete fact, after its grace,")
	if res.Author == nil || res.Author.Name != "bob" || res.Result != store.AttributionWeak || res.Waited < grace {
		t.Fatalf("fallback = %+v, want bob's weakly after the grace %v", res, grace)
	}
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// Ops of a stopped watch stream are dropped, not handed over late behind its successor.
func TestStoppedStreamDropsWaitingOps(t *testing.T) {
	f := &facts{m: map[string]store.AuthorFact{}}
	r := New(Config{Index: f, Route: "r", Grace: 5 * time.Second, MaxPoll: 10 * time.Millisecond})
	out := &sink{}
	s := r.NewStream(out, cm)
	ctx, cancel := context.WithCancel(context.Background())
	must(t, s.EnqueueEvent(ctx, upsert("a", "1"), Event{UID: "a", RV: "1", ExactCapable: true}))
	cancel()
	testenv.Eventually(t, 2*time.Second, func() error {
		if s.Pending() != 0 {
			return errorf("%d pending", s.Pending())
		}
		return nil
	})
	if got := out.snapshot(); len(got) != 0 {
		t.Fatalf("a stopped stream handed over %s", describe(got))
	}
}

// TestWaitingCap: past MaxWaiting events waiting for their facts, further events go through at
// once as the committer's (result absent) and are counted, so a flood of changes whose facts
// never come cannot hold unbounded objects in memory.
func TestWaitingCap(t *testing.T) {
	srv := testenv.Redis(t, servers.RedisOptions{})
	st, err := store.NewRedisStore(store.RedisStoreConfig{Addr: srv.Addr, KeyPrefix: "cap"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	idx := st.AttributionIndex(time.Minute)
	var mu sync.Mutex
	results := map[string]store.AttributionResult{}
	r := New(Config{Index: idx, Route: "r", Grace: time.Minute, MaxPoll: 10 * time.Millisecond, MaxWaiting: 3, OnResolved: func(res Resolved) {
		mu.Lock()
		results[string(res.UID)] = res.Result
		mu.Unlock()
	}})
	out := &sink{}
	s := r.NewStream(out, cm)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	overflow := testutil.ToFloat64(Overflows)
	for i, uid := range []string{"a", "b", "c", "d", "e"} {
		must(t, s.EnqueueEvent(ctx, upsert(uid, fmt.Sprint(i+1)), Event{UID: types.UID(uid), RV: fmt.Sprint(i + 1), ExactCapable: true}))
	}
	testenv.Eventually(t, 2*time.Second, func() error {
		if got := describe(out.snapshot()); got != "d@(committer) e@(committer)" {
			return fmt.Errorf("handed over %q, want d and e at once as the committer's", got)
		}
		return nil
	})
	mu.Lock()
	if results["d"] != store.AttributionAbsent || results["e"] != store.AttributionAbsent || len(results) != 2 {
		t.Errorf("results = %v, want d and e absent and the rest still waiting", results)
	}
	mu.Unlock()
	if d := testutil.ToFloat64(Overflows) - overflow; d != 2 {
		t.Errorf("overflow counter +%v, want +2", d)
	}
	if n := r.Waiting(); n != 3 {
		t.Errorf("Waiting() = %d, want 3", n)
	}
	// A fact arrives: its event leaves the waiting set, making room for the next one.
	must(t, idx.RecordFact(ctx, "r", auditEvent("alice", "a", "1")))
	r.Notify()
	testenv.Eventually(t, 2*time.Second, func() error {
		if n := r.Waiting(); n != 2 {
			return fmt.Errorf("Waiting() = %d, want 2", n)
		}
		return nil
	})
	must(t, s.EnqueueEvent(ctx, upsert("f", "7"), Event{UID: "f", RV: "7", ExactCapable: true}))
	if n := r.Waiting(); n != 3 {
		t.Errorf("Waiting() = %d after one more event, want 3 (it waits)", n)
	}
}
