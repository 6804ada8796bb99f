package rollout

import (
	"context"
	"fmt"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	decofilecontroller "github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/testenv"
)

// TestDeletedDecofilesAreForgotten: what the controller keeps per Decofile (the backoff of a
// failed rollout, the status write the cache has not seen) is let go when the Decofile is
// deleted, so Decofiles created and deleted in a loop leave nothing behind.
func TestDeletedDecofilesAreForgotten(t *testing.T) {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "rollout-forget", nil)
	co := cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}
	decofilecontroller.CacheOptions(&co)
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{Scheme: c.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Cache: co, Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := setup(mgr, Options{RetryBase: time.Hour, RetryMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)
	ctx := context.Background()
	tracked := func() (failures, written int) {
		r.mu.Lock()
		failures = len(r.failures)
		r.mu.Unlock()
		return failures, r.written.Len()
	}

	// Ready content whose ConfigMap does not exist, rolled out in steps (so even without pods
	// it is loaded): every rollout fails and is kept for backoff.
	const n = 20
	var dfs []*decov1alpha1.Decofile
	for i := range n {
		df := &decov1alpha1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("d%d", i)}, Spec: decov1alpha1.DecofileSpec{
			Source: decov1alpha1.SourceInline, Inline: &decov1alpha1.InlineSource{Value: map[string]apiextensionsv1.JSON{"k": {Raw: []byte(`{}`)}}},
			Rollout: &decov1alpha1.RolloutSpec{Steps: []intstr.IntOrString{intstr.FromString("100%")}}}}
		if err := c.Client.Create(ctx, df); err != nil {
			t.Fatal(err)
		}
		df.Status.ContentHash, df.Status.Timestamp = fmt.Sprintf("%064d", i), 1732000000
		meta.SetStatusCondition(&df.Status.Conditions, metav1.Condition{Type: decov1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Stored", Message: "stored"})
		if err := c.Client.Status().Update(ctx, df); err != nil {
			t.Fatal(err)
		}
		dfs = append(dfs, df)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if f, _ := tracked(); f != n {
			return fmt.Errorf("%d of %d failed rollouts kept for backoff", f, n)
		}
		return nil
	})
	for _, df := range dfs {
		if err := c.Client.Delete(ctx, df); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if f, w := tracked(); f != 0 || w != 0 {
			return fmt.Errorf("after every Decofile was deleted: %d backoffs and %d status writes still kept", f, w)
		}
		return nil
	})
}
