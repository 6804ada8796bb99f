package mirror_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/testenv"
)

// TestIgnoredFieldManagerIsNotCommitted: a rule ignoring the field manager "flux" commits a
// tenant's own changes but neither what flux creates nor what flux changes; a later status write
// by another controller does not make it the spec's last writer, so flux's change stays out.
func TestIgnoredFieldManagerIsNotCommitted(t *testing.T) {
	c := testenv.APIServer(t)
	f := newFixture(t, c)
	tenant := c.TenantIn(t, f.ns)
	ctx := context.Background()
	runManager(t, c, mirror.Options{}, "")
	f.target(t, "t", "", 50*time.Millisecond, "")
	ignore := &mirrorv1alpha1.IgnoreWriters{FieldManagers: []string{"flux"}}
	f.create(t, &mirrorv1alpha1.WatchRule{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: f.ns},
		Spec: mirrorv1alpha1.WatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "t"}, Ignore: ignore,
			Rules: []mirrorv1alpha1.ResourceRule{cmRule(), {APIGroups: []string{"example.com"}, Resources: []string{"widgets"}}}}})
	flux := client.FieldOwner("flux")
	path := func(name string) string { return f.ns + "/core/configmaps/" + name + ".yaml" }
	// marker is a tenant change after the ones under test: once it is in git, every earlier
	// change of the same stream has been handled.
	marker := func(name string) {
		t.Helper()
		if err := tenant.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}); err != nil {
			t.Fatal(err)
		}
		f.waitFile(t, path(name), name)
	}

	// managedFields times have one-second precision, and two managers writing within one second
	// leave the last writer unknown (the change is committed). Each write under test waits for
	// the second of the previous one to pass.
	var lastWrite time.Time
	nextSecond := func() {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, func() error {
			if time.Now().Truncate(time.Second).After(lastWrite.Truncate(time.Second)) {
				return nil
			}
			return errString("still in the second of the previous write")
		})
		lastWrite = time.Now()
	}

	// The tenant's change is committed; flux's create is not.
	nextSecond()
	own := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "own", Namespace: f.ns}, Data: map[string]string{"v": "tenant"}}
	if err := tenant.Client.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	f.waitFile(t, path("own"), "tenant")
	if err := c.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fluxed", Namespace: f.ns}, Data: map[string]string{"v": "flux"}}, flux); err != nil {
		t.Fatal(err)
	}
	marker("m1")
	if got := f.file(path("fluxed")); got != "" {
		t.Fatalf("an object flux created was committed:\n%s", got)
	}
	// flux changes the tenant's object: not committed; the tenant changes it again: committed,
	// with everything it holds now.
	own.Data["v"] = "flux-changed"
	nextSecond()
	if err := c.Client.Update(ctx, own, flux); err != nil {
		t.Fatal(err)
	}
	marker("m2")
	if got := f.file(path("own")); !strings.Contains(got, "v: tenant") {
		t.Fatalf("flux's change was committed:\n%s", got)
	}
	own.Labels = map[string]string{"edited": "by-tenant"}
	nextSecond()
	if err := tenant.Client.Update(ctx, own); err != nil {
		t.Fatal(err)
	}
	f.waitFile(t, path("own"), "by-tenant")

	// Status: a person (the admin; edit does not cover the Widget CRD) makes a widget, flux
	// changes its spec (not committed), then a controller writes its status. The status write is
	// not a spec write: flux stays the last writer, and its change stays out of git.
	person := client.FieldOwner("kubectl-edit")
	w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": f.ns}, "spec": map[string]any{"size": "tenant"}}}
	nextSecond()
	if err := c.Client.Create(ctx, w, person); err != nil {
		t.Fatal(err)
	}
	wpath := f.ns + "/example.com/widgets/w.yaml"
	f.waitFile(t, wpath, "size: tenant")
	if err := unstructured.SetNestedField(w.Object, "flux", "spec", "size"); err != nil {
		t.Fatal(err)
	}
	nextSecond()
	if err := c.Client.Update(ctx, w, flux); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(w.Object, "ready", "status", "phase"); err != nil {
		t.Fatal(err)
	}
	nextSecond()
	if err := c.Client.Status().Update(ctx, w, client.FieldOwner("widget-controller")); err != nil {
		t.Fatal(err)
	}
	// A tenant widget after both, as the marker of the widgets stream.
	w2 := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w2", "namespace": f.ns}, "spec": map[string]any{"size": "marker"}}}
	if err := c.Client.Create(ctx, w2, person); err != nil {
		t.Fatal(err)
	}
	f.waitFile(t, f.ns+"/example.com/widgets/w2.yaml", "marker")
	if got := f.file(wpath); !strings.Contains(got, "size: tenant") {
		t.Fatalf("a status write made flux's spec change committed:\n%s", got)
	}
}
