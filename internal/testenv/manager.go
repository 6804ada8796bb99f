package testenv

import (
	"context"
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/manager"
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
