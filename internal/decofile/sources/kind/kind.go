// Package kind defines what every kind of Decofile source provides, so that the delivery
// controller, the push index, the rollback and the CLI treat them alike: a kind resolves the
// spec's reference to a revision, downloads that revision within the bounds and egress policy,
// names the push-index keys and says whether its reference moves. Each kind is a package of
// its own; the sources package registers them.
package kind

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/egress"
)

// Kind is one value of spec.source.
type Kind interface {
	// Type is the spec.source value the kind serves.
	Type() decov1.SourceType
	// Remote reports whether the content comes from outside the Decofile, so a retrieval
	// takes one of the delivery's bounded retrieval slots.
	Remote() bool
	// Resolve turns the Decofile's reference into the revision to deliver, reading the
	// credentials it names; it fails with a *source.Error.
	Resolve(ctx context.Context, df *decov1.Decofile) (Resolution, error)
	// Keys are the push-index keys of what the Decofile follows: none when a push never
	// changes it (inline content, a pinned revision, a kind without push events).
	Keys(df *decov1.Decofile) []string
	// Moves reports whether the reference can point elsewhere later (a branch or tag), so it
	// is resolved again every spec.interval.
	Moves(df *decov1.Decofile) bool
	// Describe names where the content comes from, for people.
	Describe(df *decov1.Decofile) string
}

// Watcher is a kind whose content is announced by other Kubernetes objects: the delivery
// controller watches them, where the API server serves them, and reconciles at once the
// Decofiles whose Keys hold the WatchKey of a changed one.
type Watcher interface {
	// Watches are the kinds of objects to watch.
	Watches() []schema.GroupVersionKind
	// WatchKey is the key of a watched object of kind gvk, as Keys names it.
	WatchKey(gvk schema.GroupVersionKind, obj client.Object) string
}

// Resolution is a resolved revision and how to download it.
type Resolution struct {
	// Revision is the source's name for the version; "" for a kind without revisions, whose
	// content is always downloaded.
	Revision string
	// Download retrieves the content of Revision.
	Download func(ctx context.Context) (source.Blocks, error)
}

// Env is what the kinds reach their remotes and the tenant's objects with. The kinds without
// a fetcher of their own (oci) use the shared settings: the same flags bound every remote.
type Env struct {
	// Reader reads the objects a Decofile names in its own namespace: Secrets, Flux sources.
	Reader client.Reader
	// GitHub fetches github sources; Tokens decides which token a Decofile may use.
	GitHub *source.GitHub
	Tokens source.TokenPolicy
	// Git fetches git sources.
	Git *source.Git
	// Limits bound every download and its content.
	Limits source.Limits
	// Egress decides which URLs and destinations may be reached; nil means the default policy.
	Egress *egress.Policy
	// Timeout bounds each resolution and each download.
	Timeout time.Duration
	// Gate bounds the retrievals in flight per remote and per tenant.
	Gate *source.Gate
	// TempDir holds downloads while they are read.
	TempDir string
	// FluxStorage is the base URL of Flux's source-controller artifact storage; an artifact URL
	// in a Flux object's status is read there, whatever host it names.
	FluxStorage string
}

// Invalid is the error of a Decofile whose spec lacks the block its source kind needs.
func Invalid(format string, args ...any) error {
	return &source.Error{Reason: source.ReasonInvalidContent, Err: fmt.Errorf(format, args...)}
}

// Secret reads Secret name of namespace ns, named by the spec field field.
func Secret(ctx context.Context, r client.Reader, ns, name, field string) (*corev1.Secret, error) {
	var s corev1.Secret
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &source.Error{Reason: source.ReasonCredentials, Err: fmt.Errorf("secret %s named by %s does not exist in namespace %s", name, field, ns)}
		}
		return nil, &source.Error{Reason: source.ReasonUnavailable, Transient: true, Err: fmt.Errorf("read Secret %s: %w", name, err)}
	}
	return &s, nil
}

// SecretValue reads key of Secret name; "" name means no Secret and no value.
func SecretValue(ctx context.Context, r client.Reader, ns, name, key, field string) (string, error) {
	if name == "" {
		return "", nil
	}
	s, err := Secret(ctx, r, ns, name, field)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(s.Data[key]))
	if v == "" {
		return "", &source.Error{Reason: source.ReasonCredentials, Err: fmt.Errorf("secret %s named by %s has no %q key", name, field, key)}
	}
	return v, nil
}
