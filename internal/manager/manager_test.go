package manager_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/shard"
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
	testenv.StartManager(t, mgr)
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

// decofileWrites counts, per Decofile name, the write requests one manager sends for the
// Decofiles of namespace ns.
type decofileWrites struct {
	ns     string
	mu     sync.Mutex
	byName map[string]int
}

func (w *decofileWrites) wrap(rt http.RoundTripper) http.RoundTripper {
	return promhttp.RoundTripperFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodGet {
			if _, rest, ok := strings.Cut(r.URL.Path, "/namespaces/"+w.ns+"/decofiles/"); ok {
				w.mu.Lock()
				w.byName[strings.Split(rest, "/")[0]]++
				w.mu.Unlock()
			}
		}
		return rt.RoundTrip(r)
	})
}

func (w *decofileWrites) names() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.byName))
}

func (w *decofileWrites) of(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byName[name]
}

// TestShardsReconcileOnlyTheirObjects runs the main instance and shards a and b at once against
// one API server, each electing its leader on a Lease of its own. Every Decofile is delivered by
// the instance its label selects, and that instance is the only one that writes it (write
// requests counted per instance); every instance's cache still holds every Decofile, which the
// injection webhook of any replica answers from. A Decofile moved from shard a to shard b is
// delivered by b from then on, and a writes nothing more for it.
func TestShardsReconcileOnlyTheirObjects(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	ns := c.Namespace(t, "shards", nil)

	instances := map[string]string{"main": shard.MainSelector, "a": shard.ForShard("a"), "b": shard.ForShard("b")}
	writes := map[string]*decofileWrites{}
	caches := map[string]client.Reader{}
	for name, selector := range instances {
		o := manager.DefaultOptions()
		o.Controllers = []string{manager.PartDecofile}
		o.MetricsAddr, o.ProbeAddr = "0", "0"
		o.LeaderElectionNamespace, o.LeaderElectionID = "default", testenv.Name(t)+"-"+name
		o.WatchLabelSelector, o.ShardName = selector, name
		o.Decofile.DisableInjection = true
		o.SecondInProcess = true
		w := &decofileWrites{ns: ns, byName: map[string]int{}}
		cfg := rest.CopyConfig(c.Config)
		cfg.Wrap(w.wrap)
		mgr, err := manager.New(cfg, o)
		if err != nil {
			t.Fatal(err)
		}
		testenv.StartManager(t, mgr)
		writes[name], caches[name] = w, mgr.GetCache()
	}

	want := map[string][]string{}
	for _, owner := range []string{"main", "a", "b"} {
		for i := range 2 {
			name := fmt.Sprintf("%s-%d", owner, i)
			df := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inlineTitle(name)}}
			if owner != "main" {
				df.Labels = map[string]string{shard.Key: owner}
			}
			if err := c.Client.Create(ctx, df); err != nil {
				t.Fatal(err)
			}
			want[owner] = append(want[owner], name)
		}
	}
	for _, names := range want {
		for _, name := range names {
			waitContent(t, c.Client, ns, name, name)
		}
	}
	for owner, names := range want {
		if got := writes[owner].names(); !slices.Equal(got, names) {
			t.Errorf("instance %s wrote Decofiles %v, want exactly %v", owner, got, names)
		}
		var list decov1.DecofileList
		if err := caches[owner].List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) != 6 {
			t.Errorf("instance %s caches %d Decofiles (%v), want all 6 for its webhook", owner, len(list.Items), err)
		}
	}

	// Hand a-0 over to shard b, then change its content: b delivers it, a does not write it.
	var moved decov1.Decofile
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a-0"}, &moved); err != nil {
		t.Fatal(err)
	}
	moved.Labels[shard.Key] = "b"
	if err := c.Client.Update(ctx, &moved); err != nil {
		t.Fatal(err)
	}
	byA := writes["a"].of("a-0")
	testenv.Eventually(t, 30*time.Second, func() error {
		var cached decov1.Decofile
		if err := caches["b"].Get(ctx, client.ObjectKeyFromObject(&moved), &cached); err != nil {
			return err
		}
		if cached.Labels[shard.Key] != "b" {
			return fmt.Errorf("shard b's cache has not seen the move yet")
		}
		return nil
	})
	setTitle(t, c.Client, &moved, "delivered by b")
	waitContent(t, c.Client, ns, "a-0", "delivered by b")
	// The status follows the ConfigMap.
	testenv.Eventually(t, 30*time.Second, func() error {
		if writes["b"].of("a-0") == 0 {
			return fmt.Errorf("shard b has not written the status of a-0")
		}
		return nil
	})
	if n := writes["a"].of("a-0"); n != byA {
		t.Errorf("shard a wrote the Decofile it handed over %d more times", n-byA)
	}
	if n := writes["main"].of("a-0"); n != 0 {
		t.Errorf("the main instance wrote a shard's Decofile %d times", n)
	}
	// `kubectl get decofiles -o wide` shows each one's shard.
	if got := shardColumn(t, c, ns); got["a-0"] != "b" || got["b-1"] != "b" || got["main-0"] != "" || len(got) != 6 {
		t.Errorf("the Shard column reads %v", got)
	}
}

// shardColumn reads the Decofiles of ns as `kubectl get -o wide` prints them and returns each
// one's Shard cell.
func shardColumn(t *testing.T, c *testenv.Cluster, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, row := range c.TableRows(t, "/apis/deco.sites/v1alpha1/namespaces/"+ns+"/decofiles") {
		out[row["Name"]] = row["Shard"]
	}
	return out
}

// waitContent waits until the Decofile's ConfigMap holds title and its status says so.
func waitContent(t *testing.T, c client.Client, ns, name, title string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, func() error {
		var df decov1.Decofile
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &df); err != nil {
			return err
		}
		var cm corev1.ConfigMap
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: df.ConfigMapName()}, &cm); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if !strings.Contains(cm.Data[decov1.KeyJSON], title) || !df.Status.ContentStored() {
			return fmt.Errorf("%s: ConfigMap holds %.60s, stored=%v", name, cm.Data[decov1.KeyJSON], df.Status.ContentStored())
		}
		return nil
	})
}
