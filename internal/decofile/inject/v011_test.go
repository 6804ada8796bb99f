package inject_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
