package devenv_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/devenv"
	"github.com/siteops/siteops/internal/scheme"
)

// TestDevEnvTenant: `siteops dev up` aggregates siteops' tenant roles into edit (it has no
// controller manager to do it), so a tenant made by `siteops dev tenant add` creates ConfigMaps
// and Decofiles in its own namespace and is forbidden in another.
func TestDevEnvTenant(t *testing.T) {
	env := devEnv(t)
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "neighbour"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	path, err := devenv.AddTenant(ctx, devenv.TenantOptions{AdminKubeconfig: env.KubeconfigPath, Name: "shop"})
	if err != nil {
		t.Fatalf("add tenant: %v", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	tenant, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"shop", "neighbour"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "site"}, Data: map[string]string{"a": "b"}}
		df := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "decofile-shop"}, Spec: decov1.DecofileSpec{
			Source: decov1.SourceInline, Inline: &decov1.InlineSource{Value: map[string]apiextensionsv1.JSON{"home": {Raw: []byte(`{}`)}}}}}
		for _, obj := range []client.Object{cm, df} {
			err := tenant.Create(ctx, obj)
			switch {
			case ns == "shop" && err != nil:
				t.Errorf("the tenant cannot create %T in its namespace: %v", obj, err)
			case ns == "neighbour" && !apierrors.IsForbidden(err):
				t.Errorf("the tenant's create of %T in namespace neighbour: %v, want forbidden", obj, err)
			}
		}
	}
}
