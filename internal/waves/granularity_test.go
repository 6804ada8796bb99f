package waves_test

import (
	"path/filepath"
	"testing"

	"github.com/siteops/siteops/internal/waves"
	"github.com/siteops/siteops/internal/waves/plan"
)

func TestGranularityFromTheLayout(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, filepath.Join("testdata", "homelab"), dir)
	if g := load(t, dir).Plan.Granularity; g != plan.ByWave {
		t.Fatalf("flat layout: %q", g)
	}
	// A shared kustomize folder under apps/ is not a per-service layout.
	writeFile(t, dir, "apps/components/kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n")
	if g := waves.Granularity(open(t, dir), load(t, dir).Waves); g != plan.ByWave {
		t.Fatalf("with apps/components: %q", g)
	}
	writeFile(t, dir, "apps/gitea/kustomization.yaml", "resources: [gitea.yaml]\n")
	if g := load(t, dir).Plan.Granularity; g != plan.ByService {
		t.Fatalf("with apps/gitea: %q", g)
	}
}
