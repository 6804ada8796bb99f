package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/siteops/siteops/internal/waves/wavestest"
)

// shopFixture copies the second sample repository (seven waves, extra units with and without
// `above`, a non-gating unit, a service that is not onboarded, a strategic-merge decryption
// patch) into a git repository with one commit.
func shopFixture(t *testing.T) string {
	t.Helper()
	return wavestest.Repo(t, filepath.Join("..", "waves", "testdata", "shop"), "shop: one apps Kustomization")
}

func TestShopPrintAndPlan(t *testing.T) {
	dir := shopFixture(t)
	out, err := wavesRun(t, "waves", "print", "--repo", dir, "-o", "json")
	if err != nil {
		t.Fatal(err, out)
	}
	var rows []nodeRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rows {
		got[r.Node] = strings.Join([]string{string(rune('0' + r.Wave)), r.Kind, strings.Join(r.Path, ">")}, " ")
	}
	want := map[string]string{
		"auth-db":        "0 database auth-db",
		"cache":          "0 service cache",
		"queue":          "0 service queue",
		"metrics-agent":  "0 unit metrics-agent>cache",
		"auth":           "1 service auth>auth-db",
		"api":            "2 service api>auth>auth-db",
		"web":            "3 service web>api>auth>auth-db",
		"worker":         "3 service worker>api>auth>auth-db",
		"billing":        "3 service billing>api>auth>auth-db",
		"reports":        "4 service reports>worker>api>auth>auth-db",
		"load-generator": "4 unit load-generator>worker>api>auth>auth-db",
		"portal":         "5 service portal>reports>worker>api>auth>auth-db",
		"smoke-tests":    "6 unit smoke-tests>portal>reports>worker>api>auth>auth-db",
	}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("%s: %q, want %q", n, got[n], w)
		}
	}
	if len(rows) != len(want) {
		t.Errorf("%d nodes, want %d", len(rows), len(want))
	}
	// Blast radii, counted by hand over the placed nodes (billing is not onboarded): cache holds
	// back waves 1-6 and the non-gating load generator (8) under the chain; exactly, api and
	// everything on api (7), but not metrics-agent, which runs beside it.
	for n, w := range map[string]diagramBlast{"cache": {8, 7}, "queue": {8, 5}, "metrics-agent": {8, 0}, "api": {6, 6}, "worker": {4, 4}, "web": {4, 2}, "portal": {1, 1}, "load-generator": {0, 0}} {
		for _, r := range rows {
			if r.Node == n && r.Blast != w {
				t.Errorf("%s blast %+v, want %+v", n, r.Blast, w)
			}
		}
	}

	out, err = wavesRun(t, "waves", "plan", "--repo", dir, "-o", "json")
	if err != nil {
		t.Fatal(err, out)
	}
	var p planJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err, out)
	}
	if len(p.Waves) != 7 || strings.Join(p.Waves[6], ",") != "smoke-tests-token.sops.yaml,smoke-tests.yaml" || strings.Join(p.Waves[0], ",") != "auth-db-app.sops.yaml,auth-db.yaml,cache.yaml,metrics-agent.yaml,queue.yaml" {
		t.Fatalf("waves %v", p.Waves)
	}
	if len(p.NotPlaced) != 1 || p.NotPlaced[0].Name != "billing" || len(p.Misplaced) != 15 {
		t.Fatalf("not placed %v, misplaced %d", p.NotPlaced, len(p.Misplaced))
	}
	last := p.Groups[len(p.Groups)-1]
	if !last.NonGating || last.Name != "apps-wave-4-load-generator" || strings.Join(last.DependsOn, ",") != "apps-wave-3" {
		t.Fatalf("non-gating unit group %+v", last)
	}
}

func TestShopEmitLintCutover(t *testing.T) {
	dir := shopFixture(t)
	if out, err := wavesRun(t, "waves", "emit", "--repo", dir, "--move"); err != nil {
		t.Fatal(err, out)
	}
	if out, err := wavesRun(t, "waves", "emit", "--repo", dir, "--move"); err != nil || out != "up to date\n" {
		t.Fatalf("second emit: %v\n%s", err, out)
	}
	// Every Kustomization gets a copy of the strategic-merge patch, naming the same key.
	prod := readString(t, dir, "clusters/prod/kustomization.yaml")
	if n := strings.Count(prod, "decryption:"); n != 8 || strings.Count(prod, "name: sops-gpg") != 8 || strings.Contains(prod, "name: apps\n") {
		t.Fatalf("clusters/prod decryption patches (%d):\n%s", n, prod)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(dir, "clusters", "prod"))
	if err != nil {
		t.Fatal(err)
	}
	decrypted := 0
	for _, r := range m.Resources() {
		if r.GetKind() == "Kustomization" && strings.HasPrefix(r.GetName(), "apps-wave-") {
			if p, _ := r.GetString("spec.decryption.provider"); p == "sops" {
				decrypted++
			}
		}
	}
	if decrypted != 8 {
		t.Fatalf("%d of 8 wave Kustomizations decrypt in clusters/prod", decrypted)
	}
	out, err := wavesRun(t, "waves", "lint", "--repo", dir, "--compare-ref", "HEAD")
	if err != nil || out != "ok: 8 waves, 40 resources\n" {
		t.Fatalf("lint: %v\n%s", err, out)
	}
	out, err = wavesRun(t, "waves", "cutover-check", "--repo", dir, "--base", "HEAD")
	if !errors.Is(err, errProblems) {
		t.Fatalf("cutover-check: %v, want unmitigated hazards\n%s", err, out)
	}
	for _, want := range []string{
		"cut-over from HEAD to the working tree (clusters/prod)",
		"moving: 40 resources",
		"apps -> apps-wave-4-load-generator: 1",
		"HAZARD prune-removal [UNMITIGATED]: Kustomization apps",
		"Cluster.postgresql.cnpg.io auth-db/auth-db -> apps-wave-0  DATA LOSS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("cutover-check lacks %q:\n%s", want, out)
		}
	}

	// A wave patch that no longer decrypts is found on the strategic-merge layout too.
	wavestest.Edit(t, dir, "clusters/prod/kustomization.yaml",
		"name: apps-wave-6\n        namespace: flux-system\n      spec:\n        decryption:\n          provider: sops\n          secretRef:\n            name: sops-gpg\n",
		"name: apps-wave-6\n        namespace: flux-system\n      spec:\n        interval: 1m\n")
	out, err = wavesRun(t, "waves", "lint", "--repo", dir)
	if !errors.Is(err, errProblems) || !strings.Contains(out, "decryption: clusters/prod: apps-wave-6 holds SOPS files (smoke-tests-token.sops.yaml)") {
		t.Fatalf("lint without wave 6's patch: %v\n%s", err, out)
	}
}

// With prune turned off first (its own merge), the split is safe; billing onboarded later lands
// in wave 3 without a new Kustomization.
func TestShopCutoverAfterPruneOffAndOnboarding(t *testing.T) {
	dir := shopFixture(t)
	wavestest.Edit(t, dir, "clusters/base/apps.yaml", "prune: true", "prune: false")
	wavestest.Commit(t, dir, "apps: stop pruning")
	if out, err := wavesRun(t, "waves", "emit", "--repo", dir, "--move"); err != nil {
		t.Fatal(err, out)
	}
	out, err := wavesRun(t, "waves", "cutover-check", "--repo", dir, "--base", "HEAD")
	if err != nil || !strings.Contains(out, "no hazard") {
		t.Fatalf("cutover-check after prune off: %v\n%s", err, out)
	}
	wavestest.Commit(t, dir, "split into waves")
	if out, err := wavesRun(t, "catalog", "render", filepath.Join(dir, "catalog", "billing.yaml"), "-o", filepath.Join(dir, "apps"), "--wave-layout"); err != nil {
		t.Fatal(err, out)
	}
	out, err = wavesRun(t, "waves", "emit", "--repo", dir)
	if err != nil || !strings.Contains(out, "write  apps/wave-3/kustomization.yaml") || strings.Contains(out, "clusters/") {
		t.Fatalf("emit after onboarding billing: %v\n%s", err, out)
	}
	if out, err := wavesRun(t, "waves", "lint", "--repo", dir); err != nil {
		t.Fatalf("lint: %v\n%s", err, out)
	}
	if out, err := wavesRun(t, "waves", "cutover-check", "--repo", dir, "--base", "HEAD"); err != nil || !strings.Contains(out, "moving: 0 resources") {
		t.Fatalf("onboarding moves nothing: %v\n%s", err, out)
	}
}

func readString(t *testing.T, dir, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
