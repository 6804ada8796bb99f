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
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/workload"
)

// usersPerKind is how many workloads of each kind the delete protection reads and names at most.
const usersPerKind = 20

// Protector is the validating admission handler that refuses to delete a Decofile while an
// injected workload still references it: its pods would lose their content on the next start.
type Protector struct {
	// Reader lists workloads; it must read the API server (a workload injected a moment ago
	// counts). The lists are metadata only, at most usersPerKind per kind.
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
	users, more, err := p.Users(ctx, req.Namespace, req.Name)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if len(users) == 0 && !more {
		return admission.Allowed("")
	}
	named := strings.Join(users, ", ")
	if more {
		named += " and more"
	}
	return admission.Denied(fmt.Sprintf("Decofile %q is still injected into %s; remove the %s annotation from them (or delete them) first",
		req.Name, named, decov1.AnnotationInject))
}

// Users lists the workloads in namespace labelled as injected with the Decofile name, as
// kind/name, skipping workloads being deleted and kinds the cluster does not serve. It reads at
// most usersPerKind of each kind; more reports that there are others.
func (p *Protector) Users(ctx context.Context, namespace, name string) (users []string, more bool, err error) {
	for _, gvk := range workload.Kinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		err := p.Reader.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{decov1.LabelDecofile: name}, client.Limit(usersPerKind))
		if meta.IsNoMatchError(err) {
			continue // e.g. Knative is not installed
		}
		if err != nil {
			return nil, false, fmt.Errorf("list %s in %s: %w", gvk.Kind, namespace, err)
		}
		for _, it := range list.Items {
			if it.DeletionTimestamp == nil {
				users = append(users, strings.ToLower(gvk.Kind)+"."+gvk.Group+"/"+it.Name)
			}
		}
		more = more || list.Continue != ""
	}
	sort.Strings(users)
	return users, more, nil
}
