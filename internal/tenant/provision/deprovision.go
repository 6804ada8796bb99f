package provision

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/tenant/metrics"
)

// deprovision removes the user from every node, then the Secret (on opt-out) and the finalizer.
// An unreachable Valkey is retried until the delete timeout, then given up with a Warning.
func (r *Reconciler) deprovision(ctx context.Context, ns *corev1.Namespace) (ctrl.Result, error) {
	// The user is derived from the namespace name, like when it was provisioned; the Secret is
	// tenant-writable and never names the user to delete.
	user := Username(ns.Name)
	secret := &corev1.Secret{}
	err := r.Reader.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: decov1.ValkeyACLSecretName}, secret)
	switch {
	case err == nil:
	case apierrors.IsNotFound(err):
		secret = nil
	default:
		return ctrl.Result{}, fmt.Errorf("read Secret %s/%s: %w", ns.Name, decov1.ValkeyACLSecretName, err)
	}
	var delErr error
	if Reserved(user, r.ReservedUsers) {
		// Reserved after it was provisioned: the name is someone else's now, never delete it.
		r.Events.Eventf(ns, nil, corev1.EventTypeWarning, ReasonReservedUsername, "Delete",
			"username %q is reserved now; it was not deleted from Valkey", user)
	} else {
		r.forgetNamespace(ns.Name)
		unlock := func() {}
		if r.Guard != nil {
			unlock = r.Guard.Lock(user)
		}
		res := r.Nodes.Delete(ctx, []string{user})
		unlock()
		delErr = errors.Join(res.Err(), res.UserErrors()[user])
	}
	if err := delErr; err != nil {
		metrics.Errors.WithLabelValues(metrics.OpDelete).Inc()
		deadline := deleteDeadline(ns, r.firstDelete(ns.Name), r.DeleteTimeout)
		if left := time.Until(deadline); left > 0 {
			r.Events.Eventf(ns, nil, corev1.EventTypeWarning, ReasonDeleteFailed, "Delete",
				"could not delete Valkey ACL user %q (retrying for %s): %v", user, left.Round(time.Second), err)
			return ctrl.Result{RequeueAfter: min(left, r.retryDelay(ns.Name))}, nil
		}
		r.Events.Eventf(ns, nil, corev1.EventTypeWarning, ReasonDeleteTimedOut, "Delete",
			"gave up deleting Valkey ACL user %q after %s; remove it by hand (ACL DELUSER %s on every node): %v",
			user, r.DeleteTimeout, user, err)
	} else {
		metrics.Deleted.Inc()
		r.Events.Eventf(ns, nil, corev1.EventTypeNormal, ReasonDeleted, "Delete", "Valkey ACL user %q deleted from every node", user)
	}
	if secret != nil && ns.DeletionTimestamp == nil {
		// Only the operator's own credentials leave with the opt-out.
		if err := r.Client.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("delete Secret %s/%s: %w", ns.Name, secret.Name, err)
		}
	}
	patch := client.MergeFromWithOptions(ns.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(ns, Finalizer)
	State{}.Apply(ns.Annotations)
	if err := r.Client.Patch(ctx, ns, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("remove finalizer from namespace %s: %w", ns.Name, client.IgnoreNotFound(err))
	}
	r.forgetDelete(ns.Name)
	r.countTenants(ctx)
	return ctrl.Result{}, nil
}

func (r *Reconciler) firstDelete(ns string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstDeletes == nil {
		r.firstDeletes = map[string]time.Time{}
	}
	t, ok := r.firstDeletes[ns]
	if !ok {
		t = time.Now()
		r.firstDeletes[ns] = t
	}
	return t
}

// retryDelay backs off from 1s, doubling with the time already spent, up to 30s.
func (r *Reconciler) retryDelay(ns string) time.Duration {
	spent := time.Since(r.firstDelete(ns))
	return min(max(time.Second, spent), 30*time.Second)
}

func (r *Reconciler) forgetDelete(ns string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.firstDeletes, ns)
}

// countTenants sets the tenants gauge to the number of namespaces holding the finalizer. It is
// called when a finalizer comes or goes, not on every reconcile, because it lists namespaces.
func (r *Reconciler) countTenants(ctx context.Context) {
	n, err := CountTenants(ctx, r.Client)
	if err == nil {
		metrics.Tenants.Set(float64(n))
	}
}

// CountTenants counts namespaces that hold the tenant finalizer.
func CountTenants(ctx context.Context, c client.Reader) (int, error) {
	var list corev1.NamespaceList
	if err := c.List(ctx, &list); err != nil {
		return 0, fmt.Errorf("list namespaces: %w", err)
	}
	n := 0
	for i := range list.Items {
		if slices.Contains(list.Items[i].Finalizers, Finalizer) {
			n++
		}
	}
	return n, nil
}
