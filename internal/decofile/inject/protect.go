package inject

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// WorkloadKinds are the kinds the injection webhook mutates, listed by the delete protection.
var WorkloadKinds = []schema.GroupVersionKind{
	{Group: "apps", Version: "v1", Kind: "Deployment"},
	{Group: "apps", Version: "v1", Kind: "StatefulSet"},
	{Group: "serving.knative.dev", Version: "v1", Kind: "Service"},
}

// Protector is the validating admission handler that refuses to delete a Decofile while an
// injected workload still references it: its pods would lose their content on the next start.
type Protector struct {
	// Reader lists workloads; it must read the API server (metadata-only lists are used).
	Reader client.Reader
}

var _ admission.Handler = (*Protector)(nil)

// Handle denies a Decofile DELETE naming the workloads that still reference it.
func (p *Protector) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Delete {
		return admission.Allowed("")
	}
	ns := &corev1.Namespace{}
	if err := p.Reader.Get(ctx, types.NamespacedName{Name: req.Namespace}, ns); err == nil && ns.DeletionTimestamp != nil {
		// The whole namespace goes; holding the Decofile back would only slow that down.
		return admission.Allowed("namespace is being deleted")
	}
	users, err := p.Users(ctx, req.Namespace, req.Name)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if len(users) == 0 {
		return admission.Allowed("")
	}
	return admission.Denied(fmt.Sprintf("Decofile %q is still injected into %s; remove the %s annotation from them (or delete them) first",
		req.Name, strings.Join(users, ", "), decov1.AnnotationInject))
}

// Users lists the workloads in namespace labelled as injected with the Decofile name, as
// kind/name, skipping workloads being deleted and kinds the cluster does not serve.
func (p *Protector) Users(ctx context.Context, namespace, name string) ([]string, error) {
	var users []string
	for _, gvk := range WorkloadKinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		err := p.Reader.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{decov1.LabelDecofile: name})
		if meta.IsNoMatchError(err) {
			continue // e.g. Knative is not installed
		}
		if err != nil {
			return nil, fmt.Errorf("list %s in %s: %w", gvk.Kind, namespace, err)
		}
		for _, it := range list.Items {
			if it.DeletionTimestamp == nil {
				users = append(users, strings.ToLower(gvk.Kind)+"."+gvk.Group+"/"+it.Name)
			}
		}
	}
	sort.Strings(users)
	return users, nil
}
