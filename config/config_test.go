// Package config_test checks that the kustomize configuration builds and that what it installs is
// accepted by a real API server.
package config_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, servers.APIServerOptions{}) }

func build(t *testing.T, dir string) []*resource.Resource {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return rm.Resources()
}

func TestDefaultBuilds(t *testing.T) {
	byKind := map[string][]*resource.Resource{}
	for _, r := range build(t, "default") {
		byKind[r.GetKind()] = append(byKind[r.GetKind()], r)
		if r.GetKind() != "Namespace" && r.GetKind() != "CustomResourceDefinition" && r.GetKind() != "ClusterRole" &&
			r.GetKind() != "ClusterRoleBinding" && r.GetNamespace() != "siteops-system" &&
			r.GetKind() != "MutatingWebhookConfiguration" && r.GetKind() != "ValidatingWebhookConfiguration" {
			t.Errorf("%s %s is in namespace %q, want siteops-system", r.GetKind(), r.GetName(), r.GetNamespace())
		}
	}
	deploys := byKind["Deployment"]
	if len(deploys) != 1 || deploys[0].GetName() != "siteops-manager" {
		t.Fatalf("want one Deployment siteops-manager, got %v", deploys)
	}
	replicas, err := deploys[0].GetFieldValue("spec.replicas")
	if err != nil || replicas != 2 {
		t.Errorf("manager replicas = %v (%v), want 2 for leader election with a standby", replicas, err)
	}
	if len(byKind["CustomResourceDefinition"]) == 0 {
		t.Error("no CRDs in config/default")
	}
	for _, b := range byKind["ClusterRoleBinding"] {
		ref, _ := b.GetFieldValue("roleRef.name")
		found := false
		for _, r := range byKind["ClusterRole"] {
			found = found || r.GetName() == ref
		}
		if !found {
			t.Errorf("ClusterRoleBinding %s refers to missing ClusterRole %v", b.GetName(), ref)
		}
	}
}

// TestRBACAccepted installs the generated RBAC into a real API server.
func TestRBACAccepted(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	for _, r := range build(t, "rbac") {
		u, err := toUnstructured(r)
		if err != nil {
			t.Fatal(err)
		}
		if u.GetNamespace() != "" {
			u.SetNamespace("default")
		}
		if err := c.Client.Create(ctx, u, client.DryRunAll); err != nil {
			t.Errorf("API server rejected %s %s: %v", r.GetKind(), r.GetName(), err)
		}
	}
}

func toUnstructured(r *resource.Resource) (*unstructured.Unstructured, error) {
	m, err := r.Map()
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}
