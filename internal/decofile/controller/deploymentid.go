package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// deploymentIDHolder returns the Decofile of df's namespace that holds df's deploymentId before
// it (the oldest, by creationTimestamp then name), or nil when df holds it. Two Decofiles with
// one deploymentId would notify the same pods and share one S3 object, which the finalizer of
// either would delete under the other: only the first is delivered. A Decofile being deleted
// still holds its deploymentId until it is gone (its finalizer may still delete the object).
func (r *Reconciler) deploymentIDHolder(ctx context.Context, df *decov1.Decofile) (*decov1.Decofile, error) {
	var list decov1.DecofileList
	if err := r.client.List(ctx, &list, client.InNamespace(df.Namespace)); err != nil {
		return nil, fmt.Errorf("list the Decofiles of namespace %s to check deploymentId %q is not taken: %w", df.Namespace, df.DeploymentIDOrName(), err)
	}
	return DeploymentIDHolder(list.Items, df), nil
}

// DeploymentIDHolder returns, among items, the Decofile other than df with df's deploymentId
// whose claim precedes df's (the oldest such), or nil when df's claim comes first.
func DeploymentIDHolder(items []decov1.Decofile, df *decov1.Decofile) *decov1.Decofile {
	id := df.DeploymentIDOrName()
	var holder *decov1.Decofile
	for i := range items {
		o := &items[i]
		if o.UID == df.UID || o.Name == df.Name || o.DeploymentIDOrName() != id || !o.ClaimsBefore(df) {
			continue
		}
		if holder == nil || o.ClaimsBefore(holder) {
			holder = o
		}
	}
	return holder
}

func conflict(df, holder *decov1.Decofile) outcome {
	return outcome{reason: decov1.ReasonDeploymentIDConflict, err: fmt.Errorf(
		"the Decofile %s, created earlier, already has deploymentId %q in this namespace; two Decofiles with one deploymentId would notify the same pods and share one S3 object, so this one is not delivered: give it another spec.deploymentId (or delete one of them)",
		holder.Name, df.DeploymentIDOrName())}
}

// sharingDeploymentID maps a Decofile event to the other Decofiles of its namespace with the
// same deploymentId, so one waiting for it is looked at again when it goes or changes.
func (r *Reconciler) sharingDeploymentID(ctx context.Context, obj client.Object) []reconcile.Request {
	df, ok := obj.(*decov1.Decofile)
	if !ok {
		return nil
	}
	var list decov1.DecofileList
	if err := r.client.List(ctx, &list, client.InNamespace(df.Namespace)); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		o := &list.Items[i]
		if o.Name != df.Name && o.DeploymentIDOrName() == df.DeploymentIDOrName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		}
	}
	return reqs
}
