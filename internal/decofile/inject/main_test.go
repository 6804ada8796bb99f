package inject_test

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// knativeServing is the Knative Serving release whose Service CRD the tests install.
const knativeServing = "knative.dev/serving@v0.51.0"

// testS3 is the S3 configuration of the webhook under test.
var testS3 = inject.S3Config{PublicHost: "decofiles.example.test", Prefix: "sites"}

var webhookPort int

func TestMain(m *testing.M) {
	flag.Parse()
	opts := servers.APIServerOptions{}
	if !testing.Short() {
		crd, err := knativeServiceCRD()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if webhookPort, err = servers.FreePort("127.0.0.1"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		mwc, vwc := inject.WebhookConfigurations(inject.URLClientConfig("https://127.0.0.1:"+strconv.Itoa(webhookPort), nil))
		opts.ExtraCRDPaths = []string{crd}
		opts.Webhooks = envtest.WebhookInstallOptions{
			LocalServingHost:   "127.0.0.1",
			LocalServingPort:   webhookPort,
			MutatingWebhooks:   []*admissionregistrationv1.MutatingWebhookConfiguration{mwc},
			ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{vwc},
		}
	}
	testenv.Main(m, opts)
}

// knativeServiceCRD fetches the Knative Serving module into the module cache and returns the
// path of its Service CRD, so the tests run against the real schema without a committed copy.
func knativeServiceCRD() (string, error) {
	return servers.ModuleFile(knativeServing, "config/core/300-resources/service.yaml")
}

var (
	webhookOnce sync.Once
	webhookErr  error
)

// cluster returns the shared API server with the webhook server running in this process.
func cluster(t testing.TB) *testenv.Cluster {
	t.Helper()
	c := testenv.APIServer(t)
	webhookOnce.Do(func() { webhookErr = startWebhookServer(c) })
	if webhookErr != nil {
		t.Fatalf("start webhook server: %v", webhookErr)
	}
	return c
}

func startWebhookServer(c *testenv.Cluster) error {
	// The cache as the manager command configures it: Decofiles without their inline content.
	co := cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
	controller.CacheOptions(&co)
	return testenv.ServeWebhooks(c, ctrl.Options{Cache: co}, func(mgr ctrl.Manager) error {
		return inject.Setup(mgr, inject.Options{S3: testS3})
	})
}

// warningClient is a client that records the admission warnings the API server returns.
type warningClient struct {
	client.Client
	mu       sync.Mutex
	warnings []string
}

func (w *warningClient) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = append(w.warnings, text)
}

// Take returns the warnings recorded since the last call.
func (w *warningClient) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.warnings
	w.warnings = nil
	return out
}

func newWarningClient(t *testing.T, c *testenv.Cluster) *warningClient {
	t.Helper()
	w := &warningClient{}
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandler = w
	cl, err := client.New(cfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w.Client = cl
	return w
}

// webhookCalls is how many admission requests the webhook server answered on path, read from
// controller-runtime's request counter.
func webhookCalls(t *testing.T, path string) float64 {
	t.Helper()
	families, err := metrics.Registry.(prometheus.Gatherer).Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_webhook_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "webhook" && l.GetValue() == path {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}
