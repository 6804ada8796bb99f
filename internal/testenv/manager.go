package testenv

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// StartManager runs mgr until the test ends, failing the test if it stops with an error, and
// waits for its caches to sync. The returned function stops it earlier (idempotent).
func StartManager(t testing.TB, mgr manager.Manager) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager stopped with %v", err)
			}
		})
	}
	t.Cleanup(stop)
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("manager caches did not sync")
	}
	return stop
}

// ServeWebhooks starts a manager (o, with the scheme, ports and webhook server filled in) serving
// the webhooks setup registers on the port of c's webhook install options, for as long as the
// test binary runs (the API server stops first at exit), and waits until it serves.
func ServeWebhooks(c *Cluster, o ctrl.Options, setup func(manager.Manager) error) error {
	wio := c.Env.WebhookInstallOptions
	o.Scheme, o.Metrics, o.HealthProbeBindAddress = c.Scheme, metricsserver.Options{BindAddress: "0"}, "0"
	o.WebhookServer = webhook.NewServer(webhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir})
	mgr, err := ctrl.NewManager(c.Config, o)
	if err != nil {
		return err
	}
	if err := setup(mgr); err != nil {
		return err
	}
	go func() { _ = mgr.Start(context.Background()) }()
	return wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return mgr.GetWebhookServer().StartedChecker()(nil) == nil, nil
	})
}
