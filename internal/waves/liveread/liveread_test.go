package liveread_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	kustv1 "github.com/fluxcd/kustomize-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/siteops/siteops/internal/cli"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/internal/waves"
	"github.com/siteops/siteops/internal/waves/cutover"
	"github.com/siteops/siteops/internal/waves/emit"
	"github.com/siteops/siteops/internal/waves/liveread"
	"github.com/siteops/siteops/internal/waves/plan"
	"github.com/siteops/siteops/internal/waves/repo"
	"github.com/siteops/siteops/internal/waves/wavestest"
)

func TestMain(m *testing.M) { wavestest.Main(m, filepath.Join("testdata", "crds")) }

func cluster(t *testing.T) (*testenv.Cluster, client.Client) {
	t.Helper()
	c := wavestest.Cluster(t)
	cl, err := liveread.NewClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c, cl
}

// fixture copies the seed's repository into a git repository and commits it.
func fixture(t *testing.T) string {
	t.Helper()
	return wavestest.Repo(t, filepath.Join("..", "testdata", "homelab"), "pre-split layout")
}

func emitMove(t *testing.T, dir string) *repo.Repo {
	t.Helper()
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

func atRef(t *testing.T, dir, ref string) *repo.Repo {
	t.Helper()
	r, err := repo.AtRef(dir, ref, repo.DefaultLayout)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// inventory is what Flux records for a build: one entry per object.
func inventory(t *testing.T, r *repo.Repo, dir string) []kustv1.ResourceRef {
	t.Helper()
	m, err := r.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []kustv1.ResourceRef
	for _, res := range m.Resources() {
		gvk := res.GetGvk()
		out = append(out, kustv1.ResourceRef{ID: res.GetNamespace() + "_" + res.GetName() + "_" + gvk.Group + "_" + gvk.Kind, Version: gvk.Version})
	}
	return out
}

// liveKustomization creates a Kustomization as Flux would hold it, inventory in its status.
func liveKustomization(t *testing.T, c client.Client, ns string, k *kustv1.Kustomization, inv []kustv1.ResourceRef) {
	t.Helper()
	ctx := context.Background()
	k = k.DeepCopy()
	k.Namespace, k.ResourceVersion, k.Status = ns, "", kustv1.KustomizationStatus{}
	if _, ok := k.Labels["hand-made"]; !ok {
		// As the root Kustomization applies it.
		k.Labels = map[string]string{"kustomize.toolkit.fluxcd.io/name": "flux-system", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}
	} else {
		k.Labels = nil
	}
	if err := c.Create(ctx, k); err != nil {
		t.Fatalf("create Kustomization %s: %v", k.Name, err)
	}
	k.Status.Inventory = &kustv1.ResourceInventory{Entries: inv}
	if err := c.Status().Update(ctx, k); err != nil {
		t.Fatalf("record the inventory of %s: %v", k.Name, err)
	}
}

// gitKustomization reads a Kustomization from an environment's build at a ref.
func gitKustomization(t *testing.T, r *repo.Repo, env, name string) *kustv1.Kustomization {
	t.Helper()
	m, err := r.Build("clusters", env)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range m.Resources() {
		if res.GetKind() == "Kustomization" && res.GetName() == name {
			data, _ := res.AsYAML()
			k := &kustv1.Kustomization{}
			if err := yaml.Unmarshal(data, k); err != nil {
				t.Fatal(err)
			}
			return k
		}
	}
	t.Fatalf("clusters/%s builds no Kustomization %s", env, name)
	return nil
}

var vars = regexp.MustCompile(`\$\{[^}]*\}`)

// createObjects creates the objects of a manifest file on the cluster (Flux variables
// substituted), with extra annotations.
func createObjects(t *testing.T, c client.Client, data []byte, annotations map[string]string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(vars.ReplaceAllString(string(data), "x"), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		a := u.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		for k, v := range annotations {
			a[k] = v
		}
		u.SetAnnotations(a)
		if err := c.Create(context.Background(), u); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		out = append(out, u)
	}
	return out
}

func ensure(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

func protect() map[string]string {
	return map[string]string{cutover.PruneAnnotation: cutover.PruneDisabled}
}

// legacyObjects are on the cluster but not in git: a ConfigMap and a HelmRelease whose release
// holds a PVC and a StatefulSet (labelled by helm-controller) and is not holding an unlabelled
// ConfigMap next to them.
func legacyObjects(t *testing.T, c client.Client) []kustv1.ResourceRef {
	t.Helper()
	helm := map[string]string{liveread.HelmNameLabel: "redis", liveread.HelmNamespaceLabel: "legacy"}
	hr := &unstructured.Unstructured{}
	hr.SetAPIVersion("helm.toolkit.fluxcd.io/v2")
	hr.SetKind("HelmRelease")
	hr.SetNamespace("legacy")
	hr.SetName("redis")
	labels := map[string]string{"app": "redis"}
	ensure(t, c,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "legacy-settings", Namespace: "legacy"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: "legacy"}},
		hr,
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "redis-data", Namespace: "legacy", Labels: helm}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "redis", Namespace: "legacy", Labels: helm}, Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "redis", Image: "redis:7"}}}},
		}},
	)
	return []kustv1.ResourceRef{
		{ID: "legacy_legacy-settings__ConfigMap", Version: "v1"},
		{ID: "legacy_redis_helm.toolkit.fluxcd.io_HelmRelease", Version: "v2"},
	}
}

func report(rep *cutover.Report) string {
	var b strings.Builder
	rep.Print(&b)
	return b.String()
}

// The split of `apps` into waves, checked against what the cluster runs rather than git: the
// live Kustomization's prune, deletionPolicy and suspend decide, its inventory (with objects git
// does not have) says what is at risk, and live annotations and Helm releases are read.
func TestLiveSplitOfApps(t *testing.T) {
	_, c := cluster(t)
	dir := fixture(t) // HEAD~1: apps with prune: true
	wavestest.Edit(t, dir, "clusters/base/apps.yaml", "prune: true", "prune: false")
	wavestest.Commit(t, dir, "apps: stop pruning") // HEAD: apps with prune: false
	base := atRef(t, dir, "HEAD")
	apps := gitKustomization(t, base, "dev", "apps")
	platform := gitKustomization(t, base, "dev", "platform")
	inv := inventory(t, base, "apps")
	after := emitMove(t, dir)

	// Live only: the CNPG cluster carries the prune annotation; the inventory holds objects git
	// does not build.
	ensure(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nextcloud-db"}})
	db, err := os.ReadFile(filepath.Join(dir, "apps", "wave-0", "nextcloud-db.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	createObjects(t, c, db, protect())
	inv = append(inv, legacyObjects(t, c)...)

	cases := []struct {
		name          string
		handMade      bool
		spec          func(*kustv1.KustomizationSpec)
		base          string
		unsafe        bool
		offlineUnsafe bool
		want          []string
	}{{
		name: "live prune false where git has true",
		spec: func(s *kustv1.KustomizationSpec) { s.Prune = false },
		base: "HEAD~1", offlineUnsafe: true,
		want: []string{
			"live differs from git: Kustomization apps has prune: false on the cluster, true at HEAD~1",
			"note: removed Kustomization apps releases its objects without deleting them: prune: false",
			"no hazard",
		},
	}, {
		name: "live prune true where git has false",
		spec: func(s *kustv1.KustomizationSpec) { s.Prune = true },
		base: "HEAD", unsafe: true,
		want: []string{
			"cut-over from the live cluster to the working tree (clusters/dev)",
			"live differs from git: Kustomization apps has prune: true on the cluster, false at HEAD",
			"live differs from git: the inventory of apps holds ConfigMap legacy/legacy-settings, which HEAD does not build",
			"live differs from git: Cluster.postgresql.cnpg.io nextcloud-db/nextcloud-db carries kustomize.toolkit.fluxcd.io/prune: disabled on the cluster only",
			"HAZARD prune-removal [UNMITIGATED]: Kustomization apps is removed while it has prune: true at the live cluster; its finalizer deletes the 62 resources",
			"  Cluster.postgresql.cnpg.io nextcloud-db/nextcloud-db -> apps-wave-0 (prune disabled)  DATA LOSS\n",
			"  Cluster.postgresql.cnpg.io semaphore-db/semaphore-db -> apps-wave-0  DATA LOSS\n",
			"  ConfigMap legacy/legacy-settings -> (nothing: in the live inventory only, no Kustomization of the working tree builds it)\n",
			"  HelmRelease.helm.toolkit.fluxcd.io legacy/redis -> (nothing: in the live inventory only, no Kustomization of the working tree builds it)  DATA LOSS\n" +
				"    deleting the HelmRelease uninstalls the release, which deletes its 2 objects:\n" +
				"      PersistentVolumeClaim legacy/redis-data  DATA LOSS\n" +
				"      StatefulSet.apps legacy/redis  DATA LOSS\n",
			"sets `prune: false` on Kustomization apps",
			"kubectl -n semaphore-db annotate cluster.postgresql.cnpg.io/semaphore-db kustomize.toolkit.fluxcd.io/prune=disabled",
		},
	}, {
		name: "deletionPolicy Orphan releases despite prune true",
		spec: func(s *kustv1.KustomizationSpec) { s.Prune, s.DeletionPolicy = true, kustv1.DeletionPolicyOrphan },
		base: "HEAD~1", offlineUnsafe: true,
		want: []string{
			"live differs from git: Kustomization apps has deletionPolicy: Orphan on the cluster, MirrorPrune at HEAD~1",
			"note: removed Kustomization apps releases its objects without deleting them: deletionPolicy: Orphan",
			"no hazard",
		},
	}, {
		name: "deletionPolicy Delete deletes despite prune false",
		spec: func(s *kustv1.KustomizationSpec) { s.Prune, s.DeletionPolicy = false, kustv1.DeletionPolicyDelete },
		base: "HEAD", unsafe: true,
		want: []string{
			"HAZARD prune-removal [UNMITIGATED]: Kustomization apps is removed while it has deletionPolicy: Delete at the live cluster",
			"sets `deletionPolicy: Orphan` on Kustomization apps (prune: false\n     does not help with deletionPolicy: Delete)",
		},
	}, {
		name: "suspended old owner deletes nothing", handMade: true,
		spec: func(s *kustv1.KustomizationSpec) { s.Prune, s.Suspend = true, true },
		base: "HEAD~1", offlineUnsafe: true,
		want: []string{
			"live differs from git: Kustomization apps has suspend: true on the cluster, false at HEAD~1",
			"note: removed Kustomization apps releases its objects without deleting them: suspended",
			"note: Kustomization apps carries no kustomize.toolkit.fluxcd.io/name label, so no Flux Kustomization applies it",
			"no hazard",
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := testenv.APIServer(t).Namespace(t, "flux", nil)
			k := apps.DeepCopy()
			tc.spec(&k.Spec)
			if tc.handMade {
				k.Labels = map[string]string{"hand-made": ""}
			}
			liveKustomization(t, c, ns, k, inv)
			liveKustomization(t, c, ns, platform, []kustv1.ResourceRef{{ID: "_platform-crds__Namespace", Version: "v1"}})
			live, err := liveread.Read(context.Background(), c, liveread.Options{Apps: "apps", Namespace: ns})
			if err != nil {
				t.Fatal(err)
			}
			if len(live.Kustomizations) != 1 {
				t.Fatalf("read %d app-tier Kustomizations, want only apps", len(live.Kustomizations))
			}
			rep, err := cutover.CheckLive(live, atRef(t, dir, tc.base), after, "clusters/dev")
			if err != nil {
				t.Fatal(err)
			}
			out := report(rep)
			if rep.Unmitigated() != tc.unsafe {
				t.Errorf("live: unmitigated %t, want %t:\n%s", rep.Unmitigated(), tc.unsafe, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("report lacks %q:\n%s", w, out)
				}
			}
			if !tc.handMade && strings.Contains(out, "carries no") {
				t.Errorf("a Kustomization the root applies is taken for a hand-made one:\n%s", out)
			}
			// The git-only check reaches the opposite verdict: the cluster is what counts.
			offline, err := cutover.CheckIn(atRef(t, dir, tc.base), after, "clusters/dev")
			if err != nil {
				t.Fatal(err)
			}
			if offline.Unmitigated() != tc.offlineUnsafe {
				t.Errorf("git check: unmitigated %t, want %t", offline.Unmitigated(), tc.offlineUnsafe)
			}
		})
	}
}

// After the split, plex comes to depend on pihole and moves from wave 0 to wave 1: wave 0 stays
// and prunes it before wave 1 adopts it. Git has no annotation, so the git check fails; the live
// objects carry kustomize.toolkit.fluxcd.io/prune: disabled, so the live check passes, until one
// object loses it. Runs the command line against the API server.
func TestLiveAnnotationMitigatesMoveUp(t *testing.T) {
	tc, c := cluster(t)
	dir := fixture(t)
	emitMove(t, dir)
	wavestest.Commit(t, dir, "split into waves")
	base := atRef(t, dir, "HEAD")
	wavestest.Edit(t, dir, "catalog/plex.yaml", "ports:", "dependencies:\n  - to: pihole\nports:")
	emitMove(t, dir)

	ns := tc.Namespace(t, "flux", nil)
	for _, w := range []string{"wave-0", "wave-1", "wave-2"} {
		liveKustomization(t, c, ns, gitKustomization(t, base, "dev", "apps-"+w), inventory(t, base, "apps/"+w))
	}
	plex, err := base.FS.ReadFile(base.Path("apps", "wave-0", "plex.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs := createObjects(t, c, plex, protect())

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, tc.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := cli.NewRootCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"waves", "cutover-check", "--repo", dir}, args...))
		err := cmd.Execute()
		return out.String(), err
	}
	if out, err := run("--base", "HEAD"); err == nil || !strings.Contains(out, "HAZARD move-up [UNMITIGATED]: 5 resources leave Kustomization apps-wave-0") {
		t.Fatalf("git check: %v\n%s", err, out)
	}
	live := []string{"--live", "--kubeconfig", kubeconfig, "--flux-namespace", ns}
	out, err := run(append(live, "--base", "HEAD")...)
	if err != nil {
		t.Fatalf("live check: %v\n%s", err, out)
	}
	for _, want := range []string{
		"cut-over from the live cluster to the working tree (clusters/dev)",
		"HAZARD move-up [mitigated (every resource carries kustomize.toolkit.fluxcd.io/prune: disabled)]: 5 resources leave Kustomization apps-wave-0",
		"  PersistentVolumeClaim plex/plex-config -> apps-wave-1 (prune disabled)  DATA LOSS",
		"live differs from git: Deployment.apps plex/plex carries kustomize.toolkit.fluxcd.io/prune: disabled on the cluster only",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("live check lacks %q:\n%s", want, out)
		}
	}
	// One object without the annotation is enough to fail.
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		patch := []byte(`{"metadata":{"annotations":{"` + cutover.PruneAnnotation + `":null}}}`)
		if err := c.Patch(context.Background(), o, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatal(err)
		}
	}
	out, err = run(live...)
	if err == nil || !strings.Contains(out, "HAZARD move-up [UNMITIGATED]") || !strings.Contains(out, "  Deployment.apps plex/plex -> apps-wave-1\n") {
		t.Fatalf("live check after the annotation went: %v\n%s", err, out)
	}
}
