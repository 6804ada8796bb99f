package store

// Author attribution layer on the RedisStore connection ("v3 schema").
//
// Audit facts (one per accepted, mutating audit event; every field %-escaped):
//
//	<prefix>:author:v1:audit:route:<route>:<group/resource>:object:<uid>:<rv>   exact, immutable
//	<prefix>:author:v1:audit:route:<route>:<group/resource>:object:<uid>:last   last writer of the object
//	<prefix>:author:v1:audit:route:<route>:<group/resource>:object:<uid>:deleter    first delete of the object
//	<prefix>:author:v1:audit:route:<route>:<group/resource>:rv:<rv>             an RV but no UID
//	<prefix>:author:v1:audit:route:<route>:<group/resource>:scope:cluster        collection deletes without a body
//	<prefix>:author:v1:audit:route:<route>:<group/resource>:scope:namespace:<ns> (sorted sets, by request time)
//
// Announcements (one PUBLISH per audit batch, see announce.go):
//
//	<prefix>:author:v1:audit:route:<route>:announce
//
// Command authors (one per admitted command object):
//
//	<prefix>:author:v1:command:<uid>
//
// Values are JSON (AuthorFact, CommandAuthor). Every key carries a TTL; nothing deletes them and
// there are no tombstones, so an expired fact reads exactly like one that never arrived.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// DefaultAttributionFactTTL is how long an attribution fact is kept waiting for the matching watch
// event to join it. Facts are never object state, so they expire on their own; after the TTL a
// miss is simply "absent". Configurable with --author-attribution-ttl.
const DefaultAttributionFactTTL = 10 * time.Minute

// CommandAuthorTTL is how long a command author record survives. A command is normally processed
// within seconds of admission; the TTL only bounds what a missed or failed command leaves behind.
const CommandAuthorTTL = 24 * time.Hour

// Verb values that carry special meaning for attribution.
const (
	verbDeleteCollection = "deletecollection"
	verbDelete           = "delete"
	serviceAccountPrefix = "system:serviceaccount:"
	lastSegment          = "last"
	deleterSegment       = "deleter"
)

// AttributionResult is the bounded resolver outcome recorded for each watch event.
type AttributionResult string

const (
	// AttributionExactUser is an exact UID+resourceVersion match for a human user.
	AttributionExactUser AttributionResult = "exact_user"
	// AttributionExactServiceAccount is an exact UID+resourceVersion match for a named service
	// account.
	AttributionExactServiceAccount AttributionResult = "exact_serviceaccount"
	// AttributionWeak is a non-exact match: the uid-latest :last pointer or the rv-only escape
	// hatch, used by known RV-mismatch events and no-UID facts respectively.
	AttributionWeak AttributionResult = "weak"
	// AttributionExactDeleteCollectionItem is a match to a fact expanded from a deletecollection
	// response body: a per-object credit for one member of a collection delete, joined by UID via
	// :last. The result follows the fact's verb, not the key that matched.
	AttributionExactDeleteCollectionItem AttributionResult = "exact_deletecollection_item"
	// AttributionExactDeleteCollectionScope is a removal credited to a collection delete whose
	// audit event named no items (a Metadata-level policy, an aggregated API, a response without
	// a body): the delete covered the object's namespace and resource, and the removal was seen
	// within the delete's time window.
	AttributionExactDeleteCollectionScope AttributionResult = "exact_deletecollection_scope"
	// AttributionAbsent means no usable author fact matched (before the grace elapsed).
	AttributionAbsent AttributionResult = "absent"
)

// AuthorFact is the minimal attribution fact stored per accepted, mutating audit event and read
// back by the watch-event resolver. It names an author candidate and the evidence needed to judge
// confidence; it is never object state. The object identity lives in the value, so a fact is
// self-describing.
type AuthorFact struct {
	GroupResource   string `json:"groupResource,omitempty"`
	Namespace       string `json:"namespace,omitempty"`
	Name            string `json:"name,omitempty"`
	UID             string `json:"uid,omitempty"`
	Author          string `json:"author"`
	DisplayName     string `json:"displayName,omitempty"`
	Email           string `json:"email,omitempty"`
	Verb            string `json:"verb,omitempty"`
	Subresource     string `json:"subresource,omitempty"`
	AuditID         string `json:"auditID,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	StageTimestamp  string `json:"stageTimestamp,omitempty"`
	// RequestReceived is when the API server received the request (RFC3339Nano); with
	// StageTimestamp it is the time window of a collection delete.
	RequestReceived  string `json:"requestReceivedTimestamp,omitempty"`
	IsServiceAccount bool   `json:"isServiceAccount,omitempty"`
}

// AuthorResolution is the structured result of an attribution lookup.
type AuthorResolution struct {
	Fact   AuthorFact
	Result AttributionResult
	// Provisional is set on a removal matched only by a fact that may not be the deleting
	// request's (the :last pointer of an earlier write, or a collection delete's scope): a
	// waiting resolver keeps waiting for a better match and takes it only when the grace ends.
	Provisional bool
}

// AttributionIndex is the optional Redis-backed lookup table that names a commit author from audit
// facts. It shares a RedisStore's connection, is built only when author attribution is enabled,
// and stores only attribution facts, never object state or cursors.
type AttributionIndex struct {
	client  *redis.Client
	prefix  string
	factTTL time.Duration
}

// AttributionIndex builds the optional author-attribution fact index on this store's connection.
// factTTL <= 0 means DefaultAttributionFactTTL. The store and its cursors never depend on it.
func (s *RedisStore) AttributionIndex(factTTL time.Duration) *AttributionIndex {
	if factTTL <= 0 {
		factTTL = DefaultAttributionFactTTL
	}
	return &AttributionIndex{client: s.client, prefix: s.prefix, factTTL: factTTL}
}

// FactTTL returns how long facts written by this index live.
func (a *AttributionIndex) FactTTL() time.Duration { return a.factTTL }

// auditBase is "<prefix>:author:v1:audit:route:<route>:<group/resource>".
func (a *AttributionIndex) auditBase(route, groupResource string) string {
	return a.prefix + ":author:v1:audit:route:" + escapeKeyField(route) + ":" + escapeKeyField(groupResource)
}

func (a *AttributionIndex) exactKey(route, gr, uid, rv string) string {
	return a.auditBase(route, gr) + ":object:" + escapeKeyField(uid) + ":" + escapeKeyField(rv)
}

// lastKey cannot collide with an exact key whose RV is "last": RVs are escaped the same way, so
// the distinction would need an RV literally named "last", which the API server never issues.
func (a *AttributionIndex) lastKey(route, gr, uid string) string {
	return a.auditBase(route, gr) + ":object:" + escapeKeyField(uid) + ":" + lastSegment
}

// deleterKey holds the first delete of an object (SET NX): the removal credit sticks to it.
func (a *AttributionIndex) deleterKey(route, gr, uid string) string {
	return a.auditBase(route, gr) + ":object:" + escapeKeyField(uid) + ":" + deleterSegment
}

func (a *AttributionIndex) rvKey(route, gr, rv string) string {
	return a.auditBase(route, gr) + ":rv:" + escapeKeyField(rv)
}

// FactScanPattern is the SCAN pattern that matches every audit fact of this index's key prefix.
// ValidateKeyPrefix rejects glob characters so this pattern can never reach another keyspace.
func (a *AttributionIndex) FactScanPattern() string {
	return a.prefix + ":author:v1:audit:*"
}

// CountFacts counts the stored audit facts with SCAN (never KEYS, which blocks the server).
func (a *AttributionIndex) CountFacts(ctx context.Context) (int, error) {
	n := 0
	iter := a.client.Scan(ctx, 0, a.FactScanPattern(), 1000).Iterator()
	for iter.Next(ctx) {
		n++
	}
	if err := iter.Err(); err != nil {
		return n, fmt.Errorf("scan attribution facts %s: %w", a.FactScanPattern(), err)
	}
	return n, nil
}

// groupResourceOf is the "<group>/<resource>" key field; the core group is the empty group.
func groupResourceOf(group, resource string) string { return group + "/" + resource }

// objectMeta is the part of a response object that attribution reads.
type objectMeta struct {
	Metadata struct {
		Name            string `json:"name"`
		Namespace       string `json:"namespace"`
		UID             string `json:"uid"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	// Details is set when the response is a Status: most resources answer a DELETE with
	// Status{details: {name, uid}} instead of the deleted object.
	Details *struct {
		Name string `json:"name"`
		UID  string `json:"uid"`
	} `json:"details"`
}

// responseMeta reads the persisted object's metadata from the audit response, or the name and
// UID of a Status's details; zero when the response is absent (Metadata audit level) or not JSON.
func responseMeta(ev *auditv1.Event) objectMeta {
	var m objectMeta
	if ev.ResponseObject == nil || len(ev.ResponseObject.Raw) == 0 {
		return m
	}
	if err := json.Unmarshal(ev.ResponseObject.Raw, &m); err != nil {
		return objectMeta{}
	}
	if d := m.Details; d != nil && m.Metadata.UID == "" {
		m.Metadata.UID = d.UID
		if m.Metadata.Name == "" {
			m.Metadata.Name = d.Name
		}
	}
	return m
}

// effectiveUser is whom the request acted as: the impersonated user when impersonation was used.
func effectiveUser(ev *auditv1.Event) authnv1.UserInfo {
	if ev.ImpersonatedUser != nil && ev.ImpersonatedUser.Username != "" {
		return *ev.ImpersonatedUser
	}
	return ev.User
}

// IsServiceAccountName reports whether username is a named service account
// (system:serviceaccount:<namespace>:<name>).
func IsServiceAccountName(username string) bool {
	rest, ok := strings.CutPrefix(username, serviceAccountPrefix)
	if !ok {
		return false
	}
	ns, name, ok := strings.Cut(rest, ":")
	return ok && ns != "" && name != "" && !strings.Contains(name, ":")
}

// UserClaims picks a display name and an email from a user's extra claims (see claimsOf); the
// command admission webhook uses it for CommandAuthor.
func UserClaims(u authnv1.UserInfo) (displayName, email string) { return claimsOf(u) }

// claimsOf picks a display name and an email from the user's extra claims. Authenticators name
// these keys differently (OIDC claim mappings, proxies), so the last path segment of the key is
// matched: ".../email", "email", ".../name", "display-name", "full-name" and the like.
func claimsOf(u authnv1.UserInfo) (displayName, email string) {
	for k, vals := range u.Extra {
		if len(vals) == 0 || strings.TrimSpace(vals[0]) == "" {
			continue
		}
		seg := strings.ToLower(k[strings.LastIndex(k, "/")+1:])
		v := strings.TrimSpace(vals[0])
		switch seg {
		case "email", "mail", "e-mail":
			if email == "" && strings.Contains(v, "@") {
				email = v
			}
		case "name", "displayname", "display-name", "display_name", "full-name", "fullname", "full_name":
			if displayName == "" {
				displayName = v
			}
		}
	}
	return displayName, email
}

// factFromEvent builds the common part of a fact; ok=false when the event has no user.
func factFromEvent(ev *auditv1.Event) (AuthorFact, bool) {
	u := effectiveUser(ev)
	if u.Username == "" {
		return AuthorFact{}, false
	}
	display, email := claimsOf(u)
	f := AuthorFact{
		Author:           u.Username,
		DisplayName:      display,
		Email:            email,
		Verb:             ev.Verb,
		AuditID:          string(ev.AuditID),
		IsServiceAccount: IsServiceAccountName(u.Username),
	}
	if !ev.StageTimestamp.IsZero() {
		f.StageTimestamp = ev.StageTimestamp.UTC().Format(time.RFC3339Nano)
	}
	if !ev.RequestReceivedTimestamp.IsZero() {
		f.RequestReceived = ev.RequestReceivedTimestamp.UTC().Format(time.RFC3339Nano)
	}
	if ev.ObjectRef != nil {
		f.GroupResource = groupResourceOf(ev.ObjectRef.APIGroup, ev.ObjectRef.Resource)
		f.Namespace = ev.ObjectRef.Namespace
		f.Name = ev.ObjectRef.Name
		f.Subresource = ev.ObjectRef.Subresource
	}
	return f, true
}

// RecordFact stores the attribution fact for one accepted, mutating audit event. A UID-bearing
// fact writes the immutable exact key (uid+rv, first write wins) and overwrites the :last pointer;
// a fact with an RV but no UID writes the type-scoped rv-only key instead. It is a no-op for events
// without an objectRef, a resolvable name, or a user, which can never name an author. The UID and
// RV come from the persisted object in the response (RequestResponse audit level), falling back
// to the objectRef. The caller has already rejected reads, failures, dry runs and other stages.
func (a *AttributionIndex) RecordFact(ctx context.Context, auditRoute string, event auditv1.Event) error {
	if event.ObjectRef == nil || event.ObjectRef.Resource == "" {
		return nil
	}
	f, ok := factFromEvent(&event)
	if !ok {
		return nil
	}
	meta := responseMeta(&event).Metadata
	if f.Name == "" {
		f.Name = meta.Name
	}
	if f.Namespace == "" {
		f.Namespace = meta.Namespace
	}
	if f.Name == "" {
		return nil
	}
	f.UID = meta.UID
	if f.UID == "" {
		f.UID = string(event.ObjectRef.UID)
	}
	// Only the response carries the post-write RV the watch event presents; the objectRef's RV is
	// the request's precondition and would name the wrong version.
	f.ResourceVersion = meta.ResourceVersion
	if f.UID == "" && f.ResourceVersion == "" {
		return nil
	}
	val, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode attribution fact: %w", err)
	}
	pipe := a.client.Pipeline()
	switch {
	case f.UID != "":
		if f.ResourceVersion != "" {
			pipe.SetArgs(ctx, a.exactKey(auditRoute, f.GroupResource, f.UID, f.ResourceVersion), val, redis.SetArgs{Mode: "NX", TTL: a.factTTL})
		}
		pipe.Set(ctx, a.lastKey(auditRoute, f.GroupResource, f.UID), val, a.factTTL)
		if f.Verb == verbDelete {
			// The first delete of an object keeps the removal credit: a finalizer patch by a
			// controller later rewrites :last, never this.
			pipe.SetArgs(ctx, a.deleterKey(auditRoute, f.GroupResource, f.UID), val, redis.SetArgs{Mode: "NX", TTL: a.factTTL})
		}
	default:
		pipe.SetArgs(ctx, a.rvKey(auditRoute, f.GroupResource, f.ResourceVersion), val, redis.SetArgs{Mode: "NX", TTL: a.factTTL})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("record attribution fact %s %s/%s (audit %s): %w", f.GroupResource, f.Namespace, f.Name, f.AuditID, err)
	}
	return nil
}

// RecordDeleteCollectionFacts expands a deletecollection response body into one uid-latest (:last)
// and one deleter fact per listed object, joined by UID against each object's removal watch
// event. It is a no-op for any other verb. When the audit event names no items (no response at
// the Metadata level, an aggregated API's Status, a hollow or unparseable body) it records a
// scope fact instead: the collection's namespace and resource with the request's time window
// (see recordScope), and removals in that scope and window are credited to it.
//
// Only :last and deleter keys are written: an item's resourceVersion is the pre-delete RV, which
// no removal event presents, so exact and rv-only keys would be dead. Finalizer-pending items are
// not skipped: a deletionTimestamp already removes the file (deletion as intent), so whoever ran
// the collection delete is credited with that removal.
func (a *AttributionIndex) RecordDeleteCollectionFacts(ctx context.Context, auditRoute string, event auditv1.Event) error {
	if event.Verb != verbDeleteCollection || event.ObjectRef == nil || event.ObjectRef.Resource == "" {
		return nil
	}
	base, ok := factFromEvent(&event)
	if !ok {
		return nil
	}
	items, listed := deletedItems(&event)
	if !listed {
		return a.recordScope(ctx, auditRoute, base)
	}
	if len(items) == 0 {
		return nil // the collection was empty: nothing was removed
	}
	pipe := a.client.Pipeline()
	n := 0
	for _, it := range items {
		m := it.Metadata
		if m.UID == "" || m.Name == "" {
			continue
		}
		f := base
		f.Name, f.UID, f.ResourceVersion = m.Name, m.UID, m.ResourceVersion
		if m.Namespace != "" {
			f.Namespace = m.Namespace
		}
		val, err := json.Marshal(f)
		if err != nil {
			return fmt.Errorf("encode deletecollection fact: %w", err)
		}
		pipe.Set(ctx, a.lastKey(auditRoute, f.GroupResource, f.UID), val, a.factTTL)
		pipe.SetArgs(ctx, a.deleterKey(auditRoute, f.GroupResource, f.UID), val, redis.SetArgs{Mode: "NX", TTL: a.factTTL})
		n++
	}
	if n == 0 {
		// Items without UIDs cannot be joined one by one; the scope still can.
		return a.recordScope(ctx, auditRoute, base)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("record %d deletecollection facts for %s (audit %s): %w", n, base.GroupResource, base.AuditID, err)
	}
	return nil
}

// CommandAuthor is the authorship captured at admission for one command object: only what a git
// commit author needs. It is a 1:1 capture, not a post-persist join.
type CommandAuthor struct {
	Author      string `json:"author"`
	DisplayName string `json:"displayName,omitempty"`
	Email       string `json:"email,omitempty"`
	RequestedAt string `json:"requestedAt,omitempty"` // RFC3339Nano, for lag metrics and debugging
}

// CommandAuthorStore records and reads command authorship on a RedisStore's connection. It is
// independent of --author-attribution, which only governs mirrored-resource attribution.
type CommandAuthorStore struct {
	client *redis.Client
	prefix string
	ttl    time.Duration
}

// CommandAuthorStore builds the command-authorship store on this connection. Its records live in
// the author domain's separate command subfamily with their own cleanup TTL (CommandAuthorTTL).
func (s *RedisStore) CommandAuthorStore() *CommandAuthorStore {
	return &CommandAuthorStore{client: s.client, prefix: s.prefix, ttl: CommandAuthorTTL}
}

func (s *CommandAuthorStore) key(uid types.UID) string {
	return s.prefix + ":author:v1:command:" + escapeKeyField(string(uid))
}

// RecordCommandAuthor is the admission-side write: it captures the authenticated submitter when a
// command CREATE is admitted, keyed by the object's UID. The first record wins (SET NX): the API
// server calls the webhook before the object exists, so nobody can know the UID earlier, and a
// later call for the same UID cannot replace the submitter. A retried admission that names the
// same user is a no-op; a different user is ErrCommandAuthorRecorded.
func (s *CommandAuthorStore) RecordCommandAuthor(ctx context.Context, uid types.UID, author CommandAuthor) error {
	if uid == "" {
		return errors.New("record command author: the object has no UID")
	}
	if author.Author == "" {
		return fmt.Errorf("record command author for %s: empty author", uid)
	}
	val, err := json.Marshal(author)
	if err != nil {
		return fmt.Errorf("encode command author: %w", err)
	}
	set, err := s.client.SetNX(ctx, s.key(uid), val, s.ttl).Result()
	if err != nil {
		return fmt.Errorf("record command author for %s: %w", uid, err)
	}
	if set {
		return nil
	}
	if have, ok := s.LookupCommandAuthor(ctx, uid); ok && have.Author == author.Author {
		return nil
	}
	return fmt.Errorf("record command author %q for %s: %w", author.Author, uid, ErrCommandAuthorRecorded)
}

// LookupCommandAuthor is the controller-side read, keyed by the persisted object's UID. ok=false
// means no record was captured (the webhook is not configured, or a best-effort write missed) and
// the controller commits as the committer.
func (s *CommandAuthorStore) LookupCommandAuthor(ctx context.Context, uid types.UID) (CommandAuthor, bool) {
	v, err := s.client.Get(ctx, s.key(uid)).Result()
	if err != nil {
		return CommandAuthor{}, false
	}
	var a CommandAuthor
	if json.Unmarshal([]byte(v), &a) != nil || a.Author == "" {
		return CommandAuthor{}, false
	}
	return a, true
}

// ErrCommandAuthorRecorded says a command already has a recorded submitter that differs from
// the one offered: the first record stands.
var ErrCommandAuthorRecorded = errors.New("a different submitter is already recorded for this command")
