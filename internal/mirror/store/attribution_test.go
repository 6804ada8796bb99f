package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

var cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// auditEvent builds a ResponseComplete audit event for a write by user on a ConfigMap whose
// persisted form has uid and rv.
func auditEvent(verb, user, ns, name, uid, rv string) auditv1.Event {
	body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":%q,"uid":%q,"resourceVersion":%q}}`, name, ns, uid, rv)
	return auditv1.Event{
		AuditID:        types.UID("audit-" + uid + "-" + rv),
		Stage:          auditv1.StageResponseComplete,
		Verb:           verb,
		User:           authnv1.UserInfo{Username: user},
		ObjectRef:      &auditv1.ObjectReference{Resource: "configmaps", Namespace: ns, Name: name, APIVersion: "v1"},
		ResponseStatus: &metav1.Status{Code: 200},
		ResponseObject: &runtime.Unknown{Raw: []byte(body), ContentType: "application/json"},
		StageTimestamp: metav1.NewMicroTime(time.Date(2026, 11, 29, 10, 0, 0, 123456000, time.UTC)),
	}
}

func newAttributionStore(t *testing.T, prefix string) (*RedisStore, *redis.Client) {
	t.Helper()
	srv := testenv.Redis(t, servers.RedisOptions{})
	s, err := NewRedisStore(RedisStoreConfig{Addr: srv.Addr, KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = raw.Close() })
	return s, raw
}

func allKeys(t *testing.T, raw *redis.Client) []string {
	t.Helper()
	keys, err := raw.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	return keys
}

func TestAttributionKeyLayoutAndFields(t *testing.T) {
	s, raw := newAttributionStore(t, "cell:a:")
	ctx := context.Background()
	idx := s.AttributionIndex(0)
	if idx.FactTTL() != DefaultAttributionFactTTL {
		t.Fatalf("default TTL = %v", idx.FactTTL())
	}
	ev := auditEvent("update", "alice", "team:a", "web", "uid-1", "42")
	ev.User.Extra = map[string]authnv1.ExtraValue{
		"oidc.example.com/email": {"alice@example.com"},
		"oidc.example.com/name":  {"Alice Liddell"},
	}
	if err := idx.RecordFact(ctx, "prod:eu", ev); err != nil {
		t.Fatal(err)
	}
	// A fact with an RV but no UID (e.g. a response without uid) goes to the rv-only key.
	noUID := auditEvent("create", "system:serviceaccount:ci:deployer", "team-b", "cfg", "", "77")
	if err := idx.RecordFact(ctx, "prod:eu", noUID); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"cell:a:author:v1:audit:route:prod%3Aeu:/configmaps:object:uid-1:42",
		"cell:a:author:v1:audit:route:prod%3Aeu:/configmaps:object:uid-1:last",
		"cell:a:author:v1:audit:route:prod%3Aeu:/configmaps:rv:77",
	}
	if got := allKeys(t, raw); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("keys = %q\nwant %q", got, want)
	}
	v, err := raw.Get(ctx, want[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(v), &fields); err != nil {
		t.Fatal(err)
	}
	wantFields := map[string]any{
		"groupResource":   "/configmaps",
		"namespace":       "team:a",
		"name":            "web",
		"uid":             "uid-1",
		"author":          "alice",
		"displayName":     "Alice Liddell",
		"email":           "alice@example.com",
		"verb":            "update",
		"auditID":         "audit-uid-1-42",
		"resourceVersion": "42",
		"stageTimestamp":  "2026-11-29T10:00:00.123456Z",
	}
	if fmt.Sprint(fields) != fmt.Sprint(wantFields) {
		t.Fatalf("stored JSON = %s\nwant fields %v", v, wantFields)
	}
	v, _ = raw.Get(ctx, want[2]).Result()
	if err := json.Unmarshal([]byte(v), &fields); err != nil {
		t.Fatal(err)
	}
	if fields["isServiceAccount"] != true || fields["author"] != "system:serviceaccount:ci:deployer" {
		t.Fatalf("rv-only fact = %s", v)
	}
	for _, k := range want {
		ttl, err := raw.TTL(ctx, k).Result()
		if err != nil || ttl <= DefaultAttributionFactTTL-time.Minute || ttl > DefaultAttributionFactTTL {
			t.Errorf("TTL of %s = %v, %v; want about %v", k, ttl, err, DefaultAttributionFactTTL)
		}
	}
	if n, err := idx.CountFacts(ctx); err != nil || n != 3 {
		t.Fatalf("CountFacts = %d, %v; want 3", n, err)
	}
	if p := idx.FactScanPattern(); p != "cell:a:author:v1:audit:*" {
		t.Fatalf("scan pattern = %q", p)
	}
}

func TestAttributionResolution(t *testing.T) {
	s, raw := newAttributionStore(t, "")
	ctx := context.Background()
	idx := s.AttributionIndex(time.Minute)
	rec := func(route string, ev auditv1.Event) {
		t.Helper()
		if err := idx.RecordFact(ctx, route, ev); err != nil {
			t.Fatal(err)
		}
	}
	rec("r", auditEvent("create", "alice", "ns", "a", "uid-a", "10"))
	rec("r", auditEvent("update", "bob", "ns", "a", "uid-a", "11"))
	rec("r", auditEvent("patch", "system:serviceaccount:kube-system:ctl", "ns", "b", "uid-b", "12"))
	rec("r", auditEvent("create", "carol", "ns", "c", "", "13"))

	for _, tc := range []struct {
		name         string
		route        string
		uid          types.UID
		rv           string
		exactCapable bool
		result       AttributionResult
		author       string
	}{
		{"exact user", "r", "uid-a", "10", true, AttributionExactUser, "alice"},
		{"exact later write", "r", "uid-a", "11", true, AttributionExactUser, "bob"},
		{"exact service account", "r", "uid-b", "12", true, AttributionExactServiceAccount, "system:serviceaccount:kube-system:ctl"},
		{"rv-only escape hatch", "r", "uid-c", "13", true, AttributionWeak, "carol"},
		{"modified never uses :last", "r", "uid-a", "99", true, AttributionAbsent, ""},
		{"deleted falls back to :last", "r", "uid-a", "99", false, AttributionWeak, "bob"},
		{"deleted with exact RV stays exact", "r", "uid-a", "10", false, AttributionExactUser, "alice"},
		{"other route is another keyspace", "other", "uid-a", "10", true, AttributionAbsent, ""},
		{"unknown object", "r", "uid-z", "1", false, AttributionAbsent, ""},
		{"no uid and no rv", "r", "", "", false, AttributionAbsent, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := idx.LookupAuthorResolution(ctx, tc.route, cmGVR, tc.uid, tc.rv, tc.exactCapable)
			if r.Result != tc.result || r.Fact.Author != tc.author {
				t.Fatalf("resolution = %s %q, want %s %q", r.Result, r.Fact.Author, tc.result, tc.author)
			}
			f, ok := idx.LookupAuthor(ctx, tc.route, cmGVR, tc.uid, tc.rv, tc.exactCapable)
			if ok != (tc.result != AttributionAbsent) || f.Author != tc.author {
				t.Fatalf("LookupAuthor = %q, %v", f.Author, ok)
			}
		})
	}

	// The exact key is immutable: a replayed audit event with another author does not rewrite it,
	// but the :last pointer is last-writer-wins.
	rec("r", auditEvent("update", "mallory", "ns", "a", "uid-a", "10"))
	if r := idx.LookupAuthorResolution(ctx, "r", cmGVR, "uid-a", "10", true); r.Fact.Author != "alice" {
		t.Fatalf("exact key rewritten: %q", r.Fact.Author)
	}
	if r := idx.LookupAuthorResolution(ctx, "r", cmGVR, "uid-a", "", false); r.Fact.Author != "mallory" || r.Result != AttributionWeak {
		t.Fatalf(":last = %+v", r)
	}

	// Facts expire on their own; an expired fact reads as absent (no tombstone).
	keys := allKeys(t, raw)
	for _, k := range keys {
		if err := raw.PExpire(ctx, k, time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 2*time.Second, func() error {
		if n, _ := raw.DBSize(ctx).Result(); n != 0 {
			return fmt.Errorf("%d keys left", n)
		}
		return nil
	})
	if r := idx.LookupAuthorResolution(ctx, "r", cmGVR, "uid-a", "10", false); r.Result != AttributionAbsent {
		t.Fatalf("expired fact resolved as %s", r.Result)
	}
}

func TestAttributionFactTTLExpiry(t *testing.T) {
	s, raw := newAttributionStore(t, "ttl")
	ctx := context.Background()
	idx := s.AttributionIndex(1500 * time.Millisecond)
	if err := idx.RecordFact(ctx, "r", auditEvent("create", "alice", "ns", "a", "uid-a", "5")); err != nil {
		t.Fatal(err)
	}
	if r := idx.LookupAuthorResolution(ctx, "r", cmGVR, "uid-a", "5", true); r.Result != AttributionExactUser {
		t.Fatalf("fresh fact = %s", r.Result)
	}
	ttl, _ := raw.PTTL(ctx, "ttl:author:v1:audit:route:r:/configmaps:object:uid-a:5").Result()
	if ttl <= 0 || ttl > 1500*time.Millisecond {
		t.Fatalf("PTTL = %v, want (0, 1.5s]", ttl)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if r := idx.LookupAuthorResolution(ctx, "r", cmGVR, "uid-a", "5", false); r.Result != AttributionAbsent {
			return fmt.Errorf("still %s", r.Result)
		}
		return nil
	})
}

func TestRecordFactNoOps(t *testing.T) {
	s, raw := newAttributionStore(t, "noop")
	ctx := context.Background()
	idx := s.AttributionIndex(time.Minute)
	noRef := auditEvent("create", "alice", "ns", "a", "u", "1")
	noRef.ObjectRef = nil
	noUser := auditEvent("create", "", "ns", "a", "u", "1")
	noName := auditEvent("create", "alice", "ns", "", "u", "1")
	noName.ResponseObject = nil
	noIDs := auditEvent("delete", "alice", "ns", "a", "", "")
	noIDs.ResponseObject = &runtime.Unknown{Raw: []byte(`{"kind":"Status","status":"Success"}`)}
	garbage := auditEvent("create", "alice", "ns", "a", "u", "1")
	garbage.ResponseObject = &runtime.Unknown{Raw: []byte(`{not json`)}
	for _, ev := range []auditv1.Event{noRef, noUser, noName, noIDs, garbage} {
		if err := idx.RecordFact(ctx, "r", ev); err != nil {
			t.Fatal(err)
		}
	}
	if keys := allKeys(t, raw); len(keys) != 0 {
		t.Fatalf("no-op events wrote %q", keys)
	}
	// A generateName create has no name in the objectRef: the response supplies it.
	gen := auditEvent("create", "alice", "ns", "", "u-gen", "3")
	gen.ResponseObject = &runtime.Unknown{Raw: []byte(`{"metadata":{"name":"cfg-x7k2","namespace":"ns","uid":"u-gen","resourceVersion":"3"}}`)}
	if err := idx.RecordFact(ctx, "r", gen); err != nil {
		t.Fatal(err)
	}
	if r := idx.LookupAuthorResolution(ctx, "r", cmGVR, "u-gen", "3", true); r.Result != AttributionExactUser || r.Fact.Name != "cfg-x7k2" {
		t.Fatalf("generateName create = %+v", r)
	}
	// Impersonation: the impersonated user is the author.
	imp := auditEvent("update", "admin", "ns", "a", "u-imp", "4")
	imp.ImpersonatedUser = &authnv1.UserInfo{Username: "dave"}
	if err := idx.RecordFact(ctx, "r", imp); err != nil {
		t.Fatal(err)
	}
	if r := idx.LookupAuthorResolution(ctx, "r", cmGVR, "u-imp", "4", true); r.Fact.Author != "dave" {
		t.Fatalf("impersonated author = %q", r.Fact.Author)
	}
}

func TestRecordDeleteCollectionFacts(t *testing.T) {
	s, raw := newAttributionStore(t, "dc")
	ctx := context.Background()
	idx := s.AttributionIndex(time.Minute)
	ev := auditEvent("deletecollection", "erin", "ns", "", "", "")
	ev.ObjectRef.Name = ""
	// The second item is finalizer-pending: it is credited all the same.
	ev.ResponseObject = &runtime.Unknown{Raw: []byte(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[
		{"metadata":{"name":"one","namespace":"ns","uid":"u1","resourceVersion":"20"}},
		{"metadata":{"name":"two","namespace":"ns","uid":"u2","resourceVersion":"21","deletionTimestamp":"2026-11-29T10:00:00Z","finalizers":["x/y"]}},
		{"metadata":{"name":"no-uid","namespace":"ns"}}]}`)}
	if err := idx.RecordDeleteCollectionFacts(ctx, "r", ev); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"dc:author:v1:audit:route:r:/configmaps:object:u1:deleter",
		"dc:author:v1:audit:route:r:/configmaps:object:u1:last",
		"dc:author:v1:audit:route:r:/configmaps:object:u2:deleter",
		"dc:author:v1:audit:route:r:/configmaps:object:u2:last",
	}
	if got := allKeys(t, raw); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("keys = %q, want only :last and deleter keys %q", got, want)
	}
	for _, uid := range []types.UID{"u1", "u2"} {
		r := idx.LookupAuthorResolution(ctx, "r", cmGVR, uid, "999", false)
		if r.Result != AttributionExactDeleteCollectionItem || r.Fact.Author != "erin" || r.Fact.UID != string(uid) {
			t.Fatalf("removal of %s = %+v", uid, r)
		}
		// A removal is never exact-capable, and ADDED/MODIFIED never read :last.
		if r := idx.LookupAuthorResolution(ctx, "r", cmGVR, uid, "999", true); r.Result != AttributionAbsent {
			t.Fatalf("exact-capable lookup of %s used :last: %+v", uid, r)
		}
	}
	// Other verbs are no-ops; hollow and broken bodies without a request time (so without a
	// window) too.
	other := auditEvent("delete", "erin", "ns", "x", "u9", "30")
	hollow := auditEvent("deletecollection", "erin", "ns", "", "", "")
	hollow.ResponseObject = &runtime.Unknown{Raw: []byte(`{"kind":"Status"}`)}
	broken := auditEvent("deletecollection", "erin", "ns", "", "", "")
	broken.ResponseObject = &runtime.Unknown{Raw: []byte(`{"items":[`)}
	absent := auditEvent("deletecollection", "erin", "ns", "", "", "")
	absent.ResponseObject = nil
	for _, e := range []auditv1.Event{other, hollow, broken, absent} {
		if err := idx.RecordDeleteCollectionFacts(ctx, "r", e); err != nil {
			t.Fatal(err)
		}
	}
	if got := allKeys(t, raw); len(got) != 4 {
		t.Fatalf("no-op expansions wrote keys: %q", got)
	}
}

func TestCommandAuthorStore(t *testing.T) {
	s, raw := newAttributionStore(t, "cmd")
	ctx := context.Background()
	cs := s.CommandAuthorStore()
	if _, ok := cs.LookupCommandAuthor(ctx, "u1"); ok {
		t.Fatal("found before record")
	}
	a := CommandAuthor{Author: "alice", DisplayName: "Alice", Email: "alice@example.com", RequestedAt: "2026-11-29T10:00:00Z"}
	if err := cs.RecordCommandAuthor(ctx, "u1", a); err != nil {
		t.Fatal(err)
	}
	got, ok := cs.LookupCommandAuthor(ctx, "u1")
	if !ok || got != a {
		t.Fatalf("lookup = %+v, %v", got, ok)
	}
	v, err := raw.Get(ctx, "cmd:author:v1:command:u1").Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"author":"alice","displayName":"Alice","email":"alice@example.com","requestedAt":"2026-11-29T10:00:00Z"}`; v != want {
		t.Fatalf("stored %s, want %s", v, want)
	}
	if ttl, _ := raw.TTL(ctx, "cmd:author:v1:command:u1").Result(); ttl <= CommandAuthorTTL-time.Minute {
		t.Fatalf("TTL = %v", ttl)
	}
	// Command records are not audit facts: the gauge's SCAN does not count them.
	if n, _ := s.AttributionIndex(0).CountFacts(ctx); n != 0 {
		t.Fatalf("CountFacts counted %d command records", n)
	}
	if err := cs.RecordCommandAuthor(ctx, "", a); err == nil {
		t.Fatal("recorded without UID")
	}
	if err := cs.RecordCommandAuthor(ctx, "u2", CommandAuthor{}); err == nil {
		t.Fatal("recorded an empty author")
	}
}

func TestAttributionRedisDown(t *testing.T) {
	srv := testenv.Redis(t, servers.RedisOptions{})
	s, err := NewRedisStore(RedisStoreConfig{Addr: srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	idx := s.AttributionIndex(0)
	if err := idx.RecordFact(ctx, "r", auditEvent("create", "a", "ns", "n", "u", "1")); err == nil {
		t.Fatal("RecordFact succeeded with Redis stopped")
	}
	if _, err := idx.LookupAuthorResolutionErr(ctx, "r", cmGVR, "u", "1", true); err == nil {
		t.Fatal("lookup reported no error with Redis stopped")
	}
	if r := idx.LookupAuthorResolution(ctx, "r", cmGVR, "u", "1", true); r.Result != AttributionAbsent {
		t.Fatalf("lookup = %s", r.Result)
	}
}

// A DELETE of most resources answers Status{details:{uid}}: the UID still joins the removal
// through :last and the deleter key, and no exact key is written (there is no RV).
func TestRecordFactDeleteStatusResponse(t *testing.T) {
	s, raw := newAttributionStore(t, "del")
	ctx := context.Background()
	idx := s.AttributionIndex(time.Minute)
	if err := idx.RecordFact(ctx, "r", auditEvent("create", "bob", "ns", "x", "u1", "5")); err != nil {
		t.Fatal(err)
	}
	del := auditEvent("delete", "alice", "ns", "x", "", "")
	del.ResponseObject = &runtime.Unknown{Raw: []byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":{"name":"x","kind":"configmaps","uid":"u1"}}`)}
	if err := idx.RecordFact(ctx, "r", del); err != nil {
		t.Fatal(err)
	}
	if got := allKeys(t, raw); fmt.Sprint(got) != fmt.Sprint([]string{"del:author:v1:audit:route:r:/configmaps:object:u1:5", "del:author:v1:audit:route:r:/configmaps:object:u1:deleter", "del:author:v1:audit:route:r:/configmaps:object:u1:last"}) {
		t.Fatalf("keys = %q", got)
	}
	r := idx.LookupAuthorResolution(ctx, "r", cmGVR, "u1", "6", false)
	if r.Result != AttributionWeak || r.Fact.Author != "alice" || r.Fact.Verb != "delete" || r.Fact.UID != "u1" {
		t.Fatalf("removal = %+v", r)
	}
}

// TestCommandAuthorFirstRecordWins: a second record for a UID (a forged admission call) never
// replaces the submitter recorded first.
func TestCommandAuthorFirstRecordWins(t *testing.T) {
	s, _ := newAttributionStore(t, "first")
	ctx := context.Background()
	cs := s.CommandAuthorStore()
	real := CommandAuthor{Author: "tenant-a", RequestedAt: "2026-11-29T10:00:00Z"}
	if err := cs.RecordCommandAuthor(ctx, "u1", real); err != nil {
		t.Fatal(err)
	}
	// The API server retrying the same admission records the same submitter: no error.
	if err := cs.RecordCommandAuthor(ctx, "u1", CommandAuthor{Author: "tenant-a", RequestedAt: "2026-11-29T10:00:01Z"}); err != nil {
		t.Fatalf("a retried admission failed: %v", err)
	}
	forged := CommandAuthor{Author: "platform-admin", Email: "admin@example.com"}
	err := cs.RecordCommandAuthor(ctx, "u1", forged)
	if got, _ := cs.LookupCommandAuthor(ctx, "u1"); got != real {
		t.Fatalf("after a second record the author is %+v, want the first %+v", got, real)
	}
	if !errors.Is(err, ErrCommandAuthorRecorded) {
		t.Fatalf("a conflicting second record returned %v, want ErrCommandAuthorRecorded", err)
	}
}
