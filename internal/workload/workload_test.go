package workload

import (
	"context"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// This package's API server has no Knative CRD: listing must skip the kind, and remember that.
func TestMain(m *testing.M) { testenv.Main(m, servers.APIServerOptions{}) }

// TestListAndRestart lists the labelled workloads of both served kinds, skipping another
// namespace's, an unlabelled one and one being deleted, and restarts one through its template.
func TestListAndRestart(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	ns, elsewhere := c.Namespace(t, "workloads", nil), c.Namespace(t, "elsewhere", nil)
	selected := map[string]string{"deco.sites/decofile": "site"}
	template := func(name string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "x"}}},
		}
	}
	deployment := func(ns, name string, labels map[string]string, finalizers ...string) *appsv1.Deployment {
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Finalizers: finalizers},
			Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}, Template: template(name)},
		}
		if err := c.Client.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	deployment(ns, "web", selected)
	deployment(ns, "unlabelled", nil)
	deployment(elsewhere, "web", selected)
	leaving := deployment(ns, "leaving", selected, "siteops.test/hold")
	if err := c.Client.Delete(ctx, leaving); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.Patch(ctx, leaving, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
	})
	st := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db", Labels: selected},
		Spec:       appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Template: template("db")},
	}
	if err := c.Client.Create(ctx, st); err != nil {
		t.Fatal(err)
	}

	l := &Lister{Reader: c.Client}
	ws, err := l.List(ctx, ns, client.MatchingLabels(selected))
	if err != nil {
		t.Fatalf("List without Knative installed: %v", err)
	}
	var names []string
	for i := range ws {
		names = append(names, Name(&ws[i]))
	}
	slices.Sort(names)
	if want := []string{"deployment/web", "statefulset/db"}; !slices.Equal(names, want) {
		t.Fatalf("listed %v, want %v", names, want)
	}
	if !l.isMissing(schema.GroupVersionKind{Group: "serving.knative.dev", Version: "v1", Kind: "Service"}) {
		t.Error("the unserved Knative kind is not remembered: every list would ask discovery again")
	}

	for i := range ws {
		if ws[i].GetKind() == "StatefulSet" {
			if err := Restart(ctx, c.Client, &ws[i], "kubectl.kubernetes.io/restartedAt", "2026-12-07T00:00:00Z"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(st), st); err != nil {
		t.Fatal(err)
	}
	if got := st.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"]; got != "2026-12-07T00:00:00Z" || st.Generation != 2 {
		t.Fatalf("after Restart: template annotation %q, generation %d; want the annotation and a new generation", got, st.Generation)
	}
}
