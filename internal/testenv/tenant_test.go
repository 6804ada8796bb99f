package testenv_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/testenv"
)

// TestTenantHasEditInItsNamespaceOnly checks the tenant identity every security test attacks
// with: it uses siteops' kinds in its own namespace through the aggregated edit role, and
// nothing outside it, not even status.
func TestTenantHasEditInItsNamespaceOnly(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	tn := c.Tenant(t, "tenant", map[string]string{"deco.sites/valkey-acl": "true"})
	other := c.Namespace(t, "other", nil)

	df := func(ns string) *decov1alpha1.Decofile {
		return &decov1alpha1.Decofile{
			ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
			Spec: decov1alpha1.DecofileSpec{
				Source: decov1alpha1.SourceInline,
				Inline: &decov1alpha1.InlineSource{Value: map[string]apiextensionsv1.JSON{"home": {Raw: []byte(`{}`)}}},
			},
		}
	}
	own := df(tn.Namespace)
	if err := tn.Client.Create(ctx, own); err != nil {
		t.Fatalf("tenant cannot create a Decofile in its own namespace: %v", err)
	}
	if err := tn.Client.Create(ctx, &mirrorv1alpha1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Name: "cr", Namespace: tn.Namespace},
		Spec: mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "t"}, Message: "m"}}); err != nil {
		t.Fatalf("tenant cannot create a CommitRequest in its own namespace: %v", err)
	}
	if err := tn.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: tn.Namespace}}); err != nil {
		t.Fatalf("tenant cannot create a Secret in its own namespace: %v", err)
	}
	forbidden := map[string]error{
		"create a Decofile in another namespace": tn.Client.Create(ctx, df(other)),
		"write its Decofile's status":            tn.Client.Status().Update(ctx, own),
		"read another namespace's ConfigMaps":    tn.Client.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(other)),
		"annotate its own Namespace": tn.Client.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tn.Namespace}},
			client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"deco.sites/github-repos":"*/*"}}}`))),
		"create a ClusterWatchRule": tn.Client.Create(ctx, &mirrorv1alpha1.ClusterWatchRule{ObjectMeta: metav1.ObjectMeta{Name: "all"}}),
	}
	for what, err := range forbidden {
		if !apierrors.IsForbidden(err) {
			t.Errorf("tenant may %s: got %v, want Forbidden", what, err)
		}
	}
}
