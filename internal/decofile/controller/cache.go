package controller

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// annotationLastApplied is where client-side `kubectl apply` keeps a copy of the whole applied
// object, inline content included.
const annotationLastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// TrimDecofile is the cache transform for Decofiles: the manager's cache keeps what the
// controllers decide on (metadata, the rest of the spec, status) but not the inline content, the
// copy of it client-side `kubectl apply` leaves in an annotation, or managedFields. An inline
// Decofile can hold megabytes, and the cache would hold every one of the cluster's. The delivery
// controller reads the Decofile it delivers from the API server; nothing else reads the content.
// A cached Decofile must therefore never be written back whole: status writes send the status
// alone (StatusWriter).
func TrimDecofile(obj any) (any, error) {
	switch o := obj.(type) {
	case *decov1.Decofile:
		if o.Spec.Inline != nil {
			o.Spec.Inline = &decov1.InlineSource{}
		}
		trimMeta(o)
	case *unstructured.Unstructured:
		unstructured.RemoveNestedField(o.Object, "spec", "inline", "value")
		trimMeta(o)
	}
	return cache.TransformStripManagedFields()(obj)
}

func trimMeta(o client.Object) {
	if a := o.GetAnnotations(); a[annotationLastApplied] != "" {
		delete(a, annotationLastApplied)
		o.SetAnnotations(a)
	}
}

// CacheOptions adds to o what the manager's cache holds of the Decofile part's objects:
// Decofiles trimmed by TrimDecofile.
func CacheOptions(o *cache.Options) {
	if o.ByObject == nil {
		o.ByObject = map[client.Object]cache.ByObject{}
	}
	o.ByObject[&decov1.Decofile{}] = cache.ByObject{Transform: TrimDecofile}
}
