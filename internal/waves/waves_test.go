package waves_test

import (
	"crypto/sha256"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/siteops/siteops/internal/waves"
	"github.com/siteops/siteops/internal/waves/cutover"
	"github.com/siteops/siteops/internal/waves/emit"
	"github.com/siteops/siteops/internal/waves/lint"
	"github.com/siteops/siteops/internal/waves/plan"
	"github.com/siteops/siteops/internal/waves/repo"
	"github.com/siteops/siteops/internal/waves/wavestest"
)

// fixture copies the seed's homelab repository into a git repository and commits it.
func fixture(t *testing.T) string {
	t.Helper()
	return wavestest.Repo(t, filepath.Join("testdata", "homelab"), "pre-split layout")
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, dir string) *repo.Repo {
	t.Helper()
	r, err := repo.OnDisk(dir, repo.DefaultLayout)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func load(t *testing.T, dir string) *waves.State {
	t.Helper()
	s, err := waves.Load(open(t, dir), plan.DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func emitMove(t *testing.T, dir string) []emit.Change {
	t.Helper()
	s := load(t, dir)
	ch, err := emit.Emit(s.Repo, s.Plan, emit.Options{Move: true})
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// snapshot hashes every file below dir except .git.
func snapshot(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = sha256.Sum256(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The seed's wave table (section 2), node by node and file by file.
var seedPlacement = map[int][]string{
	0: {"gitea-bootstrap-secret.sops.yaml", "gitea.yaml", "jackett.yaml", "nextcloud-db-app.sops.yaml", "nextcloud-db.yaml",
		"pihole.yaml", "plex.yaml", "qbittorrent.yaml", "semaphore-db-app.sops.yaml", "semaphore-db.yaml"},
	1: {"gitea-actions-runner-secret.sops.yaml", "gitea-actions.yaml", "nextcloud-bootstrap-secret.sops.yaml", "nextcloud.yaml",
		"radarr.yaml", "semaphore-bootstrap-secret.sops.yaml", "semaphore.yaml", "sonarr.yaml"},
	2: {"seerr.yaml"},
}

func TestSeedWaveTable(t *testing.T) {
	s := load(t, filepath.Join("testdata", "homelab"))
	nodes := map[int][]string{}
	for _, n := range s.Waves.Nodes() {
		wv, _ := s.Waves.Wave(n)
		nodes[wv] = append(nodes[wv], n)
	}
	want := map[int][]string{
		0: {"gitea", "jackett", "keycloak-db", "nextcloud-db", "pihole", "plex", "qbittorrent", "semaphore-db", "vm-demo"},
		1: {"gitea-actions", "keycloak", "nextcloud", "radarr", "semaphore", "sonarr"},
		2: {"seerr"},
	}
	if !reflect.DeepEqual(nodes, want) {
		t.Errorf("node waves\n got %v\nwant %v", nodes, want)
	}
	if got := s.Plan.Waves(); !reflect.DeepEqual(got, seedPlacement) {
		t.Errorf("file placement\n got %v\nwant %v", got, seedPlacement)
	}
	notPlaced := map[string]int{}
	for _, n := range s.Plan.NotPlaced {
		notPlaced[n.Name] = n.Wave
	}
	if !reflect.DeepEqual(notPlaced, map[string]int{"keycloak": 1, "keycloak-db": 0, "vm-demo": 0}) {
		t.Errorf("not placed %v, want keycloak w1, keycloak-db w0, vm-demo w0", notPlaced)
	}
	if len(s.Plan.Unmatched) != 0 {
		t.Errorf("unmatched files %v", s.Plan.Unmatched)
	}
	var chain []string
	for _, g := range s.Plan.Groups {
		chain = append(chain, strings.Join(g.DependsOn, ",")+"->"+g.Name)
	}
	if want := []string{"platform-config->apps-wave-0", "apps-wave-0->apps-wave-1", "apps-wave-1->apps-wave-2"}; !reflect.DeepEqual(chain, want) {
		t.Errorf("chain %v, want %v", chain, want)
	}
}

func TestExampleMatchesFixture(t *testing.T) {
	a := snapshot(t, filepath.Join("testdata", "homelab"))
	b := snapshot(t, filepath.Join("..", "..", "examples", "homelab"))
	delete(b, "README.md")
	if !reflect.DeepEqual(a, b) {
		t.Fatal("examples/homelab and internal/waves/testdata/homelab differ: keep them in step")
	}
}

func TestUnmatchedFileIsReported(t *testing.T) {
	dir := fixture(t)
	if err := os.WriteFile(filepath.Join(dir, "apps", "stray.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stray\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := load(t, dir)
	if !reflect.DeepEqual(s.Plan.Unmatched, []string{"stray.yaml"}) {
		t.Fatalf("unmatched %v", s.Plan.Unmatched)
	}
}

func TestEmitMoveIsByteIdenticalAndIdempotent(t *testing.T) {
	dir := fixture(t)
	before := snapshot(t, dir)
	changes := emitMove(t, dir)
	if len(changes) == 0 {
		t.Fatal("no changes")
	}
	after := snapshot(t, dir)
	for wave, files := range seedPlacement {
		for _, f := range files {
			old, ok := before["apps/"+f]
			if !ok {
				t.Fatalf("fixture lacks apps/%s", f)
			}
			moved := "apps/" + plan.Dir(wave) + "/" + f
			if after[moved] != old {
				t.Errorf("%s is not a byte-identical move of apps/%s", moved, f)
			}
			if _, still := after["apps/"+f]; still {
				t.Errorf("apps/%s was copied, not moved", f)
			}
		}
	}
	for _, gone := range []string{"apps/kustomization.yaml", "clusters/base/apps.yaml"} {
		if _, ok := after[gone]; ok {
			t.Errorf("%s still exists after the split", gone)
		}
	}
	again, err := emit.Emit(load(t, dir).Repo, load(t, dir).Plan, emit.Options{Move: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 0 {
		t.Fatalf("second emit changed %v", again)
	}
	if !reflect.DeepEqual(after, snapshot(t, dir)) {
		t.Fatal("second emit changed files")
	}

	base := read(t, dir, "clusters/base/kustomization.yaml")
	for _, want := range []string{"# Cluster-independent Flux Kustomizations", "# The app tier. Every Kustomization listed here", "- apps-wave-0.yaml\n  - apps-wave-1.yaml\n  - apps-wave-2.yaml"} {
		if !strings.Contains(base, want) {
			t.Errorf("clusters/base/kustomization.yaml lacks %q:\n%s", want, base)
		}
	}
	if strings.Contains(base, "apps.yaml") {
		t.Errorf("clusters/base/kustomization.yaml still lists apps.yaml:\n%s", base)
	}
	dev := read(t, dir, "clusters/dev/kustomization.yaml")
	for _, want := range []string{"# SOPS decryption for the app tier. Load-bearing", "# Dev reconciles the platform more often.", "name: apps-wave-0", "name: apps-wave-1", "name: apps-wave-2"} {
		if !strings.Contains(dev, want) {
			t.Errorf("clusters/dev/kustomization.yaml lacks %q:\n%s", want, dev)
		}
	}
	if strings.Count(dev, "provider: sops") != 3 || strings.Contains(dev, "name: apps\n") {
		t.Errorf("want exactly one decryption patch per wave and none for apps:\n%s", dev)
	}
	k := read(t, dir, "clusters/base/apps-wave-1.yaml")
	for _, want := range []string{"name: apps-wave-1", "- name: apps-wave-0", "path: ./apps/wave-1", "prune: true", "wait: true", "interval: 10m0s", "retryInterval: 2m0s", "timeout: 15m0s", "name: cluster-vars"} {
		if !strings.Contains(k, want) {
			t.Errorf("apps-wave-1.yaml lacks %q:\n%s", want, k)
		}
	}

	res := lint.Run(open(t, dir), lint.Options{CompareRef: "HEAD"})
	if len(res.Problems) != 0 {
		t.Fatalf("lint after the split: %v", res.Problems)
	}
	if res.Waves != 3 || res.Resources != 60 {
		t.Fatalf("lint counted %d waves, %d resources; want 3 and the pre-split 60", res.Waves, res.Resources)
	}
}

func TestNewDeepestWaveIsWiredEverywhere(t *testing.T) {
	dir := split(t)
	writeFile(t, dir, "catalog/notifier.yaml", "apiVersion: catalog.siteops.dev/v1alpha1\nkind: ServiceDefinition\nname: notifier\nimage: {repository: r/notifier, tag: \"1\"}\ndependencies:\n  - to: seerr\n")
	writeFile(t, dir, "apps/notifier.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notifier\n  namespace: seerr\n")
	emitMove(t, dir)
	if !strings.Contains(read(t, dir, "clusters/base/kustomization.yaml"), "- apps-wave-3.yaml") {
		t.Error("apps-wave-3 not added to clusters/base")
	}
	if !strings.Contains(read(t, dir, "clusters/dev/kustomization.yaml"), "name: apps-wave-3") {
		t.Error("apps-wave-3 has no decryption patch")
	}
	if res := lint.Run(open(t, dir), lint.Options{}); len(res.Problems) != 0 {
		t.Fatalf("lint: %v", res.Problems)
	}
}

func read(t *testing.T, dir, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func writeFile(t *testing.T, dir, rel, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// split returns a fixture whose split into waves is committed (after a prune-off commit).
func split(t *testing.T) string {
	t.Helper()
	dir := fixture(t)
	wavestest.Edit(t, dir, "clusters/base/apps.yaml", "prune: true", "prune: false")
	wavestest.Commit(t, dir, "apps: stop pruning before the split")
	emitMove(t, dir)
	wavestest.Commit(t, dir, "split the app tier into waves")
	return dir
}

func lintProblems(t *testing.T, dir string, o lint.Options) []lint.Problem {
	t.Helper()
	return lint.Run(open(t, dir), o).Problems
}

func wantProblem(t *testing.T, problems []lint.Problem, check lint.Check, parts ...string) {
	t.Helper()
	for _, p := range problems {
		if p.Check != check {
			continue
		}
		ok := true
		for _, part := range parts {
			ok = ok && strings.Contains(p.Message, part)
		}
		if ok {
			return
		}
	}
	t.Fatalf("no %s problem mentioning %q in %v", check, parts, problems)
}

func TestLintFindsEachProblem(t *testing.T) {
	template := split(t)
	cases := []struct {
		name   string
		change func(t *testing.T, dir string)
		opts   lint.Options
		check  lint.Check
		parts  []string
	}{
		{"cycle", func(t *testing.T, dir string) {
			wavestest.Edit(t, dir, "catalog/jackett.yaml", "ingress:", "dependencies:\n  - to: seerr\ningress:")
		}, lint.Options{}, lint.CheckCatalog, []string{"dependency cycle:", "jackett → seerr → sonarr → jackett"}},
		{"missing anchor", func(t *testing.T, dir string) {
			wavestest.Edit(t, dir, "catalog/extra-units.yaml", "anchor: gitea", "anchor: forgejo")
		}, lint.Options{}, lint.CheckCatalog, []string{"gitea-actions", `anchored to "forgejo"`}},
		{"missing decryption patch", func(t *testing.T, dir string) {
			wavestest.Edit(t, dir, "clusters/dev/kustomization.yaml", "name: apps-wave-1", "name: apps-wave-9")
		}, lint.Options{}, lint.CheckDecryption, []string{"clusters/dev", "apps-wave-1 holds SOPS files", "nextcloud-bootstrap-secret.sops.yaml"}},
		{"unknown variable", func(t *testing.T, dir string) {
			wavestest.Edit(t, dir, "apps/wave-2/seerr.yaml", "requests.${CLUSTER_DOMAIN}", "requests.${CLUSTER_DOMAIN}.${REGION}")
		}, lint.Options{}, lint.CheckSubstitution, []string{"seerr.yaml", "${REGION}", "ConfigMap/cluster-vars"}},
		{"parity", func(t *testing.T, dir string) {
			wavestest.Edit(t, dir, "apps/wave-0/kustomization.yaml", "- plex.yaml\n", "")
		}, lint.Options{CompareRef: "HEAD~1"}, lint.CheckParity, []string{"the waves build 55 resources", "built 60", "Deployment.v1.apps/plex.plex"}},
		{"file in the wrong wave", func(t *testing.T, dir string) {
			wavestest.Edit(t, dir, "catalog/jackett.yaml", "ingress:", "dependencies:\n  - to: plex\ningress:")
		}, lint.Options{}, lint.CheckPlacement, []string{"apps/wave-0/jackett.yaml belongs in apps/wave-1/", "→ plex (w0)"}},
		{"base misses a wave", func(t *testing.T, dir string) {
			wavestest.Edit(t, dir, "clusters/base/kustomization.yaml", "  - apps-wave-2.yaml\n", "")
		}, lint.Options{}, lint.CheckBase, []string{"does not list apps-wave-2.yaml"}},
		{"dependsOn cycle", func(t *testing.T, dir string) {
			wavestest.Edit(t, dir, "clusters/base/apps-wave-0.yaml", "name: platform-config", "name: apps-wave-2")
		}, lint.Options{}, lint.CheckChain, []string{"dependsOn cycle: apps-wave-0 → apps-wave-2 → apps-wave-1 → apps-wave-0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, template, dir)
			if ps := lintProblems(t, dir, lint.Options{CompareRef: "HEAD~1"}); len(ps) != 0 {
				t.Fatalf("clean copy has problems: %v", ps)
			}
			tc.change(t, dir)
			wantProblem(t, lintProblems(t, dir, tc.opts), tc.check, tc.parts...)
		})
	}
}

func TestSubstitutionDefaultsAndEscapes(t *testing.T) {
	dir := split(t)
	wavestest.Edit(t, dir, "apps/wave-2/seerr.yaml", "requests.${CLUSTER_DOMAIN}", "requests.${CLUSTER_DOMAIN}.${REGION:=eu}.$${LITERAL}")
	if ps := lintProblems(t, dir, lint.Options{}); len(ps) != 0 {
		t.Fatalf("a default and an escape are not problems: %v", ps)
	}
}

func TestCutoverPruneTrueRemovalIsFlagged(t *testing.T) {
	dir := fixture(t)
	emitMove(t, dir)
	rep, err := checkCutover(t, dir, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Unmitigated() || len(rep.Hazards) != 1 || rep.Hazards[0].Kind != cutover.PruneRemoval || rep.Hazards[0].Kustomization != "apps" {
		t.Fatalf("hazards %+v, want one unmitigated prune-removal of apps", rep.Hazards)
	}
	if len(rep.Moving) != 60 {
		t.Errorf("%d moving resources, want 60", len(rep.Moving))
	}
	var out strings.Builder
	rep.Print(&out)
	for _, want := range []string{
		"HAZARD prune-removal [UNMITIGATED]: Kustomization apps is removed while it has prune: true",
		"Cluster.postgresql.cnpg.io nextcloud-db/nextcloud-db -> apps-wave-0  DATA LOSS",
		"sets `prune: false` on Kustomization apps",
		"kubectl -n semaphore-db annotate cluster.postgresql.cnpg.io/semaphore-db kustomize.toolkit.fluxcd.io/prune=disabled",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestCutoverAfterPruneOffIsSafe(t *testing.T) {
	dir := fixture(t)
	wavestest.Edit(t, dir, "clusters/base/apps.yaml", "prune: true", "prune: false")
	wavestest.Commit(t, dir, "apps: stop pruning")
	emitMove(t, dir)
	rep, err := checkCutover(t, dir, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Hazards) != 0 || len(rep.Moving) != 60 {
		t.Fatalf("hazards %+v, moving %d; want none and 60", rep.Hazards, len(rep.Moving))
	}
	// Against the original prune: true commit the same change is a hazard.
	rep, err = checkCutover(t, dir, "HEAD~1")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Unmitigated() {
		t.Fatal("removal of a prune: true Kustomization not flagged")
	}
}

func TestCutoverProtectedObjectsMitigate(t *testing.T) {
	dir := fixture(t)
	// Annotate every app object at the base ref: the removal can no longer delete anything.
	for _, f := range []string{"apps/kustomization.yaml"} {
		wavestest.Edit(t, dir, f, "kind: Kustomization\n", "kind: Kustomization\ncommonAnnotations:\n  kustomize.toolkit.fluxcd.io/prune: disabled\n")
	}
	wavestest.Commit(t, dir, "protect the app tier")
	emitMove(t, dir)
	rep, err := checkCutover(t, dir, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Hazards) != 1 || !rep.Hazards[0].Mitigated || rep.Unmitigated() {
		t.Fatalf("hazards %+v, want one mitigated", rep.Hazards)
	}
}

func TestCutoverMoveUpIsFlagged(t *testing.T) {
	dir := split(t)
	// jackett now needs plex: it (and sonarr, radarr, seerr after it) moves up a wave.
	wavestest.Edit(t, dir, "catalog/jackett.yaml", "ingress:", "dependencies:\n  - to: plex\ningress:")
	emitMove(t, dir)
	rep, err := checkCutover(t, dir, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Unmitigated() {
		t.Fatalf("move up not flagged: %+v", rep)
	}
	found := map[string]bool{}
	for _, h := range rep.Hazards {
		if h.Kind != cutover.MoveUp {
			t.Errorf("unexpected hazard %s", h.Kind)
		}
		for _, r := range h.Resources {
			found[r.ID+" "+r.From+"->"+r.To] = true
		}
	}
	for _, want := range []string{
		"Deployment.apps jackett/jackett apps-wave-0->apps-wave-1",
		"PersistentVolumeClaim jackett/jackett-config apps-wave-0->apps-wave-1",
		"Deployment.apps sonarr/sonarr apps-wave-1->apps-wave-2",
		"Deployment.apps seerr/seerr apps-wave-2->apps-wave-3",
	} {
		if !found[want] {
			t.Errorf("hazard lacks %q; have %v", want, found)
		}
	}
	if ps := lintProblems(t, dir, lint.Options{}); len(ps) != 0 {
		t.Fatalf("lint after the re-plan: %v", ps)
	}
}

func TestCutoverMoveDownIsSafe(t *testing.T) {
	dir := split(t)
	// sonarr drops its dependencies: it moves from wave 1 to wave 0, which reconciles first and
	// takes the objects over, so wave 1 does not delete them.
	wavestest.Edit(t, dir, "catalog/sonarr.yaml", "dependencies:\n  - to: qbittorrent\n  - to: jackett\n", "")
	emitMove(t, dir)
	rep, err := checkCutover(t, dir, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Hazards) != 0 || len(rep.Moving) == 0 {
		t.Fatalf("hazards %+v moving %d; want none and some", rep.Hazards, len(rep.Moving))
	}
}

func mustAtRef(t *testing.T, dir, ref string) *repo.Repo {
	t.Helper()
	r, err := repo.AtRef(dir, ref, repo.DefaultLayout)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNonGatingUnit(t *testing.T) {
	dir := fixture(t)
	wavestest.Edit(t, dir, "catalog/extra-units.yaml", "above: true", "above: true\n    nonGating: true")
	emitMove(t, dir)
	if _, err := os.Stat(filepath.Join(dir, "apps", "wave-1-gitea-actions", "gitea-actions.yaml")); err != nil {
		t.Fatalf("unit not in its own folder: %v", err)
	}
	k := read(t, dir, "clusters/base/apps-wave-1-gitea-actions.yaml")
	for _, want := range []string{"name: apps-wave-1-gitea-actions", "- name: apps-wave-0", "path: ./apps/wave-1-gitea-actions", "non-gating"} {
		if !strings.Contains(k, want) {
			t.Errorf("unit Kustomization lacks %q:\n%s", want, k)
		}
	}
	if !strings.Contains(read(t, dir, "clusters/base/apps-wave-2.yaml"), "- name: apps-wave-1\n") {
		t.Error("wave 2 must still wait for wave 1 only")
	}
	if !strings.Contains(read(t, dir, "clusters/dev/kustomization.yaml"), "name: apps-wave-1-gitea-actions") {
		t.Error("the unit's Kustomization has no decryption patch")
	}
	res := lint.Run(open(t, dir), lint.Options{CompareRef: "HEAD"})
	if len(res.Problems) != 0 || res.Waves != 4 || res.Resources != 60 {
		t.Fatalf("lint: %v (%d Kustomizations, %d resources)", res.Problems, res.Waves, res.Resources)
	}
}

func TestCutoverRemovedWaveWithPruneIsFlagged(t *testing.T) {
	dir := split(t)
	// seerr loses its dependencies: wave 2 empties and its Kustomization is removed while it
	// still prunes, so its finalizer races wave 0's adoption.
	wavestest.Edit(t, dir, "catalog/seerr.yaml", "dependencies:\n  - to: sonarr\n  - to: radarr\n", "")
	emitMove(t, dir)
	rep, err := checkCutover(t, dir, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Hazards) != 1 || rep.Hazards[0].Kind != cutover.PruneRemoval || rep.Hazards[0].Kustomization != "apps-wave-2" {
		t.Fatalf("hazards %+v, want the removal of apps-wave-2", rep.Hazards)
	}
	if len(rep.Removed) != 1 || rep.Removed[0] != "apps-wave-2" {
		t.Fatalf("removed %v", rep.Removed)
	}
}

// checkCutover runs the cut-over check of the fixture's only environment.
func checkCutover(t *testing.T, dir, ref string) (*cutover.Report, error) {
	t.Helper()
	reps, err := cutover.Check(mustAtRef(t, dir, ref), open(t, dir))
	if err != nil {
		return nil, err
	}
	if len(reps) != 1 || reps[0].Where != "clusters/dev" {
		t.Fatalf("%d reports, want one for clusters/dev", len(reps))
	}
	return reps[0], nil
}

func TestLintFindsTwoOwners(t *testing.T) {
	dir := fixture(t)
	// Emit without --move or retiring `apps`, then move the files by hand but keep apps.
	s := load(t, dir)
	if _, err := emit.Emit(s.Repo, s.Plan, emit.Options{}); err != nil {
		t.Fatal(err)
	}
	for wave, files := range seedPlacement {
		for _, f := range files {
			if err := os.Rename(filepath.Join(dir, "apps", f), filepath.Join(dir, "apps", plan.Dir(wave), f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	wavestest.Edit(t, dir, "apps/kustomization.yaml", "resources:\n", "resources:\n  - wave-0\n  - wave-1\n  - wave-2\n")
	for _, f := range []string{"pihole.yaml", "gitea.yaml", "gitea-bootstrap-secret.sops.yaml", "gitea-actions.yaml", "gitea-actions-runner-secret.sops.yaml", "jackett.yaml", "plex.yaml", "qbittorrent.yaml", "sonarr.yaml", "radarr.yaml", "seerr.yaml", "nextcloud.yaml", "nextcloud-bootstrap-secret.sops.yaml", "nextcloud-db.yaml", "nextcloud-db-app.sops.yaml", "semaphore.yaml", "semaphore-bootstrap-secret.sops.yaml", "semaphore-db.yaml", "semaphore-db-app.sops.yaml"} {
		wavestest.Edit(t, dir, "apps/kustomization.yaml", "  - "+f+"\n", "")
	}
	wantProblem(t, lintProblems(t, dir, lint.Options{}), lint.CheckOwnership, "Kustomization apps (./apps) applies", "and 57 more", "remove apps in the cut-over")
}

var update = flag.Bool("update", false, "rewrite the golden files")

// The files emit writes or edits for the seed's repository, compared with golden copies.
func TestEmitGolden(t *testing.T) {
	dir := fixture(t)
	emitMove(t, dir)
	files := []string{
		"apps/wave-0/kustomization.yaml", "apps/wave-1/kustomization.yaml", "apps/wave-2/kustomization.yaml",
		"clusters/base/apps-wave-0.yaml", "clusters/base/apps-wave-1.yaml", "clusters/base/apps-wave-2.yaml",
		"clusters/base/kustomization.yaml", "clusters/dev/kustomization.yaml",
	}
	for _, f := range files {
		golden := filepath.Join("testdata", "golden-split", filepath.FromSlash(f))
		got := read(t, dir, f)
		if *update {
			writeFile(t, ".", golden, got)
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if got != string(want) {
			t.Errorf("%s differs from %s:\n%s", f, golden, got)
		}
	}
}

func TestEmitRetiresAppsAfterManualMoves(t *testing.T) {
	dir := fixture(t)
	for wave, files := range seedPlacement {
		for _, f := range files {
			writeFile(t, dir, "apps/"+plan.Dir(wave)+"/"+f, read(t, dir, "apps/"+f))
			if err := os.Remove(filepath.Join(dir, "apps", f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := load(t, dir)
	if _, err := emit.Emit(s.Repo, s.Plan, emit.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"apps/kustomization.yaml", "clusters/base/apps.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, gone)); !os.IsNotExist(err) {
			t.Errorf("%s not retired after the files were moved by hand", gone)
		}
	}
	if ps := lintProblems(t, dir, lint.Options{CompareRef: "HEAD"}); len(ps) != 0 {
		t.Fatalf("lint: %v", ps)
	}
}
