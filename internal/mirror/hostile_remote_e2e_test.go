package mirror_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// TestTenantTreeBombFolderIsNotSwept: a tenant's GitProvider names a repository whose target
// folder holds a tree bomb (8 folders pointing at the folder below, 7 levels: 2 097 152 files
// from a few KB). With the flags' defaults the manager does not sweep that folder: the GitTarget
// says TargetTooLarge naming --git-max-sweep-entries, the tenant's own ConfigMap is still
// committed, and another tenant's target keeps committing.
func TestTenantTreeBombFolderIsNotSwept(t *testing.T) {
	c := testenv.APIServer(t)
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	runManager(t, c, mirror.Options{}, "")
	ctx := context.Background()

	attacker := c.Tenant(t, "treebomb", nil)
	bombURL, err := remote.CreateRepo("treebomb", "main")
	if err != nil {
		t.Fatal(err)
	}
	folder := "treebomb/" + attacker.Namespace + "/core/configmaps"
	testenv.PushTreeBomb(t, remote.RepoDir("treebomb"), "main", testenv.TreeBomb{
		Folder: folder + "/bomb", Fanout: 8, Depth: 6, Leaf: ".yaml", Content: "x: 1\n",
		Files: map[string]string{"README.md": "mirror\n"},
	})
	neighbour := c.Tenant(t, "treebomb-neighbour", nil)
	siteURL, err := remote.CreateRepo("neighbour", "main")
	if err != nil {
		t.Fatal(err)
	}
	tenantMirror(t, attacker, "treebomb", bombURL)
	tenantMirror(t, neighbour, "neighbour", siteURL)

	var ready *metav1.Condition
	testenv.Eventually(t, time.Minute, func() error {
		var gt mirrorv1alpha1.GitTarget
		if err := attacker.Client.Get(ctx, types.NamespacedName{Namespace: attacker.Namespace, Name: "treebomb"}, &gt); err != nil {
			return err
		}
		ready = meta.FindStatusCondition(gt.Status.Conditions, mirrorv1alpha1.ConditionReady)
		if ready == nil || ready.Reason != "TargetTooLarge" || !strings.Contains(ready.Message, "--git-max-sweep-entries") {
			return fmt.Errorf("GitTarget Ready = %+v, want TargetTooLarge naming --git-max-sweep-entries", ready)
		}
		return nil
	})
	t.Log(ready.Message)

	// The refused sweep costs the tenant nothing else, and its neighbour nothing at all.
	must(t, attacker.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: attacker.Namespace}, Data: map[string]string{"v": "1"}}))
	must(t, neighbour.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: neighbour.Namespace}, Data: map[string]string{"v": "1"}}))
	for repo, path := range map[string]string{
		"treebomb":  folder + "/app.yaml",
		"neighbour": "neighbour/" + neighbour.Namespace + "/core/configmaps/app.yaml",
	} {
		testenv.Eventually(t, time.Minute, func() error {
			out, err := gitFiles(remote.RepoDir(repo), path)
			if err != nil {
				return fmt.Errorf("list the files of %s: %w", repo, err)
			}
			if !strings.Contains(out, path) {
				return fmt.Errorf("%s does not hold %s yet", repo, path)
			}
			return nil
		})
	}
	if out, _ := gitFiles(remote.RepoDir("treebomb"), folder+"/bomb"); !strings.Contains(out, "bomb") {
		t.Fatalf("the bomb's folder was removed: %q", out)
	}
}

// gitFiles lists path on main of the bare repository bare (ls-tree, not recursive).
func gitFiles(bare, path string) (string, error) {
	out, err := exec.Command("git", "--git-dir", bare, "ls-tree", "--name-only", "main", path).Output()
	return string(out), err
}

// TestTenantZlibBombRemoteIsRefused: a tenant points its GitProvider at a git server of its own
// (one the platform allows) whose branch holds 64 MiB of zeros, a pack of 64 KiB. The manager,
// with a 4 MiB object bound, refuses the fetch before inflating it, and the tenant's GitTarget
// says FetchTooLarge, naming the flag.
func TestTenantZlibBombRemoteIsRefused(t *testing.T) {
	c := testenv.APIServer(t)
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, err := remote.CreateRepo("bomb", "main")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	testenv.Git(t, work, "init", "-q", "-b", "main")
	if out, err := exec.Command("sh", "-c", "head -c 67108864 /dev/zero > "+work+"/zeros.bin").CombinedOutput(); err != nil {
		t.Fatalf("write the zeros: %v: %s", err, out)
	}
	testenv.Git(t, work, "add", "zeros.bin")
	testenv.Git(t, work, "commit", "-q", "-m", "zeros")
	testenv.Git(t, work, "push", "-q", "-f", remote.RepoDir("bomb"), "main")

	runManager(t, c, mirror.Options{GitMaxFetchObjectBytes: 4 << 20}, "")
	tenant := c.Tenant(t, "bomb", nil)
	tenantMirror(t, tenant, "bomb", url)
	ctx := context.Background()
	must(t, tenant.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: tenant.Namespace}, Data: map[string]string{"v": "1"}}))

	var ready *metav1.Condition
	testenv.Eventually(t, 30*time.Second, func() error {
		var gt mirrorv1alpha1.GitTarget
		if err := tenant.Client.Get(ctx, types.NamespacedName{Namespace: tenant.Namespace, Name: "bomb"}, &gt); err != nil {
			return err
		}
		ready = meta.FindStatusCondition(gt.Status.Conditions, mirrorv1alpha1.ConditionReady)
		if ready == nil || ready.Reason != "FetchTooLarge" || !strings.Contains(ready.Message, "--git-max-fetch-object-bytes") {
			return fmt.Errorf("GitTarget Ready = %+v, want FetchTooLarge naming --git-max-fetch-object-bytes", ready)
		}
		return nil
	})
	t.Log(ready.Message)
}
