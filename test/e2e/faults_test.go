package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/test/internal/nodeenv"
)

// readinessFailWindow is longer than the chart's readiness probe takes to mark a replica
// NotReady (three failures ten seconds apart).
const readinessFailWindow = 40 * time.Second

// mirrorRedisDown is step 8: the mirror's Redis stops. The mirror's dependency is no part of
// readiness, so both replicas stay Ready and the fail-closed injection webhook keeps admitting
// workloads, which start; ConfigMap edits are still committed; the GitTarget says its cursors
// are not durable. Redis back, they are durable again.
func (e *env) mirrorRedisDown(t *testing.T) {
	ctx := context.Background()
	stopped := e.Redis
	nodeenv.Must(t, e.Redis.Stop(), "stop the mirror's Redis")
	down := time.Now()

	e.waitGitTarget(t, metav1.ConditionFalse, "RedisUnavailable")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "while-redis-down", Namespace: e.mirrorNS}, Data: map[string]string{"redis": "down"}}
	nodeenv.Must(t, e.C.Client.Create(ctx, cm), "create a ConfigMap while Redis is down")
	nodeenv.Must(t, e.C.Client.Create(ctx, e.SiteDeployment(e.siteNS, "shop-redis-down", "shop", 1)), "create an injected Deployment while Redis is down")
	pods := e.ReadyPods(t, e.siteNS, "shop-redis-down", 1)
	var df decov1alpha1.Decofile
	nodeenv.Must(t, e.C.Client.Get(ctx, client.ObjectKey{Namespace: e.siteNS, Name: "shop"}, &df), "get Decofile")
	key := decov1alpha1.KeyJSON
	if df.Status.Format == decov1alpha1.FormatBin {
		key = decov1alpha1.KeyBin
	}
	checkInjected(t, &pods[0], df.Status.ConfigMapName, key)
	nodeenv.WaitFor(t, 90*time.Second, "the ConfigMap made while Redis is down, in git", func(context.Context) error {
		return nodeenv.GitFileHas(e.mirrorRepo, "clusters/e2e/"+e.mirrorNS+"/core/configmaps/while-redis-down.yaml", "redis: down")
	})
	// Past the probe's failure window, every replica is still Ready, checked every second.
	for time.Since(down) < readinessFailWindow {
		for _, p := range e.ManagerPods(t) {
			if !nodeenv.PodReady(&p) {
				t.Fatalf("manager pod %s is NotReady %s after the mirror's Redis stopped", p.Name, time.Since(down).Round(time.Second))
			}
		}
		time.Sleep(time.Second)
	}
	if n := len(e.ManagerPods(t)); n != 2 {
		t.Fatalf("%d manager pods running, want 2", n)
	}

	back, err := servers.StartRedis(ctx, servers.RedisOptions{Dir: e.T.TempDir(), Host: stopped.Host(), Port: stopped.Port(), Password: e.RedisPassword})
	nodeenv.Must(t, err, "start the mirror's Redis again on %s", stopped.Addr)
	e.T.Cleanup(func() { _ = back.Stop() })
	e.Redis = back
	took := e.waitGitTarget(t, metav1.ConditionTrue, "")
	t.Logf("Redis down for %s; cursors durable again %s after it came back", time.Since(down).Round(time.Second), took.Round(time.Millisecond))
}

// waitGitTarget waits until the GitTarget of step 7 has CursorsDurable with status (and reason,
// when given), and returns how long it took.
func (e *env) waitGitTarget(t *testing.T, status metav1.ConditionStatus, reason string) time.Duration {
	t.Helper()
	return nodeenv.WaitFor(t, 90*time.Second, fmt.Sprintf("GitTarget CursorsDurable=%s/%s", status, reason), func(ctx context.Context) error {
		var gt mirrorv1alpha1.GitTarget
		if err := e.C.Client.Get(ctx, client.ObjectKey{Namespace: e.mirrorNS, Name: "main"}, &gt); err != nil {
			return err
		}
		c := meta.FindStatusCondition(gt.Status.Conditions, mirrorv1alpha1.ConditionCursorsDurable)
		if c == nil || c.Status != status || (reason != "" && c.Reason != reason) {
			return fmt.Errorf("CursorsDurable %+v", c)
		}
		return nil
	})
}
