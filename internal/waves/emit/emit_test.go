package emit_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/waves/wavestest"

	"github.com/siteops/siteops/internal/waves"
	"github.com/siteops/siteops/internal/waves/emit"
	"github.com/siteops/siteops/internal/waves/plan"
	"github.com/siteops/siteops/internal/waves/repo"
)

func read(t *testing.T, dir, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

const sd = "apiVersion: catalog.siteops.dev/v1alpha1\nkind: ServiceDefinition\nname: %s\nimage: {repository: r, tag: \"1\"}\n"

// small is a repository without an `apps` Kustomization to copy, with a strategic-merge
// decryption patch in one environment and none in another.
func small(t *testing.T) string {
	dir := t.TempDir()
	wavestest.WriteFile(t, dir, "catalog/a.yaml", strings.ReplaceAll(sd, "%s", "a"))
	wavestest.WriteFile(t, dir, "catalog/b.yaml", strings.ReplaceAll(sd, "%s", "b")+"dependencies:\n  - to: a\n")
	wavestest.WriteFile(t, dir, "apps/a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n")
	wavestest.WriteFile(t, dir, "apps/a-bootstrap-secret.sops.yaml", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: a\nsops:\n  version: 3.9.4\n")
	wavestest.WriteFile(t, dir, "apps/b.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n")
	wavestest.WriteFile(t, dir, "clusters/base/kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [] # filled by emit\n")
	wavestest.WriteFile(t, dir, "clusters/prod/kustomization.yaml", `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../base
patches:
# Decrypt the first wave.
- patch: |
    apiVersion: kustomize.toolkit.fluxcd.io/v1
    kind: Kustomization
    metadata:
      name: apps-wave-0
    spec:
      decryption:
        provider: sops
        secretRef:
          name: prod-age
`)
	wavestest.WriteFile(t, dir, "clusters/lab/kustomization.yaml", "resources:\n- ../base\n")
	return dir
}

func run(t *testing.T, dir string, o emit.Options) []emit.Change {
	t.Helper()
	r, err := repo.OnDisk(dir, repo.DefaultLayout)
	if err != nil {
		t.Fatal(err)
	}
	s, err := waves.Load(r, plan.DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := emit.Emit(r, s.Plan, o)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func TestEmitWithoutTemplateUsesFlagsAndAddsPatches(t *testing.T) {
	dir := small(t)
	run(t, dir, emit.Options{Move: true, Interval: 3 * time.Minute, SourceName: "homelab", SubstituteFrom: []string{"ConfigMap/vars"}})
	k := read(t, dir, "clusters/base/apps-wave-1.yaml")
	for _, want := range []string{"interval: 3m0s", "name: homelab", "kind: GitRepository", "name: vars", "namespace: flux-system", "- name: apps-wave-0"} {
		if !strings.Contains(k, want) {
			t.Errorf("apps-wave-1.yaml lacks %q:\n%s", want, k)
		}
	}
	prod := read(t, dir, "clusters/prod/kustomization.yaml")
	if strings.Count(prod, "name: prod-age") != 2 || !strings.Contains(prod, "name: apps-wave-1\n") || strings.Count(prod, "# Decrypt the first wave.") != 1 {
		t.Errorf("prod patches not copied from its strategic-merge patch:\n%s", prod)
	}
	lab := read(t, dir, "clusters/lab/kustomization.yaml")
	if strings.Count(lab, "name: sops-age") != 2 {
		t.Errorf("lab did not get the standard patch for both waves:\n%s", lab)
	}
	if again := run(t, dir, emit.Options{Move: true, Interval: 3 * time.Minute, SourceName: "homelab", SubstituteFrom: []string{"ConfigMap/vars"}}); len(again) != 0 {
		t.Fatalf("second run changed %v", again)
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	dir := small(t)
	before := read(t, dir, "clusters/prod/kustomization.yaml")
	ch := run(t, dir, emit.Options{Move: true, DryRun: true})
	if len(ch) == 0 {
		t.Fatal("dry run reported no changes")
	}
	if _, err := os.Stat(filepath.Join(dir, "apps", "wave-0")); !os.IsNotExist(err) {
		t.Fatal("dry run created a wave folder")
	}
	if read(t, dir, "clusters/prod/kustomization.yaml") != before {
		t.Fatal("dry run edited a file")
	}
}

func TestVanishedWaveIsRemovedEverywhere(t *testing.T) {
	dir := small(t)
	run(t, dir, emit.Options{Move: true})
	// b no longer depends on a: wave 1 is empty.
	wavestest.WriteFile(t, dir, "catalog/b.yaml", strings.ReplaceAll(sd, "%s", "b"))
	ch := run(t, dir, emit.Options{Move: true})
	var got []string
	for _, c := range ch {
		got = append(got, c.String())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{"move   apps/wave-1/b.yaml -> apps/wave-0/b.yaml", "delete clusters/base/apps-wave-1.yaml", "delete apps/wave-1/kustomization.yaml"} {
		if !strings.Contains(all, want) {
			t.Errorf("changes lack %q:\n%s", want, all)
		}
	}
	for _, f := range []string{"clusters/base/kustomization.yaml", "clusters/prod/kustomization.yaml", "clusters/lab/kustomization.yaml"} {
		if strings.Contains(read(t, dir, f), "apps-wave-1") {
			t.Errorf("%s still names apps-wave-1:\n%s", f, read(t, dir, f))
		}
	}
}

func TestBadSubstituteFromFlag(t *testing.T) {
	dir := small(t)
	r, _ := repo.OnDisk(dir, repo.DefaultLayout)
	s, err := waves.Load(r, plan.DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	_, err = emit.Emit(r, s.Plan, emit.Options{SubstituteFrom: []string{"cluster-vars"}})
	if err == nil || !strings.Contains(err.Error(), "want ConfigMap/<name>") {
		t.Fatalf("error %v", err)
	}
}
