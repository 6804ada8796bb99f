package cli

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/siteops/siteops/internal/waves/wavestest"
)

// dependsOn returns each app-tier Kustomization's dependsOn as an environment builds it.
func dependsOn(t *testing.T, dir, env string) (map[string]string, int) {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(dir, "clusters", env))
	if err != nil {
		t.Fatal(err)
	}
	out, decrypted := map[string]string{}, 0
	for _, r := range m.Resources() {
		if r.GetKind() != "Kustomization" || !strings.HasPrefix(r.GetName(), "apps-") {
			continue
		}
		deps, _ := r.GetSlice("spec.dependsOn")
		var names []string
		for _, d := range deps {
			names = append(names, d.(map[string]any)["name"].(string))
		}
		out[r.GetName()] = strings.Join(names, " ")
		if p, _ := r.GetString("spec.decryption.provider"); p == "sops" {
			decrypted++
		}
	}
	return out, decrypted
}

func TestServiceGranularity(t *testing.T) {
	dir := shopFixture(t)
	if out, err := wavesRun(t, "waves", "emit", "--repo", dir, "--move", "--granularity", "service"); err != nil {
		t.Fatal(err, out)
	}
	// A second run, without the flag, keeps the layout the repository has.
	if out, err := wavesRun(t, "waves", "emit", "--repo", dir, "--move"); err != nil || out != "up to date\n" {
		t.Fatalf("second emit: %v\n%s", err, out)
	}
	deps, decrypted := dependsOn(t, dir, "prod")
	want := map[string]string{
		"apps-auth-db": "platform-config", "apps-cache": "platform-config", "apps-queue": "platform-config",
		"apps-metrics-agent":  "platform-config", // beside cache: waits for what cache waits for
		"apps-auth":           "apps-auth-db",
		"apps-api":            "apps-auth apps-cache",
		"apps-web":            "apps-api",
		"apps-worker":         "apps-api apps-queue",
		"apps-reports":        "apps-worker",
		"apps-load-generator": "apps-worker",
		"apps-portal":         "apps-reports apps-web",
		"apps-smoke-tests":    "apps-portal",
	}
	if len(deps) != len(want) || decrypted != len(want) {
		t.Errorf("%d Kustomizations (%d decrypting), want %d: %v", len(deps), decrypted, len(want), deps)
	}
	for k, w := range want {
		if deps[k] != w {
			t.Errorf("%s dependsOn %q, want %q", k, deps[k], w)
		}
	}
	if got := readString(t, dir, "apps/portal/kustomization.yaml"); !strings.Contains(got, "# portal, wave 5 (Flux Kustomization apps-portal).\n") || !strings.Contains(got, "- portal.yaml\n") {
		t.Errorf("apps/portal/kustomization.yaml:\n%s", got)
	}
	out, err := wavesRun(t, "waves", "lint", "--repo", dir, "--compare-ref", "HEAD")
	if err != nil || out != "ok: 12 Kustomizations by service, 40 resources\n" {
		t.Fatalf("lint: %v\n%s", err, out)
	}
	out, err = wavesRun(t, "waves", "blast", "api", "--repo", dir)
	if err != nil || !strings.Contains(out, "a failing api (wave 2, apps-api) blocks:") ||
		!strings.Contains(out, "under exact dependencies (--granularity service) (this repository's layout): 6\n    wave 3: web worker\n    wave 4: load-generator reports\n    wave 5: portal\n    wave 6: smoke-tests\n") {
		t.Fatalf("blast api: %v\n%s", err, out)
	}
	out, err = wavesRun(t, "waves", "cutover-check", "--repo", dir, "--base", "HEAD")
	if !errors.Is(err, errProblems) || !strings.Contains(out, "apps -> apps-auth-db: 3") || !strings.Contains(out, "Cluster.postgresql.cnpg.io auth-db/auth-db -> apps-auth-db  DATA LOSS") {
		t.Fatalf("cutover-check: %v\n%s", err, out)
	}
	// The chain check knows every dependency of a service.
	wavestest.Edit(t, dir, "clusters/base/apps-portal.yaml", "  - name: apps-web\n", "")
	out, err = wavesRun(t, "waves", "lint", "--repo", dir)
	if !errors.Is(err, errProblems) || !strings.Contains(out, "chain: Kustomization apps-portal dependsOn [apps-reports], want [apps-reports apps-web]") {
		t.Fatalf("lint with a missing dependency: %v\n%s", err, out)
	}
	if _, err := wavesRun(t, "waves", "plan", "--repo", dir, "--granularity", "node"); err == nil || !strings.Contains(err.Error(), "want wave or service") {
		t.Fatalf("--granularity node: %v", err)
	}
}

// A new dependency moves a service up a wave, which the old wave prunes before the new one
// adopts it; per service the same change moves nothing.
func TestNewDependencyMovesNothingPerService(t *testing.T) {
	for _, tc := range []struct {
		granularity string
		unsafe      bool
		want        string
	}{
		{"wave", true, "HAZARD move-up [UNMITIGATED]: 4 resources leave Kustomization apps-wave-3"},
		{"service", false, "moving: 0 resources"},
	} {
		t.Run(tc.granularity, func(t *testing.T) {
			dir := shopFixture(t)
			if out, err := wavesRun(t, "waves", "emit", "--repo", dir, "--move", "--granularity", tc.granularity); err != nil {
				t.Fatal(err, out)
			}
			wavestest.Commit(t, dir, "split")
			wavestest.Edit(t, dir, "catalog/web.yaml", "  - to: api\n", "  - to: api\n  - to: worker\n")
			if out, err := wavesRun(t, "waves", "emit", "--repo", dir, "--move"); err != nil {
				t.Fatal(err, out)
			}
			out, err := wavesRun(t, "waves", "cutover-check", "--repo", dir, "--base", "HEAD")
			if (err != nil) != tc.unsafe || !strings.Contains(out, tc.want) {
				t.Fatalf("cutover-check: %v\n%s", err, out)
			}
		})
	}
}

// Switching a split repository to per-service Kustomizations removes the waves (the check
// flags each prune: true wave), and switching back restores the committed files byte for byte.
func TestSwitchGranularityRoundTrip(t *testing.T) {
	dir := shopFixture(t)
	if out, err := wavesRun(t, "waves", "emit", "--repo", dir, "--move"); err != nil {
		t.Fatal(err, out)
	}
	wavestest.Commit(t, dir, "waves")
	out, err := wavesRun(t, "waves", "emit", "--repo", dir, "--move", "--granularity", "service")
	if err != nil || !strings.Contains(out, "delete clusters/base/apps-wave-6.yaml") || !strings.Contains(out, "move   apps/wave-0/cache.yaml -> apps/cache/cache.yaml") {
		t.Fatalf("switch to service: %v\n%s", err, out)
	}
	if out, err := wavesRun(t, "waves", "lint", "--repo", dir, "--compare-ref", "HEAD~1"); err != nil || out != "ok: 12 Kustomizations by service, 40 resources\n" {
		t.Fatalf("lint after the switch: %v\n%s", err, out)
	}
	out, err = wavesRun(t, "waves", "cutover-check", "--repo", dir, "--base", "HEAD")
	if !errors.Is(err, errProblems) || strings.Count(out, "HAZARD prune-removal [UNMITIGATED]") != 8 || !strings.Contains(out, "apps-wave-3 -> apps-worker: 4") {
		t.Fatalf("cutover-check of the switch: %v\n%s", err, out)
	}
	if out, err := wavesRun(t, "waves", "emit", "--repo", dir, "--move", "--granularity", "wave"); err != nil {
		t.Fatal(err, out)
	}
	g, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	wt, _ := g.Worktree()
	st, err := wt.Status()
	if err != nil {
		t.Fatal(err)
	}
	if !st.IsClean() {
		t.Fatalf("switching back does not restore the wave layout:\n%s", st)
	}
}
