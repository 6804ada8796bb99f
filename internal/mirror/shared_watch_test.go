package mirror_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/metrics"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// Tenants' targets on one resource hold one watch of it on the API server, and each target still
// gets its own namespace's objects only, also after the manager restarts and resumes from its
// cursors.
func TestTargetsShareOneWatchPerResource(t *testing.T) {
	c := testenv.APIServer(t)
	redis := testenv.Redis(t, servers.RedisOptions{})
	ctx := context.Background()
	before := c.Watches(t, "configmaps")
	o := mirror.Options{RedisAddr: redis.Addr, RedisKeyPrefix: "shared"}
	_, stop := runManager(t, c, o, "")
	const tenants = 4
	fs := make([]*fixture, tenants)
	for i := range fs {
		fs[i] = newFixture(t, c)
		fs[i].target(t, "main", "", 200*time.Millisecond, "")
		fs[i].watchRule(t, "cms", "main", cmRule())
		fs[i].create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: fs[i].ns}, Data: map[string]string{"tenant": fmt.Sprint(i)}})
	}
	for i, f := range fs {
		f.waitFile(t, f.ns+"/core/configmaps/app.yaml", fmt.Sprintf("tenant: %q", fmt.Sprint(i)))
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := c.Watches(t, "configmaps") - before; got != 1 {
			return fmt.Errorf("the mirror holds %d watches of configmaps for %d targets, want 1", got, tenants)
		}
		return nil
	})

	// Changes made while no manager runs reach each target once it resumes from its cursor.
	stop()
	for i, f := range fs {
		cm := &corev1.ConfigMap{}
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "app"}, cm); err != nil {
			t.Fatal(err)
		}
		cm.Data["after"] = fmt.Sprint(i)
		if err := c.Client.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	replaysBefore := replays()
	_, stop = runManager(t, c, o, "")
	defer stop()
	for i, f := range fs {
		f.waitFile(t, f.ns+"/core/configmaps/app.yaml", fmt.Sprintf("after: %q", fmt.Sprint(i)))
		for _, p := range f.files(t, "") {
			if p != f.ns+"/core/configmaps/app.yaml" {
				t.Errorf("target of %s wrote %s", f.ns, p)
			}
		}
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := c.Watches(t, "configmaps") - before; got != 1 {
			return fmt.Errorf("after a restart the mirror holds %d watches of configmaps for %d targets, want 1", got, tenants)
		}
		return nil
	})
	if got := replays() - replaysBefore; got != 0 {
		t.Fatalf("%v streams replayed after the restart; each should have resumed from its cursor", got)
	}
}

// replays sums the mirror's full replays so far, whatever their reason.
func replays() float64 {
	n := 0.0
	for _, reason := range []string{"no-cursor", "expired", "spec-changed"} {
		n += testutil.ToFloat64(metrics.Replays.WithLabelValues(reason))
	}
	return n
}
