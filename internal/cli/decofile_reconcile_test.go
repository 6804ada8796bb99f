package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/rollout"
	"github.com/siteops/siteops/internal/testenv"
)

// TestDecofileReconcile runs the delivery controller on one namespace and asks it for a
// reconcile with the command: it returns once the controller handled exactly that request.
func TestDecofileReconcile(t *testing.T) {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "reconcile", nil)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, c.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	df := &decov1alpha1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns},
		Spec: decov1alpha1.DecofileSpec{Source: decov1alpha1.SourceInline,
			Inline: &decov1alpha1.InlineSource{Value: map[string]apiextensionsv1.JSON{"a": {Raw: json.RawMessage(`1`)}}}},
	}
	if err := c.Client.Create(context.Background(), df); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		out := &testenv.SyncBuffer{}
		cmd := NewRootCommand()
		cmd.SetOut(out)
		cmd.SetErr(out)
		cmd.SetArgs(append([]string{"decofile", "reconcile", "shop", "-n", ns, "--kubeconfig", kc}, args...))
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}

	// No operator yet: the request is recorded, the wait times out with exit status 2.
	if text, err := run("--no-wait"); err != nil || !strings.Contains(text, decov1alpha1.AnnotationReconcileRequestedAt+"=") {
		t.Fatalf("--no-wait: %v %q", err, text)
	}
	if _, err := run("--timeout", "1s"); exitCode(err) != 2 || !strings.Contains(err.Error(), "is the manager running?") {
		t.Fatalf("without an operator: exit %d (%v)", exitCode(err), err)
	}

	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme: c.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := controller.Setup(mgr, controller.Options{Rollout: rollout.Settler{Reader: mgr.GetAPIReader()}}); err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)

	text, err := run("--timeout", "30s")
	if err != nil || !strings.Contains(text, ns+"/shop: reconciled: stored") {
		t.Fatalf("reconcile: %v %q", err, text)
	}
	var got decov1alpha1.Decofile
	if err := c.Client.Get(context.Background(), client.ObjectKeyFromObject(df), &got); err != nil {
		t.Fatal(err)
	}
	if v := got.Annotations[decov1alpha1.AnnotationReconcileRequestedAt]; v == "" || got.Status.LastHandledReconcileAt != v {
		t.Fatalf("annotation %q, status.lastHandledReconcileAt %q", v, got.Status.LastHandledReconcileAt)
	}
	if _, err := time.Parse(time.RFC3339Nano, got.Status.LastHandledReconcileAt); err != nil {
		t.Fatalf("the requested value is not a time: %v", err)
	}
}
