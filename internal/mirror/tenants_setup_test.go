package mirror_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/servers"
)

// createTenants creates n tenants from tenantSetupWorkers goroutines.
func createTenants(ctx context.Context, kc client.Client, remote *servers.GitRemote, n int, cms bool) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(tenantSetupWorkers)
	for i := range n {
		g.Go(func() error { return createTenant(ctx, kc, remote, i, cms) })
	}
	return g.Wait()
}

// createTenant makes tenant i's repository, namespace, GitProvider and GitTarget and, when cms,
// its WatchRule and ConfigMaps; it returns errors instead of failing, as it runs off the
// benchmark's goroutine.
func createTenant(ctx context.Context, kc client.Client, remote *servers.GitRemote, i int, cms bool) error {
	ns := tenantNamespace(i)
	url, err := remote.CreateRepo(ns, "main")
	if err != nil {
		return err
	}
	if !cms {
		// The writers' own state includes the tip they hold: the same files the mirror writes.
		if err := seedTenantRepo(ctx, remote.RepoDir(ns), i); err != nil {
			return err
		}
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		newSecret(ns, "git-auth", map[string]string{"username": "mirror", "password": "pw"}),
		&mirrorv1alpha1.GitProvider{
			ObjectMeta: metav1.ObjectMeta{Name: "git", Namespace: ns},
			Spec: mirrorv1alpha1.GitProviderSpec{URL: url, SecretRef: refPtr("git-auth"), AllowedBranches: []string{"main"},
				Committer: mirrorv1alpha1.Committer{Name: "Mirror Bot", Email: "mirror@example.com"}},
		},
		&mirrorv1alpha1.GitTarget{
			ObjectMeta: metav1.ObjectMeta{Name: "target", Namespace: ns},
			Spec: mirrorv1alpha1.GitTargetSpec{ProviderRef: ref("git"), Branch: "main",
				CommitWindow: &metav1.Duration{Duration: tenantWindow}},
		},
	}
	if cms {
		objs = append(objs, &mirrorv1alpha1.WatchRule{
			ObjectMeta: metav1.ObjectMeta{Name: "cms", Namespace: ns},
			Spec:       mirrorv1alpha1.WatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "target"}, Rules: []mirrorv1alpha1.ResourceRule{cmRule()}},
		})
		for j := range tenantConfigMaps {
			objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: tenantConfigMap(j), Namespace: ns}, Data: map[string]string{"v": "0"}})
		}
	}
	for _, o := range objs {
		if err := kc.Create(ctx, o); err != nil {
			return fmt.Errorf("tenant %s: create %T %s: %w", ns, o, o.GetName(), err)
		}
	}
	return nil
}

// seedTenantRepo commits to tenant i's bare repository the files the mirror writes for its
// ConfigMaps, with one git fast-import.
func seedTenantRepo(ctx context.Context, bare string, i int) error {
	var in bytes.Buffer
	fmt.Fprintf(&in, "commit refs/heads/main\ncommitter Seed <seed@example.com> 0 +0000\ndata 4\nseed\n")
	for j := range tenantConfigMaps {
		content := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n  v: \"0\"\n", tenantConfigMap(j), tenantNamespace(i))
		fmt.Fprintf(&in, "M 100644 inline %s\ndata %d\n%s\n", tenantFile(i, j), len(content), content)
	}
	cmd := exec.CommandContext(ctx, "git", "--git-dir", bare, "fast-import", "--quiet")
	cmd.Stdin = &in
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("seed %s: %w: %s", bare, err, out)
	}
	return nil
}

// waitTenantTargetsReady lists the GitTargets every half second (one List rather than a Get
// per target) until all n are Ready for their current generation, failing after bound.
func waitTenantTargetsReady(b *testing.B, kc client.Client, n int, bound time.Duration) {
	deadline := time.Now().Add(bound)
	for {
		var list mirrorv1alpha1.GitTargetList
		if err := kc.List(context.Background(), &list); err != nil {
			b.Fatal(err)
		}
		ready := 0
		for _, gt := range list.Items {
			c := meta.FindStatusCondition(gt.Status.Conditions, mirrorv1alpha1.ConditionReady)
			if c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == gt.Generation {
				ready++
			}
		}
		if ready == n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d GitTargets Ready within %s", ready, n, bound)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// openTenantWriters waits until every tenant's writer has fetched its repository: a writer
// serves CloseWindow only once its remote is open (with nothing pending it commits nothing), and
// a Ready target without WatchRules does not say so.
func openTenantWriters(b *testing.B, e *engine.Engine, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), tenantSetupBound(n))
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(tenantSetupWorkers)
	for i := range n {
		g.Go(func() error {
			_, err := e.CloseWindow(ctx, types.NamespacedName{Namespace: tenantNamespace(i), Name: "target"}, "", "", nil)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatalf("writers not open: %v", err)
	}
}
