package testenv_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// TestAPIServerRestartKeepsObjectsAndClients restarts kube-apiserver (SIGTERM, then SIGKILL)
// and checks that a new process serves, that objects made before are there, that the
// cluster's client works as it was, and that an informer started before the restart sees an
// object made after it.
func TestAPIServerRestartKeepsObjectsAndClients(t *testing.T) {
	c := testenv.NewAPIServer(t, servers.APIServerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := c.Namespace(t, "restart", nil)
	informers, err := cache.New(c.Config, cache.Options{Scheme: c.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	before := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before", Namespace: ns}}
	if err := c.Client.Create(ctx, before); err != nil {
		t.Fatal(err)
	}
	// The first Get starts the ConfigMap informer, so its watch is open when the server stops.
	testenv.Eventually(t, 30*time.Second, func() error {
		return informers.Get(ctx, client.ObjectKeyFromObject(before), &corev1.ConfigMap{})
	})

	for _, restart := range []struct {
		name string
		do   func(context.Context) error
	}{{"sigterm", c.Restart}, {"sigkill", c.KillAndRestart}} {
		ok := t.Run(restart.name, func(t *testing.T) {
			startedBefore := processStart(t, c)
			begin := time.Now()
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
			defer rcancel()
			if err := restart.do(rctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("restart took %s", time.Since(begin).Round(time.Millisecond))
			if startedAfter := processStart(t, c); startedAfter <= startedBefore {
				t.Fatalf("kube-apiserver started at %f before the restart and %f after: not a new process", startedBefore, startedAfter)
			}
			if err := c.Client.Get(ctx, client.ObjectKeyFromObject(before), &corev1.ConfigMap{}); err != nil {
				t.Fatalf("object made before the restart: %v", err)
			}
			after := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-" + restart.name, Namespace: ns}}
			if err := c.Client.Create(ctx, after); err != nil {
				t.Fatalf("create after the restart: %v", err)
			}
			created := time.Now()
			testenv.Eventually(t, time.Minute, func() error {
				return informers.Get(ctx, client.ObjectKeyFromObject(after), &corev1.ConfigMap{})
			})
			t.Logf("the informer saw the new object %s after it was made", time.Since(created).Round(time.Millisecond))
		})
		if !ok {
			return
		}
	}
}

// processStart reads process_start_time_seconds from the API server's /metrics: it changes
// only when a new process serves.
func processStart(t *testing.T, c *testenv.Cluster) float64 {
	t.Helper()
	v, lines := c.Metric(t, "process_start_time_seconds", nil)
	if len(lines) == 0 {
		t.Fatal("the API server's metrics have no process_start_time_seconds")
	}
	return v
}
