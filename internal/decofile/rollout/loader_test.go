package rollout_test

import (
	"context"
	"errors"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/rollout"
)

// TestLoaderDecodesWithinBound loads a planted bomb with the ConfigMap loader directly: it fails
// with ErrContentTooLarge after decoding the size recorded in status, and allocates little.
func TestLoaderDecodesWithinBound(t *testing.T) {
	e := newEnv(t, rollout.Options{})
	df := e.decofile("bomb", true)
	content := []byte(`{"site":{"name":"Shop"}}`)
	e.store(df, content, "abababababababababababababababababababab", 1731700100, true)
	var cm corev1.ConfigMap
	ctx := context.Background()
	if err := e.c.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: df.ConfigMapName()}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data[decov1alpha1.KeyBin] = brotliBomb(t)
	if err := e.c.Client.Update(ctx, &cm); err != nil {
		t.Fatal(err)
	}
	got := e.get(df)
	got.Status.StoredHash = "" // exercise the decoder, not the stored-hash check
	loader := rollout.ConfigMapLoader{Reader: e.c.Client}
	for _, limit := range []int64{rollout.ContentLimit(got, 0), 8 << 20} {
		if limit > got.Status.RawBytes {
			got.Status.RawBytes = 0 // a status without the size: the configured limit bounds the decode
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := loader.Load(ctx, got, limit)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("limit %d: allocated %d MiB: %v", limit, alloc>>20, err)
		if !errors.Is(err, rollout.ErrContentTooLarge) {
			t.Fatalf("limit %d: load of a bomb: %v, want ErrContentTooLarge", limit, err)
		}
		// The brotli window (up to about 32 MiB), reading the ConfigMap, and a buffer that doubles
		// up to the limit.
		if want := uint64(48<<20 + 2*limit); alloc > want {
			t.Errorf("limit %d: the load allocated %d MiB, want at most %d MiB", limit, alloc>>20, want>>20)
		}
	}
}
