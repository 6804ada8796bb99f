package manager_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, servers.APIServerOptions{}) }

func TestFlagsParse(t *testing.T) {
	o := manager.DefaultOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--controllers=decofile,mirror", "--leader-elect=false", "--webhook-port=10443"}); err != nil {
		t.Fatal(err)
	}
	if o.LeaderElect || o.WebhookPort != 10443 || !o.Enabled(manager.PartMirror) || o.Enabled(manager.PartTenant) {
		t.Fatalf("flags not applied: %+v", o)
	}
	if !manager.DefaultOptions().LeaderElect {
		t.Error("leader election must be on by default")
	}
}

func TestUnknownControllerIsRejected(t *testing.T) {
	o := manager.DefaultOptions()
	o.Controllers = []string{"decofile", "dns"}
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), `unknown part "dns"`) {
		t.Fatalf("Validate() = %v, want an error naming the unknown part", err)
	}
}

// TestCommitRequestWebhookFailsClosed: a manager that would serve the CommitRequest webhook
// (the mirror part with Redis, the flag's default) without --commitrequest-webhook-client-ca
// does not start, and says which flag to set; nothing is served that records forged authors.
func TestCommitRequestWebhookFailsClosed(t *testing.T) {
	o := manager.DefaultOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--controllers=mirror", "--redis-addr=127.0.0.1:6379"}); err != nil {
		t.Fatal(err)
	}
	_, err := manager.New(&rest.Config{Host: "https://127.0.0.1:1"}, o)
	if err == nil || !strings.Contains(err.Error(), "--commitrequest-webhook needs --commitrequest-webhook-client-ca") || !strings.Contains(err.Error(), "--commitrequest-webhook=false") {
		t.Fatalf("manager.New without the client CA: %v, want a refusal naming --commitrequest-webhook-client-ca and --commitrequest-webhook=false", err)
	}
	o.Mirror.CommitRequestWebhook = false
	if err := o.Validate(); err != nil {
		t.Errorf("with the webhook off: %v", err)
	}
}

func TestManagerServesProbesAndMetrics(t *testing.T) {
	c := testenv.APIServer(t)
	o := manager.DefaultOptions()
	o.Controllers = nil
	o.LeaderElect = true
	o.LeaderElectionNamespace = "default"
	o.LeaderElectionID = testenv.Name(t)
	o.MetricsAddr = testenv.FreeLoopbackAddr(t)
	o.ProbeAddr = testenv.FreeLoopbackAddr(t)
	mgr, err := manager.New(c.Config, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager stopped with %v", err)
		}
	}()
	select {
	case <-mgr.Elected():
	case <-time.After(30 * time.Second):
		t.Fatal("manager was not elected leader within 30s")
	}
	for _, u := range []string{"http://" + o.ProbeAddr + "/healthz", "http://" + o.ProbeAddr + "/readyz", "http://" + o.MetricsAddr + "/metrics"} {
		testenv.Eventually(t, 10*time.Second, func() error {
			resp, err := http.Get(u)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", u, resp.Status)
			}
			return nil
		})
	}
}

// TestLegacyControllerNames: v0.11's --controllers part names run the siteops part that does the
// same work, its Deco/DecoRedirect parts are accepted and ignored, and each gets a deprecation line.
func TestLegacyControllerNames(t *testing.T) {
	o := manager.DefaultOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--controllers=decofile,valkey-acl,deco,decoredirect"}); err != nil {
		t.Fatal(err)
	}
	if !o.Enabled(manager.PartDecofile) || !o.Enabled(manager.PartTenant) || o.Enabled(manager.PartMirror) || o.Enabled("") {
		t.Fatalf("parts enabled wrongly for %v", o.Controllers)
	}
	err := o.Validate()
	if err != nil && strings.Contains(err.Error(), "unknown part") {
		t.Fatalf("v0.11 part names rejected: %v", err)
	}
	d := strings.Join(o.Deprecations(), "\n")
	for _, want := range []string{`"valkey-acl" (published Decofile operator v0.11) is deprecated: use --controllers=tenant`, `"deco"`, `"decoredirect"`} {
		if !strings.Contains(d, want) {
			t.Errorf("deprecations %q lack %q", d, want)
		}
	}
	if strings.Contains(d, `"decofile"`) {
		t.Errorf("decofile is a siteops name, not deprecated: %q", d)
	}
}

// TestCacheTrimsDecofiles: the manager built for the decofile part caches Decofiles without
// their inline content and nothing with managedFields, while the delivery still stores the
// content (read from the API server).
func TestCacheTrimsDecofiles(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	ns := c.Namespace(t, "cache", nil)
	df := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: &decov1.InlineSource{
			Value: map[string]apiextensionsv1.JSON{"home": {Raw: []byte(`{"title":"Home"}`)}}}}}
	if err := c.Client.Create(ctx, df); err != nil {
		t.Fatal(err)
	}
	o := manager.DefaultOptions()
	o.Controllers = []string{manager.PartDecofile}
	o.MetricsAddr, o.ProbeAddr, o.LeaderElect = "0", "0", false
	o.Decofile.DisableInjection = true
	mgr, err := manager.New(c.Config, o)
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.StartManager(t, mgr)()
	testenv.Eventually(t, 30*time.Second, func() error {
		var cm corev1.ConfigMap
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: df.ConfigMapName()}, &cm); err != nil {
			return err
		}
		if !strings.Contains(cm.Data[decov1.KeyJSON], `"Home"`) {
			return fmt.Errorf("ConfigMap holds %v", cm.Data)
		}
		return nil
	})
	var cached decov1.Decofile
	if err := mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(df), &cached); err != nil {
		t.Fatal(err)
	}
	if cached.Spec.Inline == nil || len(cached.Spec.Inline.Value) != 0 || len(cached.ManagedFields) != 0 {
		t.Errorf("cached Decofile holds inline content %v or %d managedFields entries", cached.Spec.Inline, len(cached.ManagedFields))
	}
	var cm metav1.PartialObjectMetadata
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	// The API server holds the ConfigMap; the manager's cache may see it a moment later.
	testenv.Eventually(t, 30*time.Second, func() error {
		return mgr.GetClient().Get(ctx, client.ObjectKey{Namespace: ns, Name: df.ConfigMapName()}, &cm)
	})
	if len(cm.ManagedFields) != 0 {
		t.Errorf("cached ConfigMap metadata holds %d managedFields entries", len(cm.ManagedFields))
	}
}
