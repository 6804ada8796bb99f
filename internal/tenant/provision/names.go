// Package provision is the namespace controller of tenant cache isolation: a namespace annotated
// deco.sites/valkey-acl=true gets a Valkey ACL user on every node and a Secret holding its
// credentials, which stays the source of truth for every later resync.
package provision

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/tenant/acl"
)

// Finalizer keeps a managed namespace until its ACL user is removed (or the delete timeout ends).
const Finalizer = "deco.sites/valkey-acl"

// Annotations on the credentials Secret: operator state that is not secret.
const (
	// AnnotationRetiring lists SHA-256 digests of earlier passwords, comma-separated, that stay
	// valid until every workload has rolled out with the current one.
	AnnotationRetiring = "deco.sites/valkey-acl-retiring"
	// AnnotationRotated is the value of the namespace's rotate annotation that was carried out.
	AnnotationRotated = "deco.sites/valkey-acl-rotated"
)

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
	ReasonUsernameCollision  = "ValkeyACLUsernameCollision"
	ReasonWorkloadsRestarted = "ValkeyACLWorkloadsRestarted"
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

// Reserved reports whether user must never be given to a tenant: the server's default user, the
// operator's admin user, and "lock", whose own key pattern "lock:*" would cover every tenant's
// lock keys.
func Reserved(user, adminUser string) bool {
	return user == "" || user == "default" || user == "lock" || (adminUser != "" && user == adminUser)
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

// CredentialsFrom reads a Secret; ok is false when it lacks a password or names another user.
func CredentialsFrom(s *corev1.Secret, user string) (acl.User, bool) {
	if s == nil || string(s.Data[decov1.ValkeyACLUsernameKey]) != user || len(s.Data[decov1.ValkeyACLPasswordKey]) == 0 {
		return acl.User{}, false
	}
	u := acl.User{Name: user, Password: string(s.Data[decov1.ValkeyACLPasswordKey])}
	for _, h := range strings.Split(s.Annotations[AnnotationRetiring], ",") {
		if h = strings.TrimSpace(h); h != "" {
			u.RetiredHashes = append(u.RetiredHashes, h)
		}
	}
	return u, true
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
