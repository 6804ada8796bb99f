package s3target

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/shard"
)

// Finalizer on an s3-target Decofile (with --s3-delete-on-finalize) holds its deletion until
// its object is deleted.
const Finalizer = "deco.sites/s3-object"

// Finalizers adds Finalizer to s3-target Decofiles and deletes their object when they are
// deleted, unless an older Decofile of the namespace holds the same deploymentId (and so the
// same key). A Decofile flipped back to configmap keeps the finalizer: its object is still in the
// bucket until the Decofile goes. Without a store (delete-on-finalize off, or no s3 target) it
// only removes the finalizer, so a Decofile never stays Terminating because the operator was
// reconfigured.
type Finalizers struct {
	client   client.Client
	store    *Store // nil: do not delete objects
	recorder events.EventRecorder
}

// +kubebuilder:rbac:groups=deco.sites,resources=decofiles,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=deco.sites,resources=decofiles/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupFinalizers registers the finalizer controller with mgr. store is nil when objects are
// not to be deleted (--s3-delete-on-finalize off or no s3 target); sel picks the Decofiles of this
// instance's shard.
func SetupFinalizers(mgr ctrl.Manager, store *Store, sel shard.Selector) error {
	f := &Finalizers{client: mgr.GetClient(), store: store, recorder: mgr.GetEventRecorder("siteops-decofile-s3")}
	return ctrl.NewControllerManagedBy(mgr).
		Named("decofile-s3-finalizer").
		// Setting deletionTimestamp bumps the generation, as does a change of target.
		For(&decov1.Decofile{}, builder.WithPredicates(sel.For(predicate.GenerationChangedPredicate{}))).
		Complete(shard.Wrap(sel, mgr.GetClient(), func() client.Object { return &decov1.Decofile{} }, f))
}

// Reconcile adds or honours the finalizer.
func (f *Finalizers) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var df decov1.Decofile
	if err := f.client.Get(ctx, req.NamespacedName, &df); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	has := controllerutil.ContainsFinalizer(&df, Finalizer)
	if df.DeletionTimestamp == nil {
		switch {
		case f.store == nil && has:
			// Delete-on-finalize was turned off: the object is left to the lifecycle rule.
			return ctrl.Result{}, f.patch(ctx, &df, func(d *decov1.Decofile) { controllerutil.RemoveFinalizer(d, Finalizer) })
		case f.store == nil || has || df.TargetOrDefault() != decov1.TargetS3:
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, f.patch(ctx, &df, func(d *decov1.Decofile) { controllerutil.AddFinalizer(d, Finalizer) })
	}
	if !has {
		return ctrl.Result{}, nil
	}
	if f.store == nil {
		logf.FromContext(ctx).Info("delete-on-finalize is off: leaving the Decofile's S3 object to the bucket lifecycle rule")
		return ctrl.Result{}, f.patch(ctx, &df, func(d *decov1.Decofile) { controllerutil.RemoveFinalizer(d, Finalizer) })
	}
	// A newer Decofile with the same deploymentId was never delivered (DeploymentIDConflict):
	// the object at its key is the older one's, which still uses it.
	var list decov1.DecofileList
	if err := f.client.List(ctx, &list, client.InNamespace(df.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("list the Decofiles of namespace %s: %w", df.Namespace, err)
	}
	if holder := controller.DeploymentIDHolder(list.Items, &df); holder != nil {
		logf.FromContext(ctx).Info("leaving the S3 object to the Decofile that holds the deploymentId", "object", f.store.Describe(&df), "holder", holder.Name)
		return ctrl.Result{}, f.patch(ctx, &df, func(d *decov1.Decofile) { controllerutil.RemoveFinalizer(d, Finalizer) })
	}
	if err := f.store.Delete(ctx, &df); err != nil {
		f.recorder.Eventf(&df, nil, corev1.EventTypeWarning, "S3DeleteFailed", "Finalize", "%v (retried with backoff)", err)
		return ctrl.Result{}, fmt.Errorf("delete the object of Decofile %s: %w", req, err)
	}
	logf.FromContext(ctx).Info("deleted the Decofile's S3 object", "object", f.store.Describe(&df))
	return ctrl.Result{}, f.patch(ctx, &df, func(d *decov1.Decofile) { controllerutil.RemoveFinalizer(d, Finalizer) })
}

// patch changes the finalizers with an optimistic lock: a concurrent change retries the reconcile.
func (f *Finalizers) patch(ctx context.Context, df *decov1.Decofile, change func(*decov1.Decofile)) error {
	old := df.DeepCopy()
	change(df)
	err := f.client.Patch(ctx, df, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update finalizers of Decofile %s/%s: %w", df.Namespace, df.Name, err)
	}
	return nil
}
