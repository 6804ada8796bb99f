// Package provision is the namespace controller of tenant cache isolation: a namespace annotated
// deco.sites/valkey-acl=true gets a Valkey ACL user on every node and a Secret holding its
// credentials. The username comes from the namespace name only, and the authority on passwords
// is kept on the Namespace, which tenants cannot change: the Secret is output, restored whenever
// it differs from what the operator wrote.
package provision

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/tenant/acl"
)

// Finalizer keeps a managed namespace until its ACL user is removed (or the delete timeout ends).
const Finalizer = "deco.sites/valkey-acl"

// Annotations on the Namespace: the operator's authoritative state. Tenants can write their
// Secrets but not their Namespace, so nothing here can be forged for another tenant's user.
const (
	// AnnotationPasswordDigest is the SHA-256 hex digest of the current password, as Valkey
	// stores it (#<hex>). Resyncs apply users from it without reading any Secret.
	AnnotationPasswordDigest = "deco.sites/valkey-acl-password-sha256"
	// AnnotationRetiring lists SHA-256 digests of earlier passwords, comma-separated, that stay
	// valid until every workload has rolled out with the current one.
	AnnotationRetiring = "deco.sites/valkey-acl-retiring"
	// AnnotationRotated is the value of the namespace's rotate annotation that was carried out.
	AnnotationRotated = "deco.sites/valkey-acl-rotated"
	// AnnotationRetiringSince is when the passwords in AnnotationRetiring began retiring (RFC
	// 3339): none of them stays valid past it plus the maximum grace.
	AnnotationRetiringSince = "deco.sites/valkey-acl-retiring-since"
	// AnnotationRevoked is the value of AnnotationRevoke that was carried out.
	AnnotationRevoked = "deco.sites/valkey-acl-revoked"
)

// AnnotationRevoke on a Namespace, set by the platform (siteops tenant rotate --revoke-now),
// removes every retiring password at once when its value changes, without waiting for the
// workloads to roll out.
const AnnotationRevoke = "deco.sites/valkey-acl-revoke"

// OperatorAnnotationPrefix starts every annotation the operator owns; none belongs on a tenant's
// Secret, so a Secret carrying one was edited and is restored.
const OperatorAnnotationPrefix = "deco.sites/valkey-acl"

// Event reasons recorded on namespaces.
const (
	ReasonProvisioned        = "ValkeyACLProvisioned"
	ReasonSelfHealed         = "ValkeyACLSelfHealed"
	ReasonRotated            = "ValkeyACLRotated"
	ReasonRotationCompleted  = "ValkeyACLRotationCompleted"
	ReasonProvisionFailed    = "ValkeyACLProvisionFailed"
	ReasonDeleted            = "ValkeyACLDeleted"
	ReasonDeleteFailed       = "ValkeyACLDeleteFailed"
	ReasonDeleteTimedOut     = "ValkeyACLDeleteTimedOut"
	ReasonReservedUsername   = "ValkeyACLReservedUsername"
	ReasonReservedKeyPrefix  = "ValkeyACLReservedKeyPrefix"
	ReasonUsernameCollision  = "ValkeyACLUsernameCollision"
	ReasonWorkloadsRestarted = "ValkeyACLWorkloadsRestarted"
	ReasonSecretRestored     = "ValkeyACLSecretRestored"
	ReasonInvalidState       = "ValkeyACLInvalidState"
)

// SitesPrefix is removed from a namespace name to form its username.
const SitesPrefix = "sites-"

// Username returns the ACL username of a namespace: its name without a leading "sites-".
func Username(namespace string) string { return strings.TrimPrefix(namespace, SitesPrefix) }

// NamespacesFor returns every namespace name whose username is user: user itself (unless it
// starts with "sites-", since "sites-foo" maps to "foo") and "sites-"+user.
func NamespacesFor(user string) []string {
	var out []string
	for _, name := range []string{user, SitesPrefix + user} {
		if Username(name) == user {
			out = append(out, name)
		}
	}
	return out
}

// Sibling returns the other namespace name that maps to the same username ("foo" for
// "sites-foo" and the reverse).
func Sibling(namespace string) string {
	if strings.HasPrefix(namespace, SitesPrefix) {
		return strings.TrimPrefix(namespace, SitesPrefix)
	}
	return SitesPrefix + namespace
}

// AlwaysReserved are usernames no tenant ever gets, whatever --valkey-acl-reserved-users says:
// the server's default user, and "lock", whose own key pattern "lock:*" would cover every
// tenant's lock keys.
var AlwaysReserved = []string{"default", "lock"}

// Reserved reports whether user must never be given to a tenant: empty, one of AlwaysReserved,
// or listed in reserved (the admin user, replication and Sentinel users, names the platform
// keeps).
func Reserved(user string, reserved []string) bool {
	return user == "" || slices.Contains(AlwaysReserved, user) || slices.Contains(reserved, user)
}

// KeyPrefixes returns the literal prefixes of user's key patterns: the rule grants
// ~<user>:* and ~lock:<user>:*.
func KeyPrefixes(user string) []string { return []string{user + ":", "lock:" + user + ":"} }

// CoveredKeyPrefix returns the first of reserved (key prefixes other software keeps on the same
// server, such as the mirror's --redis-key-prefix) that user's key patterns overlap, or "". Two
// patterns "a*" and "b*" share keys exactly when one of a and b starts with the other; a
// reserved prefix p owns the keys under "p:". ACL key patterns hold in every logical database,
// so a prefix kept in another database counts too.
func CoveredKeyPrefix(user string, reserved []string) string {
	for _, p := range reserved {
		owned := strings.TrimRight(p, ":") + ":"
		for _, mine := range KeyPrefixes(user) {
			if strings.HasPrefix(mine, owned) || strings.HasPrefix(owned, mine) {
				return p
			}
		}
	}
	return ""
}

// Wanted reports whether a namespace asks for a tenant user and is not being deleted.
func Wanted(ns *corev1.Namespace) bool {
	return ns.Annotations[decov1.AnnotationValkeyACL] == "true" && ns.DeletionTimestamp == nil
}

// Owner picks which of the namespaces mapping to one username gets it: one already holding the
// finalizer (it was provisioned first), else the oldest, then the first by name. Two namespaces
// never share a user.
func Owner(candidates []corev1.Namespace) string {
	if len(candidates) == 0 {
		return ""
	}
	c := slices.Clone(candidates)
	slices.SortFunc(c, func(a, b corev1.Namespace) int {
		fa, fb := slices.Contains(a.Finalizers, Finalizer), slices.Contains(b.Finalizers, Finalizer)
		switch {
		case fa && !fb:
			return -1
		case fb && !fa:
			return 1
		}
		if d := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); d != 0 {
			return d
		}
		return strings.Compare(a.Name, b.Name)
	})
	return c[0].Name
}

// State is the authoritative credential state of one namespace, kept in its annotations.
type State struct {
	// Digest is the SHA-256 hex digest of the current password; empty before the first provision.
	Digest string
	// Retiring are digests of earlier passwords still accepted until the workloads rolled out.
	Retiring []string
	// Rotated is the rotate annotation value last carried out.
	Rotated string
	// RetiringSince is when Retiring became non-empty; zero when it is empty.
	RetiringSince time.Time
	// Revoked is the revoke annotation value last carried out.
	Revoked string
}

// StateFrom reads a namespace's state. Values that are not SHA-256 hex digests are left out and
// reported in err (without quoting them): the caller keeps working with the valid ones.
func StateFrom(ns *corev1.Namespace) (State, error) {
	a := ns.Annotations
	st := State{Rotated: a[AnnotationRotated], Revoked: a[AnnotationRevoked]}
	var errs []error
	if v := a[AnnotationRetiringSince]; v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			// Read as "since now": the grace starts again rather than never ending.
			errs = append(errs, fmt.Errorf("annotation %s is not an RFC 3339 time", AnnotationRetiringSince))
		} else {
			st.RetiringSince = t
		}
	}
	if d := strings.TrimSpace(a[AnnotationPasswordDigest]); d != "" {
		if acl.ValidHash(d) {
			st.Digest = d
		} else {
			errs = append(errs, fmt.Errorf("annotation %s is not a SHA-256 hex digest", AnnotationPasswordDigest))
		}
	}
	bad := 0
	for _, h := range strings.Split(a[AnnotationRetiring], ",") {
		switch h = strings.TrimSpace(h); {
		case h == "":
		case !acl.ValidHash(h):
			bad++
		case h != st.Digest && !slices.Contains(st.Retiring, h):
			st.Retiring = append(st.Retiring, h)
		}
	}
	if bad > 0 {
		errs = append(errs, fmt.Errorf("annotation %s holds %d values that are not SHA-256 hex digests; they were ignored", AnnotationRetiring, bad))
	}
	return st, errors.Join(errs...)
}

// Apply writes st into annotations (which must not be nil).
func (st State) Apply(annotations map[string]string) {
	set := func(k, v string) {
		if v == "" {
			delete(annotations, k)
		} else {
			annotations[k] = v
		}
	}
	set(AnnotationPasswordDigest, st.Digest)
	set(AnnotationRetiring, strings.Join(st.Retiring, ","))
	set(AnnotationRotated, st.Rotated)
	since := ""
	if len(st.Retiring) > 0 && !st.RetiringSince.IsZero() {
		since = st.RetiringSince.UTC().Format(time.RFC3339)
	}
	set(AnnotationRetiringSince, since)
	set(AnnotationRevoked, st.Revoked)
}

// User returns the ACL user st describes, without its clear password.
func (st State) User(name string) acl.User {
	return acl.User{Name: name, PasswordHash: st.Digest, RetiredHashes: slices.Clone(st.Retiring)}
}

// SecretDrift lists what differs between s and the Secret the operator writes for user and
// password: the fields' names, never their values. An empty list means s is as written.
func SecretDrift(s *corev1.Secret, user, password string) []string {
	var d []string
	if string(s.Data[decov1.ValkeyACLUsernameKey]) != user {
		d = append(d, "username")
	}
	if string(s.Data[decov1.ValkeyACLPasswordKey]) != password {
		d = append(d, "password")
	}
	for _, k := range slices.Sorted(maps.Keys(s.Data)) {
		if k != decov1.ValkeyACLUsernameKey && k != decov1.ValkeyACLPasswordKey {
			d = append(d, "key "+k)
		}
	}
	if s.Immutable != nil && *s.Immutable {
		d = append(d, "immutable")
	}
	if s.Type != corev1.SecretTypeOpaque {
		d = append(d, "type")
	}
	if s.Labels[decov1.LabelManagedBy] != decov1.ManagedByValue {
		d = append(d, "label "+decov1.LabelManagedBy)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Annotations)) {
		if strings.HasPrefix(k, OperatorAnnotationPrefix) {
			d = append(d, "annotation "+k)
		}
	}
	return d
}

// Revision is the pod-template annotation value for credentials: it changes exactly when the
// current password changes, so a resync never restarts pods.
func Revision(u acl.User) string { return acl.HashPassword(u.Name + "\x00" + u.Password)[:16] }

// deleteDeadline is when a namespace's de-provisioning gives up on Valkey.
func deleteDeadline(ns *corev1.Namespace, firstAttempt time.Time, timeout time.Duration) time.Time {
	if ns.DeletionTimestamp != nil && ns.DeletionTimestamp.Time.Before(firstAttempt) {
		return ns.DeletionTimestamp.Add(timeout)
	}
	return firstAttempt.Add(timeout)
}
