package provision

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/shard"
	"github.com/siteops/siteops/internal/tenant/metrics"
	"github.com/siteops/siteops/internal/tenant/resync"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=serving.knative.dev,resources=services,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch;update

// SecretCache returns a cache holding only Secrets named valkey-acl, so the controller sees every
// change to a tenant's credentials Secret (including one that drops the operator's label) without
// caching every Secret of the cluster. Add it to the manager before use.
func SecretCache(mgr ctrl.Manager) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Field: fields.OneTermEqualSelector("metadata.name", decov1.ValkeyACLSecretName)},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("create Secret cache: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("add Secret cache: %w", err)
	}
	return c, nil
}

// namespaceChanged passes namespace events that can change what the reconciler does.
var namespaceChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return true },
	DeleteFunc: func(event.DeleteEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		for _, k := range []string{decov1.AnnotationValkeyACL, decov1.AnnotationValkeyACLSync, decov1.AnnotationValkeyACLRotate, AnnotationRevoke} {
			if e.ObjectOld.GetAnnotations()[k] != e.ObjectNew.GetAnnotations()[k] {
				return true
			}
		}
		return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero() ||
			slices.Contains(e.ObjectOld.GetFinalizers(), Finalizer) != slices.Contains(e.ObjectNew.GetFinalizers(), Finalizer)
	},
	GenericFunc: func(event.GenericEvent) bool { return true },
}

// Workers is how many namespaces are reconciled at once, so a namespace whose reconcile waits
// (a slow node, many workloads to restart) does not hold up the others.
const Workers = 4

// SetupWithManager registers the controller. secrets is the cache from SecretCache. Changes of
// a tenant's Secret reconcile its namespace at most once per SecretEventInterval.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, secrets cache.Cache) error {
	sibling := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: Sibling(o.GetName())}}}
	})
	siblingChanged := predicate.Or[client.Object](namespaceChanged, predicate.Funcs{DeleteFunc: func(event.DeleteEvent) bool { return true }})
	secretToNamespace := &spacedSecretHandler{spacer: &spacer{interval: SecretEventInterval}}
	isCredentials := predicate.NewTypedPredicateFuncs(func(s *corev1.Secret) bool { return s.Name == decov1.ValkeyACLSecretName })
	return ctrl.NewControllerManagedBy(mgr).
		Named("tenant-namespace").
		WithOptions(controller.Options{MaxConcurrentReconciles: Workers}).
		For(&corev1.Namespace{}, builder.WithPredicates(r.Shard.For(namespaceChanged))).
		Watches(&corev1.Namespace{}, sibling, builder.WithPredicates(siblingChanged)).
		WatchesRawSource(source.Kind(secrets, &corev1.Secret{}, handler.TypedEventHandler[*corev1.Secret, reconcile.Request](secretToNamespace), isCredentials)).
		Complete(shard.Wrap(r.Shard, mgr.GetClient(), func() client.Object { return &corev1.Namespace{} }, r))
}

// TenantLister lists the managed tenants from Namespaces only: opted in, holding the finalizer
// and carrying a password digest. Secrets are never read: a tenant can write its Secret, so
// nothing in one may decide which users exist or what they accept.
type TenantLister struct {
	// Namespaces reads namespaces.
	Namespaces client.Reader
	// Shard selects the namespaces of this instance's shard.
	Shard shard.Selector
	// ReservedUsers are never listed (besides AlwaysReserved).
	ReservedUsers []string
	// ReservedKeyPrefixes: users whose key patterns cover one are never listed.
	ReservedKeyPrefixes []string
	// Events records invalid namespace state; nil records none.
	Events Recorder
}

// List returns every managed tenant and sets the tenants gauge, so the gauge is seeded at start
// by the first resync round. A namespace whose state is partly invalid is listed with its valid
// digests, counted in siteops_tenant_acl_user_errors_total and evented; one without a valid
// current digest is left out (its reconcile writes one).
func (l *TenantLister) List(ctx context.Context) ([]resync.Tenant, error) {
	var list corev1.NamespaceList
	if err := l.Namespaces.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	byUser := map[string][]corev1.Namespace{}
	for _, ns := range list.Items {
		if !Wanted(&ns) || !slices.Contains(ns.Finalizers, Finalizer) || !l.Shard.Owns(&ns) {
			continue
		}
		user := Username(ns.Name)
		if Reserved(user, l.ReservedUsers) || CoveredKeyPrefix(user, l.ReservedKeyPrefixes) != "" {
			continue
		}
		byUser[user] = append(byUser[user], ns)
	}
	out := make([]resync.Tenant, 0, len(byUser))
	for _, user := range slices.Sorted(maps.Keys(byUser)) {
		owner := Owner(byUser[user])
		i := slices.IndexFunc(byUser[user], func(ns corev1.Namespace) bool { return ns.Name == owner })
		ns := &byUser[user][i]
		st, err := StateFrom(ns)
		if err != nil {
			metrics.UserErrors.WithLabelValues(ns.Name).Inc()
			if l.Events != nil {
				l.Events.Eventf(ns, nil, corev1.EventTypeWarning, ReasonInvalidState, "Resync",
					"ignored invalid Valkey ACL state on the namespace: %v", err)
			}
		}
		if st.Digest == "" {
			continue
		}
		out = append(out, resync.Tenant{Namespace: ns.Name, User: st.User(user)})
	}
	metrics.Tenants.Set(float64(len(out)))
	return out, nil
}
