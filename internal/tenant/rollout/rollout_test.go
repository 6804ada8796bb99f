package rollout

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/internal/workload"
)

// This package's API server has no Knative CRD: the roller must work without Knative.
func TestMain(m *testing.M) { testenv.Main(m, servers.APIServerOptions{}) }

func TestDeploymentRolledOut(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)}}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}
	if !DeploymentRolledOut(d) {
		t.Fatal("finished rollout not recognised")
	}
	for name, mutate := range map[string]func(*appsv1.DeploymentStatus){
		"old generation": func(s *appsv1.DeploymentStatus) { s.ObservedGeneration = 2 },
		"old pods left":  func(s *appsv1.DeploymentStatus) { s.Replicas = 3 },
		"not updated":    func(s *appsv1.DeploymentStatus) { s.UpdatedReplicas = 1 },
		"not available":  func(s *appsv1.DeploymentStatus) { s.AvailableReplicas = 1 },
	} {
		c := d.DeepCopy()
		mutate(&c.Status)
		if DeploymentRolledOut(c) {
			t.Errorf("%s: reported rolled out", name)
		}
	}
}

func TestStatefulSetRolledOut(t *testing.T) {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 4}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2)}}
	s.Status = appsv1.StatefulSetStatus{ObservedGeneration: 4, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, CurrentRevision: "web-2", UpdateRevision: "web-2"}
	if !StatefulSetRolledOut(s) {
		t.Fatal("finished rollout not recognised")
	}
	for name, mutate := range map[string]func(*appsv1.StatefulSetStatus){
		"old generation":    func(s *appsv1.StatefulSetStatus) { s.ObservedGeneration = 3 },
		"old revision left": func(s *appsv1.StatefulSetStatus) { s.CurrentRevision = "web-1" },
		"not updated":       func(s *appsv1.StatefulSetStatus) { s.UpdatedReplicas = 1 },
		"not ready":         func(s *appsv1.StatefulSetStatus) { s.ReadyReplicas = 1 },
		"no revision yet":   func(s *appsv1.StatefulSetStatus) { s.CurrentRevision, s.UpdateRevision = "", "" },
	} {
		c := s.DeepCopy()
		mutate(&c.Status)
		if StatefulSetRolledOut(c) {
			t.Errorf("%s: reported rolled out", name)
		}
	}
}

func TestKnativeServiceRolledOut(t *testing.T) {
	s := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"generation": int64(2)}, "status": map[string]any{
		"observedGeneration": int64(2), "latestCreatedRevisionName": "web-2", "latestReadyRevisionName": "web-2",
		"conditions": []any{map[string]any{"type": "Ready", "status": "True"}},
	}}}
	if !KnativeServiceRolledOut(s) {
		t.Fatal("ready service not recognised")
	}
	c := s.DeepCopy()
	_ = unstructured.SetNestedField(c.Object, "web-1", "status", "latestReadyRevisionName")
	if KnativeServiceRolledOut(c) {
		t.Error("newest revision not ready, reported rolled out")
	}
	c = s.DeepCopy()
	_ = unstructured.SetNestedField(c.Object, int64(1), "status", "observedGeneration")
	if KnativeServiceRolledOut(c) {
		t.Error("unobserved generation reported rolled out")
	}
	c = s.DeepCopy()
	_ = unstructured.SetNestedSlice(c.Object, []any{map[string]any{"type": "Ready", "status": "False"}}, "status", "conditions")
	if KnativeServiceRolledOut(c) {
		t.Error("not-ready service reported rolled out")
	}
}

func TestRollWithoutKnative(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	ns := c.Namespace(t, "roll", nil)
	mk := func(name string, ann map[string]string) *appsv1.Deployment {
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "x"}}},
				},
			},
		}
		if err := c.Client.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	injected := mk("site", map[string]string{decov1.AnnotationInject: "true"})
	other := mk("other", nil)
	r := &Roller{Workloads: workload.Lister{Reader: c.Client}, Writer: c.Client}
	patched, err := r.Roll(ctx, ns, "rev1")
	if err != nil {
		t.Fatalf("Roll without Knative installed: %v", err)
	}
	if len(patched) != 1 || patched[0].Name != "site" {
		t.Fatalf("patched %v, want only the injected Deployment", patched)
	}
	if err := c.Client.Get(ctx, keyOf(injected), injected); err != nil || injected.Spec.Template.Annotations[AnnotationRevision] != "rev1" {
		t.Fatalf("injected template annotations %v %v", injected.Spec.Template.Annotations, err)
	}
	if err := c.Client.Get(ctx, keyOf(other), other); err != nil || other.Spec.Template.Annotations[AnnotationRevision] != "" {
		t.Fatalf("a workload without injection was restarted: %v", other.Spec.Template.Annotations)
	}
	if again, err := r.Roll(ctx, ns, "rev1"); err != nil || len(again) != 0 {
		t.Fatalf("rolling the same revision again patched %v (%v): a resync would restart pods", again, err)
	}
	pending, err := r.Pending(ctx, ns, "rev1")
	if err != nil || len(pending) != 1 {
		t.Fatalf("pending before the Deployment rolled out: %v %v", pending, err)
	}
	injected.Status = appsv1.DeploymentStatus{ObservedGeneration: injected.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	if err := c.Client.Status().Update(ctx, injected); err != nil {
		t.Fatal(err)
	}
	if pending, err := r.Pending(ctx, ns, "rev1"); err != nil || len(pending) != 0 {
		t.Fatalf("pending after the rollout: %v %v", pending, err)
	}
}

func keyOf(d *appsv1.Deployment) types.NamespacedName {
	return types.NamespacedName{Namespace: d.Namespace, Name: d.Name}
}
