// Package rollout restarts the workloads (Deployments, StatefulSets, Knative Services) of a
// namespace that read the tenant's Valkey Secret, so new pods start with new credentials, and
// tells when every restarted workload has rolled out.
// Knative Services are handled as unstructured objects so the operator does not depend on
// Knative's Go packages; clusters without Knative are skipped.
package rollout

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// AnnotationRevision on a pod template records which credentials the pods were started for.
// Changing it is what makes Kubernetes (or Knative) start new pods.
const AnnotationRevision = "deco.sites/valkey-acl-revision"

// KnativeServiceList is the list kind of Knative Services.
var KnativeServiceList = schema.GroupVersionKind{Group: "serving.knative.dev", Version: "v1", Kind: "ServiceList"}

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
	// Reader lists workloads; an uncached reader keeps the operator from caching every
	// Deployment in the cluster.
	Reader client.Reader
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

// Roll sets the revision annotation to rev on every injected workload of namespace whose pods
// were not started for rev, and returns the workloads it patched.
func (r *Roller) Roll(ctx context.Context, namespace, rev string) ([]Workload, error) {
	var patched []Workload
	var deps appsv1.DeploymentList
	if err := r.Reader.List(ctx, &deps, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("list Deployments in %s: %w", namespace, err)
	}
	patch := templatePatch(rev)
	var errs []error
	for i := range deps.Items {
		d := &deps.Items[i]
		if !Injected(d.Annotations, d.Spec.Template.Annotations) || d.Spec.Template.Annotations[AnnotationRevision] == rev {
			continue
		}
		if err := r.Writer.Patch(ctx, d, patch); err != nil {
			errs = append(errs, fmt.Errorf("restart Deployment %s/%s: %w", namespace, d.Name, err))
			continue
		}
		patched = append(patched, Workload{Kind: "Deployment", Name: d.Name})
	}
	var sets appsv1.StatefulSetList
	if err := r.Reader.List(ctx, &sets, client.InNamespace(namespace)); err != nil {
		return patched, errors.Join(append(errs, fmt.Errorf("list StatefulSets in %s: %w", namespace, err))...)
	}
	for i := range sets.Items {
		st := &sets.Items[i]
		if !Injected(st.Annotations, st.Spec.Template.Annotations) || st.Spec.Template.Annotations[AnnotationRevision] == rev {
			continue
		}
		if err := r.Writer.Patch(ctx, st, patch); err != nil {
			errs = append(errs, fmt.Errorf("restart StatefulSet %s/%s: %w", namespace, st.Name, err))
			continue
		}
		patched = append(patched, Workload{Kind: "StatefulSet", Name: st.Name})
	}
	ksvcs, err := r.knativeServices(ctx, namespace)
	if err != nil {
		return patched, errors.Join(append(errs, err)...)
	}
	for i := range ksvcs {
		s := &ksvcs[i]
		tmpl, _, _ := unstructured.NestedStringMap(s.Object, "spec", "template", "metadata", "annotations")
		if !Injected(s.GetAnnotations(), tmpl) || tmpl[AnnotationRevision] == rev {
			continue
		}
		if err := r.Writer.Patch(ctx, s, patch); err != nil {
			errs = append(errs, fmt.Errorf("restart Knative Service %s/%s: %w", namespace, s.GetName(), err))
			continue
		}
		patched = append(patched, Workload{Kind: "Service.serving.knative.dev", Name: s.GetName()})
	}
	return patched, errors.Join(errs...)
}

// Pending lists the injected workloads that were not yet rolled out with rev: not restarted for
// it, or restarted but still running older pods. An empty list means no pod can still hold
// credentials older than rev.
func (r *Roller) Pending(ctx context.Context, namespace, rev string) ([]Workload, error) {
	var pending []Workload
	var deps appsv1.DeploymentList
	if err := r.Reader.List(ctx, &deps, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("list Deployments in %s: %w", namespace, err)
	}
	for i := range deps.Items {
		d := &deps.Items[i]
		if !Injected(d.Annotations, d.Spec.Template.Annotations) {
			continue
		}
		if d.Spec.Template.Annotations[AnnotationRevision] != rev || !DeploymentRolledOut(d) {
			pending = append(pending, Workload{Kind: "Deployment", Name: d.Name})
		}
	}
	var sets appsv1.StatefulSetList
	if err := r.Reader.List(ctx, &sets, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("list StatefulSets in %s: %w", namespace, err)
	}
	for i := range sets.Items {
		st := &sets.Items[i]
		if !Injected(st.Annotations, st.Spec.Template.Annotations) {
			continue
		}
		if st.Spec.Template.Annotations[AnnotationRevision] != rev || !StatefulSetRolledOut(st) {
			pending = append(pending, Workload{Kind: "StatefulSet", Name: st.Name})
		}
	}
	ksvcs, err := r.knativeServices(ctx, namespace)
	if err != nil {
		return nil, err
	}
	for i := range ksvcs {
		s := &ksvcs[i]
		tmpl, _, _ := unstructured.NestedStringMap(s.Object, "spec", "template", "metadata", "annotations")
		if !Injected(s.GetAnnotations(), tmpl) {
			continue
		}
		if tmpl[AnnotationRevision] != rev || !KnativeServiceRolledOut(s) {
			pending = append(pending, Workload{Kind: "Service.serving.knative.dev", Name: s.GetName()})
		}
	}
	return pending, nil
}

// knativeServices lists Knative Services, or nothing when the cluster has no Knative Serving.
func (r *Roller) knativeServices(ctx context.Context, namespace string) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(KnativeServiceList)
	if err := r.Reader.List(ctx, list, client.InNamespace(namespace)); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list Knative Services in %s: %w", namespace, err)
	}
	return list.Items, nil
}

func templatePatch(rev string) client.Patch {
	return client.RawPatch(types.MergePatchType,
		fmt.Appendf(nil, `{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, AnnotationRevision, rev))
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
