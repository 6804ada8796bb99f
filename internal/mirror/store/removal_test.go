package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/siteops/siteops/internal/testenv"
)

// The first delete of an object keeps the removal credit: a finalizer patch by a controller
// (which rewrites :last and has the exact key of the removal's resourceVersion) does not take it.
func TestRemovalCreditSticksToTheFirstDelete(t *testing.T) {
	s, _ := newAttributionStore(t, "sticky")
	ctx := context.Background()
	idx := s.AttributionIndex(time.Minute)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(idx.RecordFact(ctx, "r", auditEvent("create", "alice", "ns", "a", "u1", "10")))
	// alice deletes; the object has a finalizer, so the response is the object at RV 11.
	must(idx.RecordFact(ctx, "r", auditEvent("delete", "alice", "ns", "a", "u1", "11")))
	// A second delete (bob, while terminating) does not replace the first.
	must(idx.RecordFact(ctx, "r", auditEvent("delete", "bob", "ns", "a", "u1", "11")))
	// The controller removes the finalizer: the object is removed at RV 12.
	must(idx.RecordFact(ctx, "r", auditEvent("patch", "system:serviceaccount:ops:ctl", "ns", "a", "u1", "12")))

	for _, tc := range []struct {
		name   string
		rv     string
		result AttributionResult
	}{
		{"terminating object (deletionTimestamp set by the delete)", "11", AttributionExactUser},
		{"DELETED after the finalizer patch", "12", AttributionWeak},
		{"a later update while terminating", "99", AttributionWeak},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := idx.Find(ctx, Query{Route: "r", GVR: cmGVR, UID: "u1", RV: tc.rv, Removal: true})
			if err != nil {
				t.Fatal(err)
			}
			if r.Fact.Author != "alice" || r.Result != tc.result || r.Provisional {
				t.Fatalf("removal at %s = %s %q (provisional %v), want %s alice, final", tc.rv, r.Result, r.Fact.Author, r.Provisional, tc.result)
			}
		})
	}
	// The patch itself is still the controller's, exactly.
	if r, _ := idx.Find(ctx, Query{Route: "r", GVR: cmGVR, UID: "u1", RV: "12"}); r.Result != AttributionExactServiceAccount {
		t.Fatalf("the patch's own resolution = %s", r.Result)
	}
}

// scopeEvent is a deletecollection by user in ns whose audit event carries no response (the
// Metadata level), received at from and completed at to.
func scopeEvent(user, ns string, from, to time.Time) auditv1.Event {
	ev := auditEvent("deletecollection", user, ns, "", "", "")
	ev.AuditID = types.UID("audit-dc-" + ns + "-" + user)
	ev.ObjectRef.Name = ""
	ev.ResponseObject = nil
	ev.RequestReceivedTimestamp = metav1.NewMicroTime(from)
	ev.StageTimestamp = metav1.NewMicroTime(to)
	return ev
}

func TestDeleteCollectionScope(t *testing.T) {
	s, raw := newAttributionStore(t, "scope")
	ctx := context.Background()
	idx := s.AttributionIndex(time.Minute)
	t0 := time.Now().Truncate(time.Millisecond)
	for _, ev := range []auditv1.Event{
		scopeEvent("dora", "ns", t0, t0.Add(200*time.Millisecond)),
		scopeEvent("erin", "other", t0, t0.Add(200*time.Millisecond)),
	} {
		if err := idx.RecordDeleteCollectionFacts(ctx, "r", ev); err != nil {
			t.Fatal(err)
		}
	}
	if got := allKeys(t, raw); fmt.Sprint(got) != fmt.Sprint([]string{
		"scope:author:v1:audit:route:r:/configmaps:scope:namespace:ns",
		"scope:author:v1:audit:route:r:/configmaps:scope:namespace:other",
	}) {
		t.Fatalf("keys = %q", got)
	}
	if ttl, _ := raw.PTTL(ctx, "scope:author:v1:audit:route:r:/configmaps:scope:namespace:ns").Result(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("scope TTL = %v", ttl)
	}
	find := func(ns string, at time.Time, removal bool) AuthorResolution {
		t.Helper()
		r, err := idx.Find(ctx, Query{Route: "r", GVR: cmGVR, UID: "u7", RV: "40", Removal: removal, Namespace: ns, At: at})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tc := range []struct {
		name    string
		ns      string
		at      time.Time
		removal bool
		author  string
	}{
		{"inside the window", "ns", t0.Add(100 * time.Millisecond), true, "dora"},
		{"seen late (a watch behind)", "ns", t0.Add(200*time.Millisecond + ScopeLag - time.Millisecond), true, "dora"},
		{"other namespace, other delete", "other", t0.Add(100 * time.Millisecond), true, "erin"},
		{"before the request", "ns", t0.Add(-ScopeSkew - time.Millisecond), true, ""},
		{"long after the response", "ns", t0.Add(200*time.Millisecond + ScopeLag + time.Millisecond), true, ""},
		{"a namespace without collection deletes", "third", t0.Add(100 * time.Millisecond), true, ""},
		{"not a removal", "ns", t0.Add(100 * time.Millisecond), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := find(tc.ns, tc.at, tc.removal)
			if r.Fact.Author != tc.author {
				t.Fatalf("author = %q (%s), want %q", r.Fact.Author, r.Result, tc.author)
			}
			if tc.author != "" && (r.Result != AttributionExactDeleteCollectionScope || !r.Provisional) {
				t.Fatalf("result = %s provisional %v, want %s, provisional", r.Result, r.Provisional, AttributionExactDeleteCollectionScope)
			}
		})
	}
	// The object's own delete wins over the scope.
	if err := idx.RecordFact(ctx, "r", auditEvent("delete", "frank", "ns", "x", "u7", "41")); err != nil {
		t.Fatal(err)
	}
	if r := find("ns", t0.Add(100*time.Millisecond), true); r.Fact.Author != "frank" {
		t.Fatalf("own delete lost to the scope: %+v", r)
	}
	// Stick makes a scope credit the object's first delete.
	q := Query{Route: "r", GVR: cmGVR, UID: "u8", RV: "50", Removal: true, Namespace: "ns", At: t0.Add(100 * time.Millisecond)}
	r, err := idx.Find(ctx, q)
	if err != nil || r.Fact.Author != "dora" {
		t.Fatalf("scope removal of u8 = %+v, %v", r, err)
	}
	if err := idx.Stick(ctx, q, r.Fact); err != nil {
		t.Fatal(err)
	}
	later, err := idx.Find(ctx, Query{Route: "r", GVR: cmGVR, UID: "u8", RV: "77", Removal: true, Namespace: "ns", At: t0.Add(time.Hour)})
	if err != nil || later.Fact.Author != "dora" || later.Provisional || later.Result != AttributionExactDeleteCollectionScope {
		t.Fatalf("removal an hour later = %+v, %v; want dora's credit, final", later, err)
	}
	// A collection delete without a request time has no window and is not recorded; an empty
	// list removed nothing.
	noTime := scopeEvent("gina", "ns3", t0, t0)
	noTime.RequestReceivedTimestamp = metav1.MicroTime{}
	empty := scopeEvent("gina", "ns4", t0, t0)
	empty.ResponseObject = &runtime.Unknown{Raw: []byte(`{"kind":"ConfigMapList","items":[]}`)}
	for _, ev := range []auditv1.Event{noTime, empty} {
		if err := idx.RecordDeleteCollectionFacts(ctx, "r", ev); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range allKeys(t, raw) {
		if k == "scope:author:v1:audit:route:r:/configmaps:scope:namespace:ns3" || k == "scope:author:v1:audit:route:r:/configmaps:scope:namespace:ns4" {
			t.Fatalf("recorded %s", k)
		}
	}
}

type announced struct {
	mu         sync.Mutex
	tokens     []string
	subscribed int
}

func (a *announced) Wake(tokens []string) {
	a.mu.Lock()
	a.tokens = append(a.tokens, tokens...)
	a.mu.Unlock()
}

func (a *announced) Subscribed() {
	a.mu.Lock()
	a.subscribed++
	a.mu.Unlock()
}

func (a *announced) snapshot() ([]string, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.tokens), a.subscribed
}

// An announcement carries the wake tokens that the stored facts satisfy, on the route's channel
// only, and a waiting query's tokens name them.
func TestAnnouncements(t *testing.T) {
	s, raw := newAttributionStore(t, "ann")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	idx := s.AttributionIndex(time.Minute)
	var prod, other announced
	done := make(chan struct{}, 2)
	for route, h := range map[string]*announced{"prod": &prod, "other": &other} {
		go func() { _ = idx.Subscribe(ctx, route, h); done <- struct{}{} }()
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		_, a := prod.snapshot()
		_, b := other.snapshot()
		if a != 1 || b != 1 {
			return fmt.Errorf("subscribed %d, %d", a, b)
		}
		return nil
	})
	t0 := time.Now()
	events := []auditv1.Event{
		auditEvent("update", "alice", "ns", "a", "u1", "5"),
		scopeEvent("dora", "ns", t0, t0),
	}
	if err := idx.Announce(ctx, "prod", events); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if got, _ := prod.snapshot(); len(got) != 3 {
			return fmt.Errorf("tokens %q", got)
		}
		return nil
	})
	got, _ := prod.snapshot()
	update := WakeTokens(Query{GVR: cmGVR, UID: "u1", RV: "5"})
	removal := WakeTokens(Query{GVR: cmGVR, UID: "u1", RV: "9", Removal: true, Namespace: "ns", At: t0})
	if !slices.Contains(got, update[0]) {
		t.Errorf("announcement %q lacks the update's exact token %q", got, update[0])
	}
	for _, want := range []string{"o /configmaps u1", "s /configmaps ns"} {
		if !slices.Contains(got, want) || !slices.Contains(removal, want) {
			t.Errorf("token %q: announced %q, a removal waits for %q", want, got, removal)
		}
	}
	if toks, _ := other.snapshot(); len(toks) != 0 {
		t.Errorf("another route's subscriber got %q", toks)
	}
	// A broken connection: go-redis re-subscribes, and the handler hears of it (announcements
	// made meanwhile are lost, so waiting events must look again).
	if err := raw.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		if _, n := prod.snapshot(); n < 2 {
			return fmt.Errorf("subscribed %d times", n)
		}
		return nil
	})
	cancel()
	<-done
	<-done
}
