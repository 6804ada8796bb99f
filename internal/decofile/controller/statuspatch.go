package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// PatchStatus changes the status of df, as read at its resourceVersion, from old to next, and
// returns the resourceVersion the API server gave the result; nothing is sent ("" returned) when
// they are equal. The merge patch is computed from the two statuses alone and
// carries df's resourceVersion, so a status written since makes it fail with a Conflict (read
// again and retry), and the API server answers with the metadata only: the spec may hold
// megabytes of inline content, which would otherwise be encoded, diffed and sent back each time.
// Both the delivery and the rollout controller write the status this way.
func PatchStatus(ctx context.Context, c client.StatusClient, df metav1.Object, old, next *decov1.DecofileStatus) (string, error) {
	if equality.Semantic.DeepEqual(old, next) {
		return "", nil
	}
	om := metav1.ObjectMeta{Namespace: df.GetNamespace(), Name: df.GetName(), ResourceVersion: df.GetResourceVersion()}
	from := &decov1.Decofile{ObjectMeta: om, Status: *old}
	to := &decov1.Decofile{ObjectMeta: om, Status: *next}
	data, err := client.MergeFromWithOptions(from, client.MergeFromWithOptimisticLock{}).Data(to)
	if err != nil {
		return "", fmt.Errorf("compute the status patch of Decofile %s/%s: %w", om.Namespace, om.Name, err)
	}
	obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: om.Namespace, Name: om.Name}}
	obj.SetGroupVersionKind(decov1.GroupVersion.WithKind("Decofile"))
	if err := c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, data)); err != nil {
		return "", err
	}
	return obj.ResourceVersion, nil
}

// patchStatus writes next as the Decofile's status unless nothing changed. It patches with an
// optimistic lock and only the fields this controller owns, so the rollout controller's
// notifiedHash, rollout and PodsNotified condition are never overwritten; see PatchStatus.
func (r *Reconciler) patchStatus(ctx context.Context, df *decov1.Decofile, next *decov1.DecofileStatus) error {
	if statusEqual(&df.Status, next) {
		return nil
	}
	key := types.NamespacedName{Namespace: df.Namespace, Name: df.Name}
	first := true
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := df
		if !first {
			cur = &decov1.Decofile{}
			if err := r.reader.Get(ctx, key, cur); err != nil {
				return fmt.Errorf("get Decofile %s: %w", key, err)
			}
		}
		first = false
		want := cur.Status.DeepCopy()
		apply(want, next)
		rv, err := PatchStatus(ctx, r.client, cur, &cur.Status, want)
		if rv != "" {
			r.written.Store(key, rv)
		}
		return err
	})
}

// read gets the whole Decofile, its inline content too (which the manager's cache does not
// keep), from the API server's watch cache at a resourceVersion no older than the manager's
// cache and this controller's last status write: an answer from the watch cache costs the API
// server a fraction of a read from etcd, and an answer older than that write would make the
// controller rewrite the ConfigMap with a needless new timestamp. When there is no such
// resourceVersion, or the watch cache cannot answer, it reads from etcd.
func (r *Reconciler) read(ctx context.Context, key types.NamespacedName, df *decov1.Decofile) error {
	var rv string
	var cached decov1.Decofile
	if err := r.client.Get(ctx, key, &cached); err == nil {
		rv = cached.ResourceVersion
	}
	if w, ok := r.written.Load(key); ok {
		written := w.(string)
		if newer, err := resourceversion.CompareResourceVersion(written, rv); err == nil && newer <= 0 {
			r.written.CompareAndDelete(key, w) // the cache has the write
		} else {
			rv = written
		}
	}
	if rv != "" {
		err := r.reader.Get(ctx, key, df, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: rv}})
		if err == nil || apierrors.IsNotFound(err) {
			return err
		}
	}
	return r.reader.Get(ctx, key, df)
}

// apply copies the fields this controller owns from next into s.
func apply(s, next *decov1.DecofileStatus) {
	s.ObservedGeneration = next.ObservedGeneration
	s.SourceType = next.SourceType
	s.GitHubCommit, s.ShortCommit = next.GitHubCommit, next.ShortCommit
	s.ContentHash = next.ContentHash
	s.StoredHash = next.StoredHash
	s.ConfigMapName = next.ConfigMapName
	s.S3URL = next.S3URL
	s.Format = next.Format
	s.RawBytes, s.StoredBytes = next.RawBytes, next.StoredBytes
	s.Timestamp = next.Timestamp
	s.LastUpdated = next.LastUpdated
	s.LastHandledReconcileAt = next.LastHandledReconcileAt
	for _, t := range []string{decov1.ConditionReady, decov1.ConditionReconciling, decov1.ConditionStalled} {
		if c := meta.FindStatusCondition(next.Conditions, t); c != nil {
			meta.SetStatusCondition(&s.Conditions, *c)
		} else {
			meta.RemoveStatusCondition(&s.Conditions, t)
		}
	}
}

func statusEqual(cur, next *decov1.DecofileStatus) bool {
	probe := cur.DeepCopy()
	apply(probe, next)
	return equality.Semantic.DeepEqual(*probe, *cur)
}
