package inject_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/inject"
)

// TestTanStackKVNotInjected: a Knative Service shaped like v0.11's (inject "true", picked by
// its app.deco/deploymentId label) whose Decofile has the tanstack-kv target, which siteops does
// not serve, is admitted unchanged with a warning naming the operator that serves it.
func TestTanStackKVNotInjected(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	wc := newWarningClient(t, c)
	ns := c.Namespace(t, "v011-kv-inject", nil)
	kv := &decov1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns},
		Spec: decov1.DecofileSpec{
			Source:     decov1.SourceGitHub,
			GitHub:     &decov1.GitHubSource{Org: "deco-sites", Repo: "shop", Commit: "main"},
			Target:     decov1.TargetTanStackKV,
			TanStackKV: &decov1.TanStackKVTarget{KVNamespaceID: "kv1"},
		},
	}
	if err := c.Client.Create(ctx, kv); err != nil {
		t.Fatal(err)
	}
	svc := ksvc(ns, "shop", map[string]string{decov1.AnnotationInject: inject.InjectByDeploymentID},
		map[string]string{decov1.LabelDeploymentID: "shop"}, nil, "app")
	if err := wc.Create(ctx, svc); err != nil {
		t.Fatalf("admit: %v", err)
	}
	if w := wc.Take(); len(w) != 1 || !strings.Contains(w[0], "v0.11") || !strings.Contains(w[0], "tanstack-kv") {
		t.Fatalf("warnings = %q, want one naming v0.11 and tanstack-kv", w)
	}
	tpl := template(t, c.Client, svc)
	if len(tpl.Volumes) != 0 || len(tpl.Containers[0].Env) != 0 || tpl.Labels[decov1.LabelDecofile] != "" {
		t.Fatalf("something was injected: %+v", tpl)
	}
}

// TestV011KnativeServiceChangesOnce: a Knative Service as v0.11 left it (inject "true", its
// app.deco/deploymentId label, DECO_RELEASE naming decofile.bin, a literal reload token in plain
// env) changes once at its next admission — the literal token becomes a reference to the token
// Secret, with a warning — and never again: later re-applies leave the template (so the Knative
// Revision) as it is.
func TestV011KnativeServiceChangesOnce(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	wc := newWarningClient(t, c)
	ns := c.Namespace(t, "v011-ksvc", nil)
	d := decofile(t, c.Client, ns, "shop", "", "", decov1.FormatBin) // adopted from v0.11: .bin
	svc := ksvc(ns, "shop", map[string]string{decov1.AnnotationInject: inject.InjectByDeploymentID},
		map[string]string{decov1.LabelDeploymentID: "shop"}, []any{
			map[string]any{"name": decov1.EnvRelease, "value": "file:///app/decofile/decofile.bin"},
			map[string]any{"name": decov1.EnvReloadToken, "value": "minted-by-v011"},
		}, "app")
	if err := wc.Create(ctx, svc); err != nil {
		t.Fatalf("admit: %v", err)
	}
	if w := strings.Join(wc.Take(), "\n"); !strings.Contains(w, decov1.EnvReloadToken) || strings.Contains(w, "minted-by-v011") {
		t.Errorf("warnings %q: want one about the replaced literal token, without its value", w)
	}
	first := template(t, c.Client, svc)
	app := container(t, first, "app")
	if e := env(app, decov1.EnvReloadToken); e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != d.ReloadSecretName() {
		t.Fatalf("%s = %+v, want a reference to %s", decov1.EnvReloadToken, e, d.ReloadSecretName())
	}
	if e := env(app, decov1.EnvRelease); e.Value != "file:///app/decofile/decofile.bin" {
		t.Fatalf("%s = %q, want the .bin v0.11 pods read", decov1.EnvRelease, e.Value)
	}

	for range 2 {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(ksvcGVK)
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(svc), u); err != nil {
			t.Fatal(err)
		}
		if err := wc.Update(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	if w := wc.Take(); len(w) != 0 {
		t.Errorf("re-applying warned: %q", w)
	}
	if got := template(t, c.Client, svc); !equality.Semantic.DeepEqual(first, got) {
		t.Errorf("Knative template changed again:\nbefore %+v\nafter  %+v", first, got)
	}
}
