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
