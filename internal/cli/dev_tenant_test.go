package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/testenv"
)

// TestDevTenantAdd: `siteops dev tenant add NAME` prints the path of a kubeconfig that acts as
// a tenant: it creates ConfigMaps and Decofiles in namespace NAME and is forbidden elsewhere.
// The roles are aggregated as `siteops dev up` does it (tenantroles.Install).
func TestDevTenantAdd(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	if err := c.InstallTenantRoles(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	admin := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(admin, c.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	other := c.Namespace(t, "other", nil)
	name := "acme"
	var out bytes.Buffer
	cmd := NewRootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"dev", "tenant", "add", name, "--kubeconfig", admin})
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("dev tenant add: %v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	path := lines[len(lines)-1]
	if path != filepath.Join(dir, "tenants", name+".kubeconfig") {
		t.Fatalf("printed path %q, want tenants/%s.kubeconfig next to the admin kubeconfig:\n%s", path, name, out.String())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	tenant, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{name, other} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "site"}, Data: map[string]string{"a": "b"}}
		df := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "site"}, Spec: decov1.DecofileSpec{
			Source: decov1.SourceInline, Inline: &decov1.InlineSource{Value: map[string]apiextensionsv1.JSON{"home": {Raw: []byte(`{}`)}}}}}
		for _, obj := range []client.Object{cm, df} {
			err := tenant.Create(ctx, obj)
			switch {
			case ns == name && err != nil:
				t.Errorf("the tenant cannot create %T in its namespace %s: %v", obj, ns, err)
			case ns == other && !apierrors.IsForbidden(err):
				t.Errorf("the tenant's create of %T in namespace %s: %v, want forbidden", obj, ns, err)
			}
		}
	}
	if err := tenant.List(ctx, &corev1.NamespaceList{}); !apierrors.IsForbidden(err) {
		t.Errorf("the tenant lists namespaces: %v, want forbidden", err)
	}

	// Running it again keeps what exists and writes a working kubeconfig again.
	cmd = NewRootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"dev", "tenant", "add", name, "--kubeconfig", admin})
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("dev tenant add, again: %v\n%s", err, out.String())
	}
	cmd = NewRootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"dev", "tenant", "add", "kube-system", "--kubeconfig", admin})
	if err := cmd.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "belongs to the cluster") {
		t.Errorf("dev tenant add kube-system: %v, want refused", err)
	}
}
