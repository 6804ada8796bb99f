package manager_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// fluxEvent is what a generic Provider receives: Flux's event format.
type fluxEvent struct {
	InvolvedObject struct {
		Kind, Namespace, Name, APIVersion string
	} `json:"involvedObject"`
	Severity            string            `json:"severity"`
	Message             string            `json:"message"`
	Reason              string            `json:"reason"`
	Metadata            map[string]string `json:"metadata"`
	ReportingController string            `json:"reportingController"`
}

// TestEventsReachFluxAlerts: with --events-addr, a Decofile's Events reach a Flux Alert's
// generic Provider through a real notification-controller, whose Alert CRD carries the kinds
// config/flux-notification adds. The event names the object and nothing a tenant annotated on
// it. With notification-controller gone, the delivery goes on as before.
func TestEventsReachFluxAlerts(t *testing.T) {
	crds := alertCRDsWithSiteopsKinds(t)
	c := testenv.NewAPIServer(t, servers.APIServerOptions{ExtraCRDPaths: []string{crds}})
	ctx := context.Background()

	var mu sync.Mutex
	var got []fluxEvent
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var e fluxEvent
		if err := json.Unmarshal(body, &e); err != nil {
			t.Errorf("the Provider received %q: %v", body, err)
		}
		mu.Lock()
		got = append(got, e)
		mu.Unlock()
	}))
	defer sink.Close()
	nc, err := servers.StartFluxNotification(ctx, c.KubeConfig, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nc.Stop() }()

	ns := c.Namespace(t, "alerts", nil)
	for _, o := range []string{`{"apiVersion":"notification.toolkit.fluxcd.io/v1beta3","kind":"Provider","metadata":{"name":"sink"},"spec":{"type":"generic","address":"` + sink.URL + `"}}`,
		`{"apiVersion":"notification.toolkit.fluxcd.io/v1beta3","kind":"Alert","metadata":{"name":"sites"},"spec":{"providerRef":{"name":"sink"},"eventSeverity":"info","eventSources":[{"kind":"Decofile","name":"*"}]}}`} {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON([]byte(o)); err != nil {
			t.Fatal(err)
		}
		u.SetNamespace(ns)
		if err := c.Client.Create(ctx, u); err != nil {
			t.Fatalf("create %s (the Alert CRD must accept kind Decofile): %v", u.GetKind(), err)
		}
	}

	o := manager.DefaultOptions()
	o.Controllers = []string{manager.PartDecofile}
	o.MetricsAddr, o.ProbeAddr, o.LeaderElect = "0", "0", false
	o.Decofile.DisableInjection = true
	o.EventsAddr = nc.EventsURL
	o.SecondInProcess = true // other tests of the package build a manager too
	mgr, err := manager.New(c.Config, o)
	if err != nil {
		t.Fatal(err)
	}
	defer testenv.StartManager(t, mgr)()

	// A tenant's annotation in Flux's metadata namespace must not reach the platform's alerts.
	df := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns,
		Annotations: map[string]string{"event.toolkit.fluxcd.io/token": "tenant-chosen", "deco.sites/revision": "forged"}},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inlineTitle("v0")}}
	if err := c.Client.Create(ctx, df); err != nil {
		t.Fatal(err)
	}
	// notification-controller reads Alerts from its cache: events sent before it has the Alert
	// are dropped there. Each new version is a new Stored event, until one arrives.
	version := 0
	testenv.Eventually(t, 60*time.Second, func() error {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 {
			return nil
		}
		version++
		setTitle(t, c.Client, df, fmt.Sprintf("v%d", version))
		return fmt.Errorf("no event reached the Provider after %d versions", version)
	})
	mu.Lock()
	e := got[0]
	mu.Unlock()
	if e.InvolvedObject.Kind != "Decofile" || e.InvolvedObject.Name != "shop" || e.InvolvedObject.Namespace != ns ||
		e.InvolvedObject.APIVersion != decov1.GroupVersion.String() || e.Reason != "Stored" || e.Severity != "info" ||
		e.ReportingController != "siteops-decofile" || !strings.Contains(e.Message, "in ConfigMap decofile-shop") {
		t.Fatalf("event at the Provider: %+v", e)
	}
	for k, v := range e.Metadata {
		if strings.Contains(v, "tenant-chosen") || strings.Contains(v, "forged") {
			t.Fatalf("the tenant's annotation reached the alert's metadata: %s=%s", k, v)
		}
	}
	t.Logf("the Provider received %d events; the first: %+v", len(got), e)

	// notification-controller goes away: the Decofile is still delivered, its Events recorded.
	if err := nc.Kill(); err != nil {
		t.Fatal(err)
	}
	setTitle(t, c.Client, df, "after the notification-controller left")
	testenv.Eventually(t, 30*time.Second, func() error {
		var cm corev1.ConfigMap
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: df.ConfigMapName()}, &cm); err != nil {
			return err
		}
		if !strings.Contains(cm.Data[decov1.KeyJSON], "after the notification-controller left") {
			return fmt.Errorf("ConfigMap holds %.80s", cm.Data[decov1.KeyJSON])
		}
		return nil
	})
}

func inlineTitle(title string) *decov1.InlineSource {
	return &decov1.InlineSource{Value: map[string]apiextensionsv1.JSON{"site": {Raw: []byte(`{"title":"` + title + `"}`)}}}
}

func setTitle(t *testing.T, c client.Client, df *decov1.Decofile, title string) {
	t.Helper()
	// The manager writes the status meanwhile: read again on a conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur decov1.Decofile
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(df), &cur); err != nil {
			return err
		}
		cur.Spec.Inline = inlineTitle(title)
		return c.Update(context.Background(), &cur)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// alertCRDsWithSiteopsKinds is a folder with notification-controller's CRDs, its Alert CRD
// through the config/flux-notification component as a platform's flux-system kustomization
// would take it.
func alertCRDsWithSiteopsKinds(t *testing.T) string {
	t.Helper()
	work := t.TempDir()
	src := servers.FluxNotificationCRDs()
	alerts, err := os.ReadFile(filepath.Join(src, "notification.toolkit.fluxcd.io_alerts.yaml"))
	if err != nil {
		t.Fatalf("read the Alert CRD (make test-tools builds it): %v", err)
	}
	must(t, os.WriteFile(filepath.Join(work, "alerts.yaml"), alerts, 0o644))
	abs, err := filepath.Abs("../../config/flux-notification")
	must(t, err)
	component, err := filepath.Rel(work, abs) // kustomize takes a component by a relative path
	must(t, err)
	must(t, os.WriteFile(filepath.Join(work, "kustomization.yaml"),
		[]byte("resources: [alerts.yaml]\ncomponents: ["+component+"]\n"), 0o644))
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), work)
	if err != nil {
		t.Fatalf("kustomize the Alert CRD with config/flux-notification: %v", err)
	}
	out := filepath.Join(work, "crds")
	must(t, os.Mkdir(out, 0o755))
	var kinds []string
	for _, r := range res.Resources() {
		if r.GetKind() != "CustomResourceDefinition" {
			continue
		}
		y, err := r.AsYAML()
		must(t, err)
		var crd apiextensionsv1.CustomResourceDefinition
		must(t, yaml.Unmarshal(y, &crd))
		for _, e := range crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["eventSources"].Items.Schema.Properties["kind"].Enum {
			kinds = append(kinds, strings.Trim(string(e.Raw), `"`))
		}
		must(t, os.WriteFile(filepath.Join(out, "alerts.yaml"), y, 0o644))
	}
	for _, k := range []string{"Kustomization", "Decofile", "GitTarget", "WatchRule", "Namespace"} {
		if !slices.Contains(kinds, k) {
			t.Fatalf("the kustomized Alert CRD's event source kinds %v lack %s", kinds, k)
		}
	}
	for _, name := range []string{"providers", "receivers"} {
		y, err := os.ReadFile(filepath.Join(src, "notification.toolkit.fluxcd.io_"+name+".yaml"))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(out, name+".yaml"), y, 0o644))
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
