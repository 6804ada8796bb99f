package provision

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/metrics"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=serving.knative.dev,resources=services,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch;update

// SecretCache returns a cache holding only Secrets this operator manages, so the controller
// follows its credential Secrets without caching every Secret of the cluster. Add it to the
// manager before use.
func SecretCache(mgr ctrl.Manager) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Label: labels.SelectorFromSet(labels.Set{decov1.LabelManagedBy: decov1.ManagedByValue})},
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
		for _, k := range []string{decov1.AnnotationValkeyACL, decov1.AnnotationValkeyACLSync, decov1.AnnotationValkeyACLRotate} {
			if e.ObjectOld.GetAnnotations()[k] != e.ObjectNew.GetAnnotations()[k] {
				return true
			}
		}
		return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero() ||
			slices.Contains(e.ObjectOld.GetFinalizers(), Finalizer) != slices.Contains(e.ObjectNew.GetFinalizers(), Finalizer)
	},
	GenericFunc: func(event.GenericEvent) bool { return true },
}

// SetupWithManager registers the controller. secrets is the cache from SecretCache.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, secrets cache.Cache) error {
	sibling := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: Sibling(o.GetName())}}}
	})
	siblingChanged := predicate.Or[client.Object](namespaceChanged, predicate.Funcs{DeleteFunc: func(event.DeleteEvent) bool { return true }})
	secretToNamespace := handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, s *corev1.Secret) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: s.Namespace}}}
	})
	isCredentials := predicate.NewTypedPredicateFuncs(func(s *corev1.Secret) bool { return s.Name == decov1.ValkeyACLSecretName })
	return ctrl.NewControllerManagedBy(mgr).
		Named("tenant-namespace").
		For(&corev1.Namespace{}, builder.WithPredicates(namespaceChanged)).
		Watches(&corev1.Namespace{}, sibling, builder.WithPredicates(siblingChanged)).
		WatchesRawSource(source.Kind(secrets, &corev1.Secret{}, secretToNamespace, isCredentials)).
		Complete(r)
}

// Users lists every managed tenant's credentials: Secrets this operator wrote, in namespaces
// that still opt in and hold the finalizer. It also sets the tenants gauge, so the gauge is
// seeded from the Secrets at startup by the first resync round.
func Users(secrets, namespaces client.Reader, adminUser string) func(ctx context.Context) ([]acl.User, error) {
	return func(ctx context.Context) ([]acl.User, error) {
		var list corev1.SecretList
		if err := secrets.List(ctx, &list, client.MatchingLabels{decov1.LabelManagedBy: decov1.ManagedByValue}); err != nil {
			return nil, fmt.Errorf("list tenant Secrets: %w", err)
		}
		byName := map[string]acl.User{}
		for i := range list.Items {
			s := &list.Items[i]
			if s.Name != decov1.ValkeyACLSecretName {
				continue
			}
			var ns corev1.Namespace
			if err := namespaces.Get(ctx, client.ObjectKey{Name: s.Namespace}, &ns); err != nil {
				continue
			}
			if !Wanted(&ns) || !slices.Contains(ns.Finalizers, Finalizer) {
				continue
			}
			name := string(s.Data[decov1.ValkeyACLUsernameKey])
			if Reserved(name, adminUser) {
				continue
			}
			if u, ok := CredentialsFrom(s, name); ok {
				byName[name] = u
			}
		}
		metrics.Tenants.Set(float64(len(byName)))
		return slices.Collect(maps.Values(byName)), nil
	}
}
