package emit_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/internal/waves"
	"github.com/siteops/siteops/internal/waves/emit"
	"github.com/siteops/siteops/internal/waves/plan"
	"github.com/siteops/siteops/internal/waves/repo"
	"github.com/siteops/siteops/internal/waves/wavestest"
)

func TestMain(m *testing.M) { wavestest.Main(m) }

func cluster(t *testing.T) *testenv.Cluster { return wavestest.Cluster(t) }

// splitFixture copies the seed's repository and splits it into waves.
func splitFixture(t *testing.T) *repo.Repo {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join("..", "testdata", "homelab")
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	r, err := repo.OnDisk(dir, repo.DefaultLayout)
	if err != nil {
		t.Fatal(err)
	}
	s, err := waves.Load(r, plan.DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := emit.Emit(r, s.Plan, emit.Options{Move: true}); err != nil {
		t.Fatal(err)
	}
	return r
}

func decode(t *testing.T, data []byte, ns string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetNamespace(ns)
	return u
}

func TestEmittedKustomizationsAreAcceptedByFluxCRD(t *testing.T) {
	c := cluster(t)
	r := splitFixture(t)
	ns := c.Namespace(t, "flux-system", nil)
	ctx := context.Background()

	// As committed in clusters/base.
	for _, g := range []string{"apps-wave-0", "apps-wave-1", "apps-wave-2"} {
		data, err := os.ReadFile(r.Path("clusters", "base", g+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		u := decode(t, data, ns)
		if err := c.Client.Create(ctx, u, client.DryRunAll); err != nil {
			t.Fatalf("the API server rejects %s: %v", g, err)
		}
		if got, _, _ := unstructured.NestedString(u.Object, "spec", "path"); got != "./apps/wave-"+strings.TrimPrefix(g, "apps-wave-") {
			t.Errorf("%s: server returned path %q", g, got)
		}
	}

	// As an environment applies them: with the decryption patches.
	m, err := r.Build("clusters", "dev")
	if err != nil {
		t.Fatal(err)
	}
	created := 0
	for _, res := range m.Resources() {
		if res.GetKind() != "Kustomization" || !strings.HasPrefix(res.GetName(), "apps-wave-") {
			continue
		}
		data, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		u := decode(t, data, ns)
		if err := c.Client.Create(ctx, u); err != nil {
			t.Fatalf("the API server rejects %s from clusters/dev: %v", res.GetName(), err)
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(u), got); err != nil {
			t.Fatal(err)
		}
		if p, _, _ := unstructured.NestedString(got.Object, "spec", "decryption", "provider"); p != "sops" {
			t.Errorf("%s stored without SOPS decryption", res.GetName())
		}
		created++
	}
	if created != 3 {
		t.Fatalf("clusters/dev built %d wave Kustomizations, want 3", created)
	}
}

// The CRD does validate: a Kustomization the schema forbids is rejected, so the acceptance above
// means something.
func TestFluxCRDRejectsAnInvalidKustomization(t *testing.T) {
	c := cluster(t)
	r := splitFixture(t)
	ns := c.Namespace(t, "flux-system", nil)
	data, err := os.ReadFile(r.Path("clusters", "base", "apps-wave-0.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	u := decode(t, data, ns)
	if err := unstructured.SetNestedField(u.Object, "Bucketz", "spec", "sourceRef", "kind"); err != nil {
		t.Fatal(err)
	}
	err = c.Client.Create(context.Background(), u, client.DryRunAll)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("error %v, want the schema to reject sourceRef.kind Bucketz", err)
	}
}

// The per-service layout of the deeper sample, as its environment applies it (several dependsOn
// entries, strategic-merge decryption patches), is accepted by the CRD too.
func TestPerServiceKustomizationsAreAcceptedByFluxCRD(t *testing.T) {
	c := cluster(t)
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("..", "testdata", "shop"))); err != nil {
		t.Fatal(err)
	}
	r, err := repo.OnDisk(dir, repo.DefaultLayout)
	if err != nil {
		t.Fatal(err)
	}
	s, err := waves.Load(r, plan.Options{Prefix: "apps", Root: "platform-config", Granularity: plan.ByService})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := emit.Emit(r, s.Plan, emit.Options{Move: true}); err != nil {
		t.Fatal(err)
	}
	m, err := r.Build("clusters", "prod")
	if err != nil {
		t.Fatal(err)
	}
	ns := c.Namespace(t, "flux-system", nil)
	created := 0
	for _, res := range m.Resources() {
		if res.GetKind() != "Kustomization" || !strings.HasPrefix(res.GetName(), "apps-") {
			continue
		}
		data, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		u := decode(t, data, ns)
		if err := c.Client.Create(context.Background(), u, client.DryRunAll); err != nil {
			t.Fatalf("the API server rejects %s: %v", res.GetName(), err)
		}
		if p, _, _ := unstructured.NestedString(u.Object, "spec", "decryption", "provider"); p != "sops" {
			t.Errorf("%s has no SOPS decryption", res.GetName())
		}
		created++
	}
	if created != 12 {
		t.Fatalf("clusters/prod built %d per-service Kustomizations, want 12", created)
	}
}
