package ui_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/internal/ui"
	"github.com/siteops/siteops/internal/ui/access"
)

func TestMain(m *testing.M) { testenv.Main(m, servers.APIServerOptions{}) }

// env is a manager serving the UI behind authenticating proxies, one per person.
type env struct {
	c      *testenv.Cluster
	mtls   *testenv.MTLS
	uiAddr string
}

// startUI runs the manager (Decofile part, UI on) against the shared API server; also changes
// the manager's options first.
func startUI(t *testing.T, also ...func(*manager.Options)) *env {
	t.Helper()
	return startUIOn(t, testenv.APIServer(t), also...)
}

// startUIOn is startUI against the API server c.
func startUIOn(t *testing.T, c *testenv.Cluster, also ...func(*manager.Options)) *env {
	t.Helper()
	e := &env{c: c, mtls: testenv.NewMTLS(t, "ui-proxy", "127.0.0.1"), uiAddr: testenv.FreeLoopbackAddr(t)}
	o := manager.DefaultOptions()
	o.Controllers = []string{manager.PartDecofile}
	o.MetricsAddr, o.ProbeAddr, o.LeaderElect = "0", "0", false
	o.Decofile.DisableInjection = true
	o.SecondInProcess = true
	o.UI = ui.Options{BindAddress: e.uiAddr, CertDir: e.mtls.CertDir, ProxyCAFile: e.mtls.CAFile, ProxyNames: []string{"ui-proxy"}}
	for _, f := range also {
		f(&o)
	}
	mgr, err := manager.New(c.Config, o)
	if err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)
	testenv.Eventually(t, 30*time.Second, func() error {
		conn, err := net.Dial("tcp", e.uiAddr)
		if err == nil {
			conn.Close()
		}
		return err
	})
	return e
}

// proxy starts an authenticating proxy that vouches for user in groups, as oauth2-proxy would
// after a sign-in: it drops whatever identity headers the browser sent and sets its own, over its
// client certificate. It returns the proxy's base URL.
func (e *env) proxy(t *testing.T, user string, groups ...string) string {
	t.Helper()
	target := &url.URL{Scheme: "https", Host: e.uiAddr}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
			r.Out.Header.Del(access.HeaderUser)
			r.Out.Header.Del(access.HeaderGroup)
			r.Out.Header.Set(access.HeaderUser, user)
			for _, g := range groups {
				r.Out.Header.Add(access.HeaderGroup, g)
			}
		},
		Transport:     &http.Transport{TLSClientConfig: e.mtls.ClientTLS(t)},
		FlushInterval: -1,
	}
	srv := httptest.NewServer(rp)
	// Open live streams would hold Close until the browser goes.
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	return srv.URL
}

// site creates an inline Decofile and waits until the manager stored it.
func (e *env) site(t *testing.T, ns, name string, blocks map[string]string) *decov1.Decofile {
	t.Helper()
	createSite(t, e, ns, name, blocks)
	return e.stored(t, ns, name, "")
}

// createSite creates an inline Decofile (one small block unless blocks are given).
func createSite(t *testing.T, e *env, ns, name string, blocks ...map[string]string) {
	t.Helper()
	content := map[string]string{"home": `{"title":"` + name + `"}`}
	if len(blocks) > 0 {
		content = blocks[0]
	}
	d := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(content)}}
	if err := e.c.Client.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
}

// stored waits until the Decofile's stored content is not the hash before.
func (e *env) stored(t *testing.T, ns, name, before string) *decov1.Decofile {
	t.Helper()
	d := &decov1.Decofile{}
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := e.c.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		if !d.Status.ContentStored() || d.Status.ContentHash == before {
			return fmt.Errorf("%s/%s not stored yet", ns, name)
		}
		return nil
	})
	return d
}

func inline(blocks map[string]string) *decov1.InlineSource {
	v := map[string]apiextensionsv1.JSON{}
	for k, raw := range blocks {
		v[k] = apiextensionsv1.JSON{Raw: json.RawMessage(raw)}
	}
	return &decov1.InlineSource{Value: v}
}

// bind gives user a built-in ClusterRole (view, edit) in ns.
func (e *env) bind(t *testing.T, user, role, ns string) {
	t.Helper()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user + "-" + role},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	if err := e.c.Client.Create(t.Context(), rb); err != nil {
		t.Fatal(err)
	}
}

// page opens path and returns the HTTP status and the main part's text.
func page(t *testing.T, b *testenv.Browser, base, path string) (int64, string) {
	t.Helper()
	ctx := b.Ctx
	res, err := chromedp.Run(ctx, chromedp.NavigateResponse(base+path))
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	return res.Status, testenv.Eval[string](t, b, `document.querySelector("main").innerText`)
}

// noProblems fails the test when a page reported errors to the console (CSP violations,
// exceptions, failed loads).
func noProblems(t *testing.T, b *testenv.Browser) {
	t.Helper()
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("the pages reported errors:\n%s", strings.Join(p, "\n"))
	}
}

// structure checks that a page has a title heading and the tables it should.
func structure(t *testing.T, b *testenv.Browser, heading string, tables int) {
	t.Helper()
	h1 := testenv.Eval[string](t, b, `document.querySelector("h1") ? document.querySelector("h1").innerText : ""`)
	if !strings.HasPrefix(h1, heading) {
		t.Errorf("heading %q, want it to start with %q", h1, heading)
	}
	if n := testenv.Eval[int](t, b, `document.querySelectorAll("main table").length`); n < tables {
		t.Errorf("%d tables on the %s page, want at least %d", n, heading, tables)
	}
}

func TestTenantSeesOnlyItsNamespace(t *testing.T) {
	e := startUI(t)
	a := e.c.Tenant(t, "ui-a", nil)
	other := e.c.Tenant(t, "ui-b", nil)
	e.site(t, a.Namespace, "shop", map[string]string{"home": `{"title":"shop"}`})
	e.site(t, other.Namespace, "hidden-site", map[string]string{"home": `{"title":"hidden"}`})
	for ns, name := range map[string]string{a.Namespace: "shop-config", other.Namespace: "hidden-rule"} {
		rule := &mirrorv1.WatchRule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: mirrorv1.WatchRuleSpec{TargetRef: mirrorv1.TargetReference{Name: "audit"},
				Rules: []mirrorv1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}}}}
		if err := e.c.Client.Create(t.Context(), rule); err != nil {
			t.Fatal(err)
		}
	}
	base := e.proxy(t, a.Name)
	b := testenv.NewBrowser(t)

	status, text := page(t, b, base, "/")
	if status != http.StatusOK || !strings.Contains(text, "decofile/"+a.Namespace+"/shop") {
		t.Fatalf("overview: HTTP %d, want the tenant's own site listed:\n%s", status, text)
	}
	if strings.Contains(text, other.Namespace) || strings.Contains(text, "hidden-site") {
		t.Errorf("the overview shows another tenant's namespace or site:\n%s", text)
	}
	structure(t, b, "Overview", 3)
	b.Screenshot(t, "overview-tenant")

	status, text = page(t, b, base, "/namespaces/"+a.Namespace+"/decofiles/shop")
	if status != http.StatusOK || !strings.Contains(text, "From source to pods") {
		t.Fatalf("own site: HTTP %d:\n%s", status, text)
	}
	structure(t, b, "Decofile", 2)
	b.Screenshot(t, "site-tenant")

	status, text = page(t, b, base, "/namespaces/"+a.Namespace)
	if status != http.StatusOK || !strings.Contains(text, "decofile/"+a.Namespace+"/shop") || !strings.Contains(text, "watchrule/"+a.Namespace+"/shop-config") {
		t.Fatalf("own namespace: HTTP %d, want its site and its rule:\n%s", status, text)
	}
	structure(t, b, "Namespace", 3)
	b.Screenshot(t, "namespace-tenant")
	for _, path := range []string{"/", "/mirror"} {
		if _, text := page(t, b, base, path); strings.Contains(text, "hidden-rule") || strings.Contains(text, other.Namespace) {
			t.Errorf("%s shows another tenant's rule or namespace:\n%s", path, text)
		}
	}

	for _, path := range []string{"/namespaces/" + other.Namespace + "/decofiles/hidden-site", "/namespaces/" + other.Namespace} {
		status, text = page(t, b, base, path)
		if status != http.StatusForbidden {
			t.Errorf("%s: HTTP %d, want 403", path, status)
		}
		if strings.Contains(text, "hidden") || strings.Contains(text, "From source to pods") {
			t.Errorf("%s: the refusal shows something of the object:\n%s", path, text)
		}
	}
	b.Screenshot(t, "forbidden-tenant")
	for _, p := range b.Problems() {
		if !strings.Contains(p, "status of 403") {
			t.Errorf("the pages reported an error other than the refusals: %s", p)
		}
	}
}

func TestProxyHeadersWithoutTheProxyCertificateAreRefused(t *testing.T) {
	e := startUI(t)
	// A tenant pod that reaches the UI's port and claims to be an admin: without the proxy's
	// client certificate the TLS handshake fails before any header is read.
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, _ := http.NewRequest(http.MethodGet, "https://"+e.uiAddr+"/", nil)
	req.Header.Set(access.HeaderUser, "admin")
	req.Header.Add(access.HeaderGroup, "system:masters")
	if res, err := cl.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("a request without the proxy's certificate got HTTP %d, want a refused handshake", res.StatusCode)
	}
	// With a certificate of the same CA but another name, the UI refuses too.
	certPEM, keyPEM := e.mtls.Issue(t, "tenant-pod", 2 /* x509.ExtKeyUsageClientAuth */, nil)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	tc := e.mtls.ClientTLS(t)
	tc.Certificates = []tls.Certificate{cert}
	cl = &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	res, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("another client certificate of the CA: HTTP %d, want 401", res.StatusCode)
	}
}

func TestAdminSeesEverythingLive(t *testing.T) {
	e := startUI(t)
	a := e.c.Namespace(t, "ui-live-a", nil)
	bns := e.c.Namespace(t, "ui-live-b", nil)
	e.site(t, bns, "blog", map[string]string{"home": `{"title":"blog"}`})
	first := e.site(t, a, "shop", map[string]string{"home": `{"title":"v1"}`})
	base := e.proxy(t, "platform-admin", "system:masters")
	b := testenv.NewBrowser(t)

	status, text := page(t, b, base, "/")
	if status != http.StatusOK || !strings.Contains(text, "decofile/"+a+"/shop") && !strings.Contains(text, "Decofile") {
		t.Fatalf("overview: HTTP %d:\n%s", status, text)
	}
	counts := testenv.Eval[string](t, b, `document.querySelector("table.counts").innerText`)
	if !strings.Contains(counts, "Decofile") {
		t.Fatalf("no Decofile row in the counts:\n%s", counts)
	}
	b.Screenshot(t, "overview-admin")

	status, _ = page(t, b, base, "/namespaces/"+a+"/decofiles/shop")
	if status != http.StatusOK {
		t.Fatalf("site page: HTTP %d", status)
	}
	b.Do(t, chromedp.WaitVisible(chromedp.CSS("#live-status.on")))
	testenv.Eval[any](t, b, `window.__sameDocument = true`)
	old := first.Status.ContentHash[:12]
	if text := testenv.Eval[string](t, b, `document.querySelector("main").innerText`); !strings.Contains(text, old) {
		t.Fatalf("the site page does not show the stored content %s:\n%s", old, text)
	}

	// A new publish: the page shows the new content without being reloaded.
	d := first.DeepCopy()
	d.Spec.Inline = inline(map[string]string{"home": `{"title":"v2"}`})
	if err := e.c.Client.Update(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	now := e.stored(t, a, "shop", first.Status.ContentHash).Status.ContentHash[:12]
	ctx, cancel := contextFor(b, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`document.querySelector("main").innerText.includes(%q)`, now))); err != nil {
		t.Fatalf("the page never showed the new content %s without a reload: %v", now, err)
	}
	if !testenv.Eval[bool](t, b, `window.__sameDocument === true`) {
		t.Error("the page was reloaded; live updates should replace its main part in place")
	}
	b.Screenshot(t, "site-admin-live")

	status, text = page(t, b, base, "/mirror")
	if status != http.StatusOK {
		t.Fatalf("mirror page: HTTP %d:\n%s", status, text)
	}
	structure(t, b, "Mirror", 2)
	b.Screenshot(t, "mirror-admin")
	noProblems(t, b)
}

func TestActionsAreTheirPersons(t *testing.T) {
	e := startUI(t)
	tenant := e.c.Tenant(t, "ui-act", nil)
	e.site(t, tenant.Namespace, "shop", map[string]string{"home": `{"title":"shop"}`})
	e.bind(t, "viewer", "view", tenant.Namespace)
	key := client.ObjectKey{Namespace: tenant.Namespace, Name: "shop"}
	path := "/namespaces/" + tenant.Namespace + "/decofiles/shop"

	// A viewer sees the site with its buttons disabled, and the API server refuses the action
	// anyway when it is sent.
	viewer := testenv.NewBrowser(t)
	vbase := e.proxy(t, "viewer")
	if status, _ := page(t, viewer, vbase, path); status != http.StatusOK {
		t.Fatalf("viewer: HTTP %d", status)
	}
	if n := testenv.Eval[int](t, viewer, `document.querySelectorAll("form.actions button:not([disabled])").length`); n != 0 {
		t.Errorf("viewer: %d enabled buttons, want none", n)
	}
	refused := testenv.Eval[int](t, viewer, `fetch(location.pathname + "/suspend", {method: "POST", redirect: "manual"}).then(r => r.status)`, chromedp.EvalAwaitPromise)
	if refused != http.StatusForbidden {
		t.Errorf("viewer's suspend: HTTP %d, want 403", refused)
	}
	viewer.Screenshot(t, "site-viewer")
	if p := viewer.Problems(); len(p) != 1 || !strings.Contains(p[0], "status of 403") {
		t.Errorf("viewer: want the one refusal reported, got %q", p)
	}

	// The tenant suspends, resumes and reconciles its own site from the page.
	b := testenv.NewBrowser(t)
	base := e.proxy(t, tenant.Name)
	page(t, b, base, path)
	b.Do(t, chromedp.Click(chromedp.Search(`//button[text()="Suspend"]`)), chromedp.WaitVisible(chromedp.Search(`//button[text()="Resume"]`)))
	var d decov1.Decofile
	if err := e.c.Client.Get(t.Context(), key, &d); err != nil || !d.Spec.Suspend {
		t.Fatalf("after Suspend: suspend=%v, err %v", d.Spec.Suspend, err)
	}
	b.Do(t, chromedp.Click(chromedp.Search(`//button[text()="Resume"]`)), chromedp.WaitVisible(chromedp.Search(`//button[text()="Suspend"]`)))
	b.Do(t, chromedp.Click(chromedp.Search(`//button[text()="Reconcile"]`)))
	testenv.Eventually(t, 10*time.Second, func() error {
		if err := e.c.Client.Get(t.Context(), key, &d); err != nil {
			return fmt.Errorf("after Resume and Reconcile: %w", err)
		}
		if d.Spec.Suspend || d.Annotations[decov1.AnnotationReconcileRequestedAt] == "" {
			return fmt.Errorf("after Resume and Reconcile: suspend=%v, annotations %v", d.Spec.Suspend, d.Annotations)
		}
		return nil
	})

	// A request from another site's page (cross-origin) is refused before it acts.
	req, _ := http.NewRequest(http.MethodPost, base+path+"/suspend", nil)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Origin", "https://evil.invalid")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin suspend: HTTP %d, want 403", res.StatusCode)
	}
	if err := e.c.Client.Get(t.Context(), key, &d); err != nil || d.Spec.Suspend {
		t.Errorf("the cross-origin request suspended the site (err %v)", err)
	}
	noProblems(t, b)
	noProblems(t, viewer)
}

func TestTenantTextRendersAsText(t *testing.T) {
	e := startUI(t)
	tenant := e.c.Tenant(t, "ui-xss", nil)
	const script = `<script>window.__xss=1</script><img src=x onerror="window.__xss=2">`
	// A block named with markup, holding markup: the site page lists blocks by name.
	e.site(t, tenant.Namespace, "shop", map[string]string{"home": `{"title":"` + strings.ReplaceAll(script, `"`, `\"`) + `"}`,
		script: `{"x":1}`})
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: tenant.Namespace, Name: "hostile"},
		InvolvedObject: corev1.ObjectReference{Kind: "Decofile", Namespace: tenant.Namespace, Name: "shop"},
		Type:           corev1.EventTypeWarning, Reason: "Hostile", Message: script, LastTimestamp: metav1.Now(), Count: 1}
	if err := tenant.Client.Create(t.Context(), ev); err != nil {
		t.Fatalf("the tenant writes an Event: %v", err)
	}
	b := testenv.NewBrowser(t)
	base := e.proxy(t, tenant.Name)
	for _, path := range []string{"/", "/namespaces/" + tenant.Namespace, "/namespaces/" + tenant.Namespace + "/decofiles/shop"} {
		_, text := page(t, b, base, path)
		if !strings.Contains(text, script) {
			t.Errorf("%s: the Event's message or the block's name is not shown as text:\n%s", path, text)
		}
		if v := testenv.Eval[any](t, b, `window.__xss`); v != nil {
			t.Errorf("%s: tenant text ran as script (window.__xss = %v)", path, v)
		}
		if n := testenv.Eval[int](t, b, `document.querySelectorAll("main script, main img").length`); n != 0 {
			t.Errorf("%s: %d script or img elements in the page's main part, want none", path, n)
		}
	}
	b.Screenshot(t, "namespace-hostile-text")
	noProblems(t, b)
}

// contextFor bounds a browser wait.
func contextFor(b *testenv.Browser, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.Ctx, d)
}
