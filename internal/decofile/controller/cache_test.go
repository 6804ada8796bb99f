package controller_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/testenv"
)

// TestCacheHoldsNoInlineContent: the manager's cache keeps a Decofile without its inline
// content, the copy `kubectl apply` leaves in an annotation and managedFields, so thousands of
// large inline Decofiles a tenant writes do not all sit in the manager's memory; the delivery
// still stores the whole content, read from the API server, and a change of it.
func TestCacheHoldsNoInlineContent(t *testing.T) {
	e := start(t) // its manager's cache is set up with controller.CacheOptions
	ctx := context.Background()
	tn := e.c.Tenant(t, "cache", nil)
	v1 := map[string]string{"home": `{"title":"Home","body":"` + testenv.Name(t) + `"}`}
	df := &decov1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: tn.Namespace,
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"spec":{"inline":{"value":{"home":{"title":"Home"}}}}}`, "team": "web"}},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(v1)},
	}
	if err := tn.Client.Create(ctx, df); err != nil {
		t.Fatal(err)
	}
	delivered := func(values map[string]string) {
		t.Helper()
		e.waitReady(t, tn.Namespace, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, func(d *decov1.Decofile) error {
			if want := encode.Hash(mergedOf(t, values)); d.Status.ContentHash != want {
				return fmt.Errorf("contentHash %s, want %s", d.Status.ContentHash, want)
			}
			return nil
		})
		if got, want := e.configMap(t, tn.Namespace, "site").Data[decov1.KeyJSON], string(mergedOf(t, values)); got != want {
			t.Fatalf("ConfigMap holds %q, want %q", got, want)
		}
	}
	delivered(v1)
	v2 := map[string]string{"home": `{"title":"Home 2"}`, "about": `{"title":"About"}`}
	e.update(t, tn.Namespace, "site", setInline(v2))
	delivered(v2)

	co := cache.Options{Scheme: e.c.Scheme, DefaultTransform: cache.TransformStripManagedFields()}
	controller.CacheOptions(&co)
	c, err := cache.New(e.c.Config, co)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = c.Start(cctx) }()
	if !c.WaitForCacheSync(cctx) {
		t.Fatal("cache did not sync")
	}
	var cached decov1.Decofile
	testenv.Eventually(t, waitFor, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: tn.Namespace, Name: "site"}, &cached); err != nil {
			return err
		}
		if cached.Status.ContentHash != encode.Hash(mergedOf(t, v2)) {
			return errors.New("cache does not have the delivered status yet")
		}
		return nil
	})
	if cached.Spec.Inline == nil || len(cached.Spec.Inline.Value) != 0 {
		t.Errorf("cached Decofile holds inline content: %+v", cached.Spec.Inline)
	}
	if _, ok := cached.Annotations["kubectl.kubernetes.io/last-applied-configuration"]; ok || cached.Annotations["team"] != "web" {
		t.Errorf("cached annotations %v: want team=web and no last-applied-configuration", cached.Annotations)
	}
	if len(cached.ManagedFields) != 0 {
		t.Errorf("cached Decofile holds %d managedFields entries", len(cached.ManagedFields))
	}
	if cached.Spec.Source != decov1.SourceInline || cached.Generation != 2 || cached.Status.ObservedGeneration != 2 {
		t.Errorf("cached Decofile lost what the controllers decide on: source %q, generation %d, observedGeneration %d",
			cached.Spec.Source, cached.Generation, cached.Status.ObservedGeneration)
	}
}
