package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"

	"github.com/siteops/siteops/internal/waves/wavestest"
)

// wavesRun runs the siteops command line and returns its output and error.
func wavesRun(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := NewRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func wavesFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join("..", "waves", "testdata", "homelab")
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestWavesPrintJSON(t *testing.T) {
	dir := wavesFixture(t)
	out, err := wavesRun(t, "waves", "print", "--catalog", filepath.Join(dir, "catalog"), "-o", "json")
	if err != nil {
		t.Fatal(err, out)
	}
	var rows []nodeRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, r := range rows {
		got[r.Node] = r.Wave
		if r.Node == "seerr" && strings.Join(r.Path, ",") != "seerr,radarr,jackett" {
			t.Errorf("seerr path %v", r.Path)
		}
	}
	if got["seerr"] != 2 || got["nextcloud"] != 1 || got["nextcloud-db"] != 0 || got["gitea-actions"] != 1 {
		t.Fatalf("waves %v", got)
	}
}

func TestWavesLintExitsNonZeroWithOneLinePerProblem(t *testing.T) {
	dir := wavesFixture(t)
	if out, err := wavesRun(t, "waves", "emit", "--repo", dir, "--move"); err != nil {
		t.Fatal(err, out)
	}
	out, err := wavesRun(t, "waves", "lint", "--repo", dir)
	if err != nil || !strings.HasPrefix(out, "ok: 3 waves, 60 resources") {
		t.Fatalf("clean lint: %v\n%s", err, out)
	}
	// Drop wave 1's decryption patch and use an undefined variable.
	p := filepath.Join(dir, "clusters", "dev", "kustomization.yaml")
	data, _ := os.ReadFile(p)
	_ = os.WriteFile(p, bytes.Replace(data, []byte("name: apps-wave-1"), []byte("name: apps-wave-7"), 1), 0o644)
	s := filepath.Join(dir, "apps", "wave-2", "seerr.yaml")
	data, _ = os.ReadFile(s)
	_ = os.WriteFile(s, bytes.Replace(data, []byte("${CLUSTER_DOMAIN}"), []byte("${DOMAIN}"), 1), 0o644)
	out, err = wavesRun(t, "waves", "lint", "--repo", dir)
	if !errors.Is(err, errProblems) {
		t.Fatalf("error %v, want problems", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "decryption: clusters/dev: apps-wave-1") || !strings.HasPrefix(lines[1], "substitution: clusters/dev: seerr.yaml (apps-wave-2) uses ${DOMAIN}") {
		t.Fatalf("lint output:\n%s", out)
	}
}

func TestCatalogRenderWaveLayout(t *testing.T) {
	dir := wavesFixture(t)
	out := filepath.Join(t.TempDir(), "apps")
	if o, err := wavesRun(t, "catalog", "render", filepath.Join(dir, "catalog", "nextcloud.yaml"), "-o", out, "--wave-layout", "--no-image-automation"); err != nil {
		t.Fatal(err, o)
	}
	app, err := os.ReadFile(filepath.Join(out, "wave-1", "nextcloud.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(app, []byte("$imagepolicy")) {
		t.Error("--no-image-automation ignored")
	}
	if _, err := os.Stat(filepath.Join(out, "wave-0", "nextcloud-db.yaml")); err != nil {
		t.Errorf("database not rendered into its own (lower) wave: %v", err)
	}
}

func TestCatalogRenderRejectsInvalidDefinition(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(p, []byte("apiVersion: catalog.siteops.dev/v1alpha1\nkind: ServiceDefinition\nname: Bad_Name\nimage: {repository: r, tag: \"1\"}\n"), 0o644)
	out := t.TempDir()
	_, err := wavesRun(t, "catalog", "render", p, "-o", out)
	if err == nil || !strings.Contains(err.Error(), `name "Bad_Name"`) {
		t.Fatalf("error %v", err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Fatal("an invalid definition wrote files")
	}
}

func TestWavesCutoverCheckNeedsBase(t *testing.T) {
	_, err := wavesRun(t, "waves", "cutover-check", "--repo", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "--base is required") {
		t.Fatalf("error %v", err)
	}
}

func TestWavesPlanJSON(t *testing.T) {
	dir := wavesFixture(t)
	out, err := wavesRun(t, "waves", "plan", "--repo", dir, "-o", "json")
	if err != nil {
		t.Fatal(err, out)
	}
	var p struct {
		Waves     map[string][]string `json:"waves"`
		NotPlaced []struct {
			Name string `json:"name"`
			Wave int    `json:"wave"`
		} `json:"notPlaced"`
		Misplaced []string `json:"misplaced"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err, out)
	}
	if strings.Join(p.Waves["2"], ",") != "seerr.yaml" || len(p.Waves["0"]) != 10 || len(p.Waves["1"]) != 8 {
		t.Fatalf("waves %v", p.Waves)
	}
	if len(p.NotPlaced) != 3 || len(p.Misplaced) != 19 {
		t.Fatalf("not placed %v, %d misplaced", p.NotPlaced, len(p.Misplaced))
	}
}

func TestWavesCutoverCheckFlagsTheSplit(t *testing.T) {
	dir := wavesFixture(t)
	if _, err := git.PlainInit(dir, false); err != nil {
		t.Fatal(err)
	}
	wavestest.Commit(t, dir, "pre-split")
	if out, err := wavesRun(t, "waves", "emit", "--repo", dir, "--move"); err != nil {
		t.Fatal(err, out)
	}
	out, err := wavesRun(t, "waves", "cutover-check", "--repo", dir, "--base", "HEAD")
	if !errors.Is(err, errProblems) {
		t.Fatalf("error %v, want unmitigated hazards\n%s", err, out)
	}
	for _, want := range []string{"HAZARD prune-removal [UNMITIGATED]", "safe sequence:", "prune: false` on Kustomization apps"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
