package mirror_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/testenv"
)

// internalService is an HTTP service on loopback that the manager can reach but a tenant must
// not: it counts every request and answers with a marker that must never show anywhere.
type internalService struct {
	addr     string
	marker   string
	requests atomic.Int64
}

func newInternalService(t *testing.T, status int) *internalService {
	t.Helper()
	// 127.0.0.1, which "localhost" names too.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &internalService{addr: l.Addr().String(), marker: "INTERNAL-SECRET-" + testenv.Name(t)}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.requests.Add(1)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(s.marker))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

// redirector answers every request with a redirect to target + the request's path.
func redirector(t *testing.T, target string) string {
	t.Helper()
	l := testenv.LoopbackListener(t)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target+r.URL.RequestURI(), http.StatusFound)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// tenantMirror creates, as the tenant, a GitProvider name for url, a GitTarget name on main and
// a WatchRule mirroring its ConfigMaps.
func tenantMirror(t *testing.T, tenant *testenv.Tenant, name, url string) {
	t.Helper()
	ctx := context.Background()
	cl := tenant.Client
	must(t, cl.Create(ctx, &mirrorv1alpha1.GitProvider{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenant.Namespace},
		Spec:       mirrorv1alpha1.GitProviderSpec{URL: url, Committer: mirrorv1alpha1.Committer{Name: "Tenant", Email: "tenant@example.com"}},
	}))
	must(t, cl.Create(ctx, &mirrorv1alpha1.GitTarget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenant.Namespace},
		Spec:       mirrorv1alpha1.GitTargetSpec{ProviderRef: ref(name), Branch: "main", Path: name},
	}))
	must(t, cl.Create(ctx, &mirrorv1alpha1.WatchRule{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenant.Namespace},
		Spec:       mirrorv1alpha1.WatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: name}, Rules: []mirrorv1alpha1.ResourceRule{cmRule()}},
	}))
	t.Cleanup(func() {
		bg := context.Background()
		_ = cl.DeleteAllOf(bg, &mirrorv1alpha1.GitTarget{}, client.InNamespace(tenant.Namespace))
		_ = cl.DeleteAllOf(bg, &mirrorv1alpha1.WatchRule{}, client.InNamespace(tenant.Namespace))
	})
}

// TestTenantGitProviderCannotReachInternalServices: a tenant points GitProviders at an internal
// HTTP service on loopback, by name and by address, and through a redirect from a host the
// platform allowed. The manager never connects to the service, the GitTargets say
// RemoteNotAllowed naming --git-allowed-hosts, and the service's answer shows nowhere.
func TestTenantGitProviderCannotReachInternalServices(t *testing.T) {
	c := testenv.APIServer(t)
	internal := newInternalService(t, http.StatusNotFound)
	host, port, _ := net.SplitHostPort(internal.addr)
	front := redirector(t, "http://localhost:"+port)
	// The platform allows http and one internal host (the redirecting front), not the service.
	runManager(t, c, mirror.Options{GitAllowedSchemes: []string{"https", "ssh", "http"}, GitAllowedHosts: []string{front}}, "")

	tenant := c.Tenant(t, "ssrf", nil)
	ctx := context.Background()
	cases := map[string]string{
		"by-address":  "http://" + internal.addr + "/internal/admin.git",
		"by-name":     "http://localhost:" + port + "/internal/admin.git",
		"by-redirect": "http://" + front + "/internal/admin.git",
	}
	for name, url := range cases {
		tenantMirror(t, tenant, name, url)
	}
	must(t, tenant.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: tenant.Namespace}, Data: map[string]string{"v": "1"}}))

	testenv.Eventually(t, 30*time.Second, func() error {
		for name := range cases {
			var gt mirrorv1alpha1.GitTarget
			if err := tenant.Client.Get(ctx, types.NamespacedName{Namespace: tenant.Namespace, Name: name}, &gt); err != nil {
				return err
			}
			ready := meta.FindStatusCondition(gt.Status.Conditions, mirrorv1alpha1.ConditionReady)
			if ready == nil || ready.Reason != "RemoteNotAllowed" || !strings.Contains(ready.Message, "--git-allowed-hosts") {
				return fmt.Errorf("GitTarget %s Ready = %+v, want RemoteNotAllowed naming --git-allowed-hosts (the service got %d requests)", name, ready, internal.requests.Load())
			}
		}
		return nil
	})
	for name := range cases {
		var gt mirrorv1alpha1.GitTarget
		must(t, tenant.Client.Get(ctx, types.NamespacedName{Namespace: tenant.Namespace, Name: name}, &gt))
		t.Logf("%s: %s", name, meta.FindStatusCondition(gt.Status.Conditions, mirrorv1alpha1.ConditionReady).Message)
	}
	// The provider named by address is refused as soon as it is read.
	testenv.Eventually(t, 10*time.Second, func() error {
		var p mirrorv1alpha1.GitProvider
		if err := tenant.Client.Get(ctx, types.NamespacedName{Namespace: tenant.Namespace, Name: "by-address"}, &p); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(p.Status.Conditions, mirrorv1alpha1.ConditionReady)
		if ready == nil || ready.Reason != "RemoteNotAllowed" || !strings.Contains(ready.Message, "--git-allowed-hosts") {
			return fmt.Errorf("GitProvider by-address Ready = %+v, want RemoteNotAllowed naming --git-allowed-hosts", ready)
		}
		return nil
	})
	// Give the writers time for their retries.
	time.Sleep(3 * time.Second)
	if n := internal.requests.Load(); n != 0 {
		t.Fatalf("the manager sent %d requests to the internal service %s for the tenant", n, host)
	}
	// Nothing the tenant can read carries the service's answer (it never answered, and status
	// never quotes a remote anyway).
	var targets mirrorv1alpha1.GitTargetList
	must(t, tenant.Client.List(ctx, &targets, client.InNamespace(tenant.Namespace)))
	var providers mirrorv1alpha1.GitProviderList
	must(t, tenant.Client.List(ctx, &providers, client.InNamespace(tenant.Namespace)))
	var events eventsv1.EventList
	must(t, c.Client.List(ctx, &events, client.InNamespace(tenant.Namespace)))
	for _, o := range []any{targets, providers, events} {
		b, _ := json.Marshal(o)
		if strings.Contains(string(b), internal.marker) {
			t.Fatalf("the internal service's answer shows in %T: %s", o, b)
		}
	}
}
