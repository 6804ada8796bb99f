// Package rollout restarts the workloads (Deployments, StatefulSets, Knative Services) of a
// namespace that read the tenant's Valkey Secret, so new pods start with new credentials, and
// tells when every restarted workload has rolled out. Listing and restarting are the workload
// package's, shared with the Decofile part.
package rollout

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/workload"
)

// AnnotationRevision on a pod template records which credentials the pods were started for.
// Changing it is what makes Kubernetes (or Knative) start new pods.
const AnnotationRevision = "deco.sites/valkey-acl-revision"

// Workload names one restarted object.
type Workload struct {
	// Kind is the object's kind (with its group when not a core or apps kind).
	Kind string
	// Name is the object's name in the namespace.
	Name string
}

// String returns kind/name, as kubectl prints it.
func (w Workload) String() string { return w.Kind + "/" + w.Name }

// Roller patches and inspects workloads.
type Roller struct {
	// Workloads lists workloads; its Reader should be uncached, so the operator does not cache
	// every Deployment in the cluster.
	Workloads workload.Lister
	// Writer patches workloads.
	Writer client.Client
}

// Injected reports whether a workload asks for the tenant Secret: through a Decofile injection
// or the Valkey-only annotation, on the object or on its pod template.
func Injected(objAnnotations, templateAnnotations map[string]string) bool {
	for _, a := range []map[string]string{objAnnotations, templateAnnotations} {
		if a[decov1.AnnotationInject] != "" || a[decov1.AnnotationValkeyACLInject] != "" {
			return true
		}
	}
	return false
}

// injected lists the workloads of namespace that ask for the tenant Secret.
func (r *Roller) injected(ctx context.Context, namespace string) ([]unstructured.Unstructured, error) {
	all, err := r.Workloads.List(ctx, namespace)
	if err != nil {
		return nil, err
	}
	var out []unstructured.Unstructured
	for _, w := range all {
		if Injected(w.GetAnnotations(), workload.TemplateAnnotations(&w)) {
			out = append(out, w)
		}
	}
	return out, nil
}

// Roll sets the revision annotation to rev on every injected workload of namespace whose pods
// were not started for rev, and returns the workloads it patched.
func (r *Roller) Roll(ctx context.Context, namespace, rev string) ([]Workload, error) {
	ws, err := r.injected(ctx, namespace)
	if err != nil {
		return nil, err
	}
	var patched []Workload
	var errs []error
	for i := range ws {
		w := &ws[i]
		if workload.TemplateAnnotations(w)[AnnotationRevision] == rev {
			continue
		}
		if err := workload.Restart(ctx, r.Writer, w, AnnotationRevision, rev); err != nil {
			errs = append(errs, fmt.Errorf("in %s: %w", namespace, err))
			continue
		}
		patched = append(patched, workloadOf(w))
	}
	return patched, errors.Join(errs...)
}

// Pending lists the injected workloads that were not yet rolled out with rev: not restarted for
// it, or restarted but still running older pods. An empty list means no pod can still hold
// credentials older than rev.
func (r *Roller) Pending(ctx context.Context, namespace, rev string) ([]Workload, error) {
	ws, err := r.injected(ctx, namespace)
	if err != nil {
		return nil, err
	}
	var pending []Workload
	for i := range ws {
		w := &ws[i]
		if workload.TemplateAnnotations(w)[AnnotationRevision] != rev || !rolledOut(w) {
			pending = append(pending, workloadOf(w))
		}
	}
	return pending, nil
}

// workloadOf names w as Workload.
func workloadOf(w *unstructured.Unstructured) Workload {
	return Workload{Kind: workload.Kind(w), Name: w.GetName()}
}

// rolledOut reports whether w's controller has every replica on its current template.
func rolledOut(w *unstructured.Unstructured) bool {
	switch w.GetKind() {
	case "Deployment":
		var d appsv1.Deployment
		return runtime.DefaultUnstructuredConverter.FromUnstructured(w.Object, &d) == nil && DeploymentRolledOut(&d)
	case "StatefulSet":
		var st appsv1.StatefulSet
		return runtime.DefaultUnstructuredConverter.FromUnstructured(w.Object, &st) == nil && StatefulSetRolledOut(&st)
	default:
		return KnativeServiceRolledOut(w)
	}
}

// DeploymentRolledOut reports whether the Deployment controller has seen the current spec and
// every replica runs it (no pod of an older template remains).
func DeploymentRolledOut(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want
}

// StatefulSetRolledOut reports whether the StatefulSet controller has seen the current spec and
// every replica runs its newest revision. A StatefulSet with the OnDelete strategy only gets
// there once someone deletes its pods, so until then the older password stays valid.
func StatefulSetRolledOut(s *appsv1.StatefulSet) bool {
	want := int32(1)
	if s.Spec.Replicas != nil {
		want = *s.Spec.Replicas
	}
	st := s.Status
	return st.ObservedGeneration >= s.Generation && st.UpdateRevision != "" && st.CurrentRevision == st.UpdateRevision &&
		st.UpdatedReplicas == want && st.Replicas == want && st.ReadyReplicas == want
}

// KnativeServiceRolledOut reports whether Knative has seen the current spec, its newest Revision
// is ready and the Service is Ready.
func KnativeServiceRolledOut(s *unstructured.Unstructured) bool {
	observed, _, _ := unstructured.NestedInt64(s.Object, "status", "observedGeneration")
	created, _, _ := unstructured.NestedString(s.Object, "status", "latestCreatedRevisionName")
	ready, _, _ := unstructured.NestedString(s.Object, "status", "latestReadyRevisionName")
	if observed < s.GetGeneration() || created == "" || created != ready {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(s.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			return m["status"] == string(corev1.ConditionTrue)
		}
	}
	return false
}
