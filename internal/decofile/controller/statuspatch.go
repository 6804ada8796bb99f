package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	meta := metav1.ObjectMeta{Namespace: df.GetNamespace(), Name: df.GetName(), ResourceVersion: df.GetResourceVersion()}
	from := &decov1.Decofile{ObjectMeta: meta, Status: *old}
	to := &decov1.Decofile{ObjectMeta: meta, Status: *next}
	data, err := client.MergeFromWithOptions(from, client.MergeFromWithOptimisticLock{}).Data(to)
	if err != nil {
		return "", fmt.Errorf("compute the status patch of Decofile %s/%s: %w", meta.Namespace, meta.Name, err)
	}
	obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: meta.Namespace, Name: meta.Name}}
	obj.SetGroupVersionKind(decov1.GroupVersion.WithKind("Decofile"))
	if err := c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, data)); err != nil {
		return "", err
	}
	return obj.ResourceVersion, nil
}
