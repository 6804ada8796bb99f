package store

// Reading attribution facts for one watch event, and the two kinds of facts removals need besides
// the per-write ones: the first delete of an object (sticky) and the scope of a collection delete
// whose audit event named no items.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// A removal is matched to a collection delete's scope when the mirror saw it between
// ScopeSkew before the API server received the request and ScopeLag after the response:
// the skew covers the clocks of the API server and the mirror, the lag a watch running behind.
const (
	ScopeSkew = time.Second
	ScopeLag  = 5 * time.Second
)

// scopeCandidates bounds the collection deletes of one scope read per lookup (the newest first).
const scopeCandidates = 16

// Query names the watch event whose author is looked up.
type Query struct {
	// Route is the audit route the facts were stored under.
	Route string
	// GVR, UID and RV identify the event's object and version.
	GVR schema.GroupVersionResource
	UID types.UID
	RV  string
	// Removal is set for a DELETED event or an object with a deletionTimestamp: its RV never
	// matches the deleting request's, so uid-level facts are consulted too.
	Removal bool
	// Namespace and At place a removal in a collection delete's scope and time window: the
	// object's namespace ("" when cluster-scoped) and when the mirror received the event. A zero
	// At skips scope facts.
	Namespace string
	At        time.Time
}

// LookupAuthor finds the strongest attribution fact for a watch event. ok=false means no fact
// matched (yet): the caller commits as the committer. exactCapable selects the join policy; see
// LookupAuthorResolution.
func (a *AttributionIndex) LookupAuthor(ctx context.Context, auditRoute string, gvr schema.GroupVersionResource, uid types.UID, rv string, exactCapable bool) (AuthorFact, bool) {
	r := a.LookupAuthorResolution(ctx, auditRoute, gvr, uid, rv, exactCapable)
	return r.Fact, r.Result != AttributionAbsent
}

// LookupAuthorResolution is Find without a scope (no namespace or time); a Redis failure reads
// as absent.
func (a *AttributionIndex) LookupAuthorResolution(ctx context.Context, auditRoute string, gvr schema.GroupVersionResource, uid types.UID, rv string, exactCapable bool) AuthorResolution {
	r, _ := a.Find(ctx, Query{Route: auditRoute, GVR: gvr, UID: uid, RV: rv, Removal: !exactCapable})
	return r
}

// LookupAuthorResolutionErr is LookupAuthorResolution that also reports a Redis failure.
func (a *AttributionIndex) LookupAuthorResolutionErr(ctx context.Context, auditRoute string, gvr schema.GroupVersionResource, uid types.UID, rv string, exactCapable bool) (AuthorResolution, error) {
	return a.Find(ctx, Query{Route: auditRoute, GVR: gvr, UID: uid, RV: rv, Removal: !exactCapable})
}

type keyKind int

const (
	kindExact keyKind = iota
	kindRV
	kindLast
	kindDeleter
)

// Find finds the strongest attribution fact for a watch event and classifies the match. All
// candidate keys are read in one round trip (one MGET, plus one ZREVRANGEBYSCORE for a removal
// with a scope).
//
// An ADDED or MODIFIED event reads only the immutable exact key object:<uid>:<rv> and the rv-only
// escape hatch: the :last pointer may name an older, different author than this write. A removal
// takes, in order: an exact fact of a delete; the object's first delete (deleter, sticky, so a
// controller's later finalizer patch never takes the credit); a :last or rv-only fact of a
// delete; and provisionally (see AuthorResolution.Provisional): a collection delete of the
// object's scope whose window holds the event, an exact fact of another write (the patch that
// removed the last finalizer), and the :last pointer of an earlier write.
//
// A miss (or an unreachable Redis, reported as the error) is AttributionAbsent; there is no
// tombstone and so no "expired" outcome.
func (a *AttributionIndex) Find(ctx context.Context, q Query) (AuthorResolution, error) {
	absent := AuthorResolution{Result: AttributionAbsent}
	gr := groupResourceOf(q.GVR.Group, q.GVR.Resource)
	uid := string(q.UID)
	var keys []string
	var kinds []keyKind
	if uid != "" && q.RV != "" {
		keys, kinds = append(keys, a.exactKey(q.Route, gr, uid, q.RV)), append(kinds, kindExact)
	}
	if q.RV != "" {
		keys, kinds = append(keys, a.rvKey(q.Route, gr, q.RV)), append(kinds, kindRV)
	}
	if q.Removal && uid != "" {
		keys, kinds = append(keys, a.lastKey(q.Route, gr, uid)), append(kinds, kindLast)
		keys, kinds = append(keys, a.deleterKey(q.Route, gr, uid)), append(kinds, kindDeleter)
	}
	scoped := q.Removal && !q.At.IsZero()
	if len(keys) == 0 && !scoped {
		return absent, nil
	}
	pipe := a.client.Pipeline()
	var mget *redis.SliceCmd
	if len(keys) > 0 {
		mget = pipe.MGet(ctx, keys...)
	}
	var scope *redis.StringSliceCmd
	if scoped {
		scope = pipe.ZRevRangeByScore(ctx, a.scopeKey(q.Route, gr, q.Namespace), &redis.ZRangeBy{
			Max: strconv.FormatInt(q.At.Add(ScopeSkew).UnixMilli(), 10), Min: "-inf", Count: scopeCandidates,
		})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return absent, fmt.Errorf("look up attribution facts for %s %s@%s: %w", gr, uid, q.RV, err)
	}
	found := map[keyKind]AuthorFact{}
	if mget != nil {
		for i, v := range mget.Val() {
			s, ok := v.(string)
			if !ok {
				continue
			}
			var f AuthorFact
			if json.Unmarshal([]byte(s), &f) != nil || f.Author == "" {
				continue
			}
			found[kinds[i]] = f
		}
	}
	if !q.Removal {
		if f, ok := found[kindExact]; ok {
			return AuthorResolution{Fact: f, Result: classify(f, kindExact)}, nil
		}
		if f, ok := found[kindRV]; ok {
			return AuthorResolution{Fact: f, Result: classify(f, kindRV)}, nil
		}
		return absent, nil
	}
	if f, ok := found[kindExact]; ok && isDelete(f.Verb) {
		return AuthorResolution{Fact: f, Result: classify(f, kindExact)}, nil
	}
	if f, ok := found[kindDeleter]; ok {
		return AuthorResolution{Fact: f, Result: classify(f, kindDeleter)}, nil
	}
	for _, k := range []keyKind{kindLast, kindRV} {
		if f, ok := found[k]; ok && isDelete(f.Verb) {
			return AuthorResolution{Fact: f, Result: classify(f, k)}, nil
		}
	}
	if scope != nil {
		if f, ok := inWindow(scope.Val(), q.At); ok {
			return AuthorResolution{Fact: f, Result: AttributionExactDeleteCollectionScope, Provisional: true}, nil
		}
	}
	// The write that produced the removal without being a delete: the patch removing the last
	// finalizer. The object's delete is usually found first; waiting gives it the grace period.
	if f, ok := found[kindExact]; ok {
		return AuthorResolution{Fact: f, Result: classify(f, kindExact), Provisional: true}, nil
	}
	for _, k := range []keyKind{kindLast, kindRV} {
		if f, ok := found[k]; ok {
			return AuthorResolution{Fact: f, Result: classify(f, k), Provisional: true}, nil
		}
	}
	return absent, nil
}

func isDelete(verb string) bool { return verb == verbDelete || verb == verbDeleteCollection }

// classify names the confidence of a matched fact: the verb decides deletecollection credit,
// the key kind decides exact versus weak.
func classify(f AuthorFact, kind keyKind) AttributionResult {
	switch {
	case f.Verb == verbDeleteCollection && f.Name == "":
		// A scope credit kept for the object by Stick: the delete never named it.
		return AttributionExactDeleteCollectionScope
	case f.Verb == verbDeleteCollection:
		return AttributionExactDeleteCollectionItem
	case kind != kindExact:
		return AttributionWeak
	case f.IsServiceAccount:
		return AttributionExactServiceAccount
	default:
		return AttributionExactUser
	}
}

// inWindow picks the newest collection delete (members are newest first) whose time window,
// widened by ScopeSkew and ScopeLag, holds at.
func inWindow(members []string, at time.Time) (AuthorFact, bool) {
	for _, m := range members {
		var f AuthorFact
		if json.Unmarshal([]byte(m), &f) != nil || f.Author == "" {
			continue
		}
		from, err1 := time.Parse(time.RFC3339Nano, f.RequestReceived)
		to, err2 := time.Parse(time.RFC3339Nano, f.StageTimestamp)
		if err1 != nil || err2 != nil {
			continue
		}
		if !at.Before(from.Add(-ScopeSkew)) && !at.After(to.Add(ScopeLag)) {
			return f, true
		}
	}
	return AuthorFact{}, false
}

// scopeKey is the sorted set of collection deletes without items in one namespace (or the
// cluster scope) of a resource.
func (a *AttributionIndex) scopeKey(route, gr, namespace string) string {
	if namespace == "" {
		return a.auditBase(route, gr) + ":scope:cluster"
	}
	return a.auditBase(route, gr) + ":scope:namespace:" + escapeKeyField(namespace)
}

// listBody is the part of a deletecollection response (a List) that attribution reads.
type listBody struct {
	Items []objectMeta `json:"items"`
}

// deletedItems reads the objects a deletecollection response lists; listed=false when the event
// carries no list at all (no response object, a Status, an unreadable body), so only the scope
// is known.
func deletedItems(ev *auditv1.Event) (items []objectMeta, listed bool) {
	if ev.ResponseObject == nil || len(ev.ResponseObject.Raw) == 0 {
		return nil, false
	}
	var probe struct {
		Items *json.RawMessage `json:"items"`
	}
	if json.Unmarshal(ev.ResponseObject.Raw, &probe) != nil || probe.Items == nil {
		return nil, false
	}
	var body listBody
	if json.Unmarshal(ev.ResponseObject.Raw, &body) != nil {
		return nil, false
	}
	return body.Items, true
}

// recordScope stores a collection delete that named no items under its namespace and resource,
// scored by when the API server received it, and drops the scope's members older than the fact
// TTL. Without both timestamps the window is unknown and nothing is recorded: a removal is never
// credited to a delete that may have ended long before it.
func (a *AttributionIndex) recordScope(ctx context.Context, route string, f AuthorFact) error {
	from, err1 := time.Parse(time.RFC3339Nano, f.RequestReceived)
	_, err2 := time.Parse(time.RFC3339Nano, f.StageTimestamp)
	if err1 != nil || err2 != nil {
		return nil //nolint:nilerr // without both timestamps nothing is recorded, by design (above)
	}
	val, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode deletecollection scope fact: %w", err)
	}
	key := a.scopeKey(route, f.GroupResource, f.Namespace)
	pipe := a.client.Pipeline()
	pipe.ZAdd(ctx, key, redis.Z{Score: float64(from.UnixMilli()), Member: val})
	pipe.ZRemRangeByScore(ctx, key, "-inf", "("+strconv.FormatInt(time.Now().Add(-a.factTTL).UnixMilli(), 10))
	pipe.Expire(ctx, key, a.factTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("record deletecollection scope %s in %q (audit %s): %w", f.GroupResource, f.Namespace, f.AuditID, err)
	}
	return nil
}

// Stick records f as the first delete of the object q names, unless one is recorded (SET NX):
// a resolver calls it when it credits a removal to a collection delete's scope, so the object's
// later removal events (the DELETED event after its finalizers are gone) keep that credit.
func (a *AttributionIndex) Stick(ctx context.Context, q Query, f AuthorFact) error {
	if q.UID == "" {
		return nil
	}
	f.UID = string(q.UID)
	val, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode removal credit: %w", err)
	}
	key := a.deleterKey(q.Route, groupResourceOf(q.GVR.Group, q.GVR.Resource), string(q.UID))
	if err := a.client.SetArgs(ctx, key, val, redis.SetArgs{Mode: "NX", TTL: a.factTTL}).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("record the removal credit of %s: %w", q.UID, err)
	}
	return nil
}
