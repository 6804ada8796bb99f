// Package access says who a UI request acts for and what that person may do: people are
// authenticated by an authenticating proxy (over mTLS) or by a one-time local token, and every
// read is checked with the API server's own authorizer (SubjectAccessReview), so the UI shows a
// person exactly what their Kubernetes rights show.
package access

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Person is who a request acts for, as the API server knows them.
type Person struct {
	// User is the user name.
	User string
	// Groups are the person's groups.
	Groups []string
}

// key identifies a person in caches: the user and the sorted groups.
func (p Person) key() string {
	g := slices.Clone(p.Groups)
	slices.Sort(g)
	return p.User + "\x00" + strings.Join(g, "\x00")
}

// Check is one question for the authorizer: may the person do Verb on Resource?
type Check struct {
	// Verb such as get, list or patch.
	Verb string
	// Group is the API group; empty for the core group.
	Group string
	// Resource is the plural resource name.
	Resource string
	// Namespace the check is for; empty asks about every namespace.
	Namespace string
	// Name of one object; empty asks about all of them.
	Name string
}

// Reviewer asks the API server one Check for one person.
type Reviewer interface {
	Review(ctx context.Context, p Person, c Check) (bool, error)
}

// SubjectReviewer asks with SubjectAccessReviews, as the manager does for the people it serves.
type SubjectReviewer struct{ Client client.Client }

// Review creates a SubjectAccessReview for p.
func (r SubjectReviewer) Review(ctx context.Context, p Person, c Check) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: p.User, Groups: p.Groups, ResourceAttributes: c.attributes(),
	}}
	if err := r.Client.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("ask the API server whether %s may %s %s: %w", p.User, c.Verb, c.Resource, err)
	}
	return sar.Status.Allowed, nil
}

// SelfReviewer asks with SelfSubjectAccessReviews as the client's own identity: `siteops ui`
// runs as the kubeconfig's user, so the person is always that user.
type SelfReviewer struct{ Client client.Client }

// Review creates a SelfSubjectAccessReview; p is the client's own identity.
func (r SelfReviewer) Review(ctx context.Context, _ Person, c Check) (bool, error) {
	ssar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: c.attributes()}}
	if err := r.Client.Create(ctx, ssar); err != nil {
		return false, fmt.Errorf("ask the API server whether you may %s %s: %w", c.Verb, c.Resource, err)
	}
	return ssar.Status.Allowed, nil
}

func (c Check) attributes() *authorizationv1.ResourceAttributes {
	return &authorizationv1.ResourceAttributes{Verb: c.Verb, Group: c.Group, Resource: c.Resource, Namespace: c.Namespace, Name: c.Name}
}

// DefaultTTL is how long an answer is kept: seconds, so a revoked binding stops showing objects
// almost at once, while a page of many rows asks the API server once per namespace.
const DefaultTTL = 5 * time.Second

// maxEntries bounds the answers kept; past it the oldest half is dropped.
const maxEntries = 20000

// Authorizer answers Checks through a Reviewer and keeps each answer for a few seconds. An error
// is a denial: a person sees nothing the API server did not allow.
type Authorizer struct {
	reviewer Reviewer
	ttl      time.Duration
	now      func() time.Time

	mu      sync.Mutex
	answers map[answerKey]answer
}

type answerKey struct {
	person string
	check  Check
}

type answer struct {
	allowed bool
	at      time.Time
}

// NewAuthorizer keeps r's answers for ttl (DefaultTTL when zero).
func NewAuthorizer(r Reviewer, ttl time.Duration) *Authorizer {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Authorizer{reviewer: r, ttl: ttl, now: time.Now, answers: map[answerKey]answer{}}
}

// Allowed reports whether p may do c.
func (a *Authorizer) Allowed(ctx context.Context, p Person, c Check) bool {
	k := answerKey{p.key(), c}
	now := a.now()
	a.mu.Lock()
	if ans, ok := a.answers[k]; ok && now.Sub(ans.at) < a.ttl {
		a.mu.Unlock()
		return ans.allowed
	}
	a.mu.Unlock()
	allowed, err := a.reviewer.Review(ctx, p, c)
	if err != nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.answers) >= maxEntries {
		a.prune(now)
	}
	a.answers[k] = answer{allowed, now}
	return allowed
}

// prune drops expired answers, and every answer if that freed nothing.
func (a *Authorizer) prune(now time.Time) {
	for k, ans := range a.answers {
		if now.Sub(ans.at) >= a.ttl {
			delete(a.answers, k)
		}
	}
	if len(a.answers) >= maxEntries {
		clear(a.answers)
	}
}
