package ui_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/internal/ui"
	"github.com/siteops/siteops/internal/ui/access"
)

// oidcEnv is the manager's UI signing people in with a real OIDC issuer. The issuer is on
// https://localhost and the UI on https://127.0.0.1, so the issuer's redirect back to the UI is
// cross-site, as in production.
type oidcEnv struct {
	*env
	issuer *testenv.OIDCIssuer
	// base is the UI's address, https://127.0.0.1:port.
	base string
}

// startOIDC runs the UI with OIDC sign-in alone, or beside the authenticating proxy when
// withProxy is set; issuer changes the issuer's options. Groups are prefixed "oidc:", as the API
// server would be told to.
func startOIDC(t *testing.T, withProxy bool, issuer ...func(*servers.OIDCIssuerOptions)) *oidcEnv {
	t.Helper()
	io := servers.OIDCIssuerOptions{Host: "localhost", ClientID: "siteops-ui", ClientSecret: "ui-client-secret"}
	for _, f := range issuer {
		f(&io)
	}
	iss := testenv.NewOIDCIssuer(t, io)
	dir := t.TempDir()
	secret, cookie := filepath.Join(dir, "client-secret"), filepath.Join(dir, "cookie-secret")
	if err := os.WriteFile(secret, []byte("ui-client-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cookie, []byte("Jm3vV0bN7yq8m2nQm8pQ2lX1c6tPq7cW1oJ0sQ9vH5k=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := startUI(t, func(o *manager.Options) {
		if !withProxy {
			o.UI.ProxyCAFile, o.UI.ProxyNames = "", nil
		}
		o.UI.OIDC = ui.OIDCOptions{IssuerURL: iss.URL, ClientID: "siteops-ui", ClientSecretFile: secret,
			RedirectURL: "https://" + o.UI.BindAddress + "/auth/callback", CookieSecretFile: cookie,
			CAFile: iss.MTLS.CAFile, GroupsPrefix: "oidc:"}
		iss.AllowRedirect(o.UI.OIDC.RedirectURL)
	})
	return &oidcEnv{env: e, issuer: iss, base: "https://" + e.uiAddr}
}

// browser is Chromium accepting the UI's and the issuer's test certificates, and those only.
func (o *oidcEnv) browser(t *testing.T) *testenv.Browser {
	t.Helper()
	return testenv.NewBrowser(t, testenv.TrustCertificates(t, o.mtls.CertDir, o.issuer.MTLS.CertDir))
}

// signIn opens path in b, which sends it to the issuer's sign-in page, and presses Continue
// there: the issuer's page sends the browser back to the UI (a cross-site navigation), which
// must land on path signed in. It returns the text of the page's main part.
func (o *oidcEnv) signIn(t *testing.T, b *testenv.Browser, path string) string {
	t.Helper()
	if _, err := chromedp.Run(b.Ctx, chromedp.NavigateResponse(o.base+path)); err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	if at := testenv.Eval[string](t, b, `location.href`); !strings.HasPrefix(at, o.issuer.URL+"/authorize?") {
		t.Fatalf("%s sent the browser to %s, want the issuer's sign-in page", path, at)
	}
	b.Do(t, chromedp.Click(chromedp.CSS("#continue")))
	// Evaluations fail while the page navigates: ask again until it is there.
	landed := fmt.Sprintf(`location.href === %q && document.readyState === "complete" && document.querySelector("main") !== null`, o.base+path)
	testenv.Eventually(t, 20*time.Second, func() error {
		ctx, cancel := contextFor(b, 5*time.Second)
		defer cancel()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](landed))
		if err == nil && ok {
			return nil
		}
		at, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href`))
		if err != nil {
			return fmt.Errorf("after signing in the browser is at %s, want %s: %w", at, o.base+path, err)
		}
		return fmt.Errorf("after signing in the browser is at %s, want %s", at, o.base+path)
	})
	return testenv.Eval[string](t, b, `document.querySelector("main").innerText`)
}

// visitor is an HTTP client of the UI and the issuer that keeps cookies and presents no client
// certificate, as a browser.
func (o *oidcEnv) visitor(t *testing.T) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(o.mtls.CAPEM)
	pool.AppendCertsFromPEM(o.issuer.MTLS.CAPEM)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// fetch opens u with c and returns the status, the body and the final address.
func fetch(t *testing.T, c *http.Client, u string, headers ...string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Request.URL.String()
}

// session is the session cookie c holds for the UI, or "".
func (o *oidcEnv) session(c *http.Client) string {
	u, _ := url.Parse(o.base + "/")
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == access.SessionCookieName {
			return ck.Value
		}
	}
	return ""
}

func TestOIDCTenantSignsInAndSeesOnlyItsSites(t *testing.T) {
	o := startOIDC(t, false, func(io *servers.OIDCIssuerOptions) { io.AskToContinue = true })
	a := o.c.Tenant(t, "ui-oidc-a", nil)
	other := o.c.Tenant(t, "ui-oidc-b", nil)
	o.site(t, a.Namespace, "shop", map[string]string{"home": `{"title":"shop"}`})
	o.site(t, other.Namespace, "hidden-site", map[string]string{"home": `{"title":"hidden"}`})
	o.issuer.SignIn(servers.OIDCUser{Email: a.Name, Groups: []string{"sites"}})
	b := o.browser(t)

	// The site's address sends the browser through the issuer's sign-in page and back to the
	// site.
	own := "/namespaces/" + a.Namespace + "/decofiles/shop"
	if text := o.signIn(t, b, own); !strings.Contains(text, "From source to pods") {
		t.Fatalf("own site after signing in:\n%s", text)
	}
	if who := testenv.Eval[string](t, b, `document.querySelector(".who").innerText`); who != a.Name {
		t.Errorf("signed in as %q, want %q", who, a.Name)
	}
	if o.issuer.Issued() != 1 {
		t.Errorf("%d ID tokens issued, want 1", o.issuer.Issued())
	}
	cookies, err := chromedp.Call(b.Ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{o.base + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	var session *network.Cookie
	for _, c := range cookies.Cookies {
		if c.Name == access.SessionCookieName {
			session = c
		}
		if strings.HasPrefix(c.Name, "siteops-ui-login-") {
			t.Errorf("the sign-in cookie %s outlived the sign-in", c.Name)
		}
	}
	if session == nil || !session.HTTPOnly || !session.Secure || session.SameSite != network.CookieSameSiteLax || strings.Contains(session.Value, a.Name) {
		t.Errorf("session cookie %+v: want HttpOnly, Secure, SameSite=Lax, the person sealed", session)
	}
	b.Screenshot(t, "site-oidc-tenant")

	status, text := page(t, b, o.base, "/")
	if status != http.StatusOK || !strings.Contains(text, "decofile/"+a.Namespace+"/shop") || strings.Contains(text, "hidden-site") {
		t.Errorf("overview: HTTP %d, want the tenant's own site only:\n%s", status, text)
	}
	for _, path := range []string{"/namespaces/" + other.Namespace + "/decofiles/hidden-site", "/namespaces/" + other.Namespace} {
		status, text = page(t, b, o.base, path)
		if status != http.StatusForbidden || strings.Contains(text, "hidden") {
			t.Errorf("%s: HTTP %d, want 403 showing nothing of it:\n%s", path, status, text)
		}
	}
	if o.issuer.Issued() != 1 {
		t.Errorf("%d ID tokens issued for one sign-in", o.issuer.Issued())
	}
	for _, p := range b.Problems() {
		if !strings.Contains(p, "status of 403") {
			t.Errorf("the pages reported an error other than the refusals: %s", p)
		}
	}

	// Groups reach the API server with their prefix: oidc:platform may view the other
	// namespace.
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: other.Namespace, Name: "oidc-platform-view"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "oidc:platform"}}}
	if err := o.c.Client.Create(t.Context(), rb); err != nil {
		t.Fatal(err)
	}
	o.issuer.SignIn(servers.OIDCUser{Email: "pat@example.com", Groups: []string{"platform"}})
	pat := o.browser(t)
	if text := o.signIn(t, pat, "/namespaces/"+other.Namespace); !strings.Contains(text, "hidden-site") {
		t.Errorf("pat, in oidc:platform, does not see the other namespace's site:\n%s", text)
	}
	status, text = page(t, pat, o.base, "/namespaces/"+other.Namespace+"/decofiles/hidden-site")
	if status != http.StatusOK || !strings.Contains(text, "From source to pods") {
		t.Errorf("pat, in oidc:platform: HTTP %d for the other namespace's site:\n%s", status, text)
	}
	pat.Screenshot(t, "site-oidc-group")
}

func TestOIDCRefusesATokenForAnotherAudience(t *testing.T) {
	o := startOIDC(t, false)
	tenant := o.c.Tenant(t, "ui-oidc-aud", nil)
	o.site(t, tenant.Namespace, "shop", map[string]string{"home": `{"title":"shop"}`})
	o.issuer.SignIn(servers.OIDCUser{Email: tenant.Name})
	o.issuer.SetFault(&servers.OIDCFault{Audience: "another-client"})
	c := o.visitor(t)
	path := "/namespaces/" + tenant.Namespace + "/decofiles/shop"
	status, body, at := fetch(t, c, o.base+path)
	if status != http.StatusUnauthorized || !strings.Contains(body, "not valid for this UI") || !strings.Contains(at, "/auth/callback") {
		t.Errorf("a token for another client: HTTP %d at %s, want 401 at the callback:\n%s", status, at, body)
	}
	if strings.Contains(body, "shop") || strings.Contains(body, "eyJ") || o.session(c) != "" {
		t.Errorf("the refusal shows the site or a token, or signed in (session %q):\n%s", o.session(c), body)
	}
	if status, _, at := fetch(t, c, o.base+path); status == http.StatusOK && !strings.Contains(at, "/auth/") {
		t.Errorf("after the refused sign-in the site answers HTTP %d at %s", status, at)
	}

	// The same sign-in with a token for this UI goes through.
	o.issuer.SetFault(nil)
	if status, body, _ := fetch(t, c, o.base+path); status != http.StatusOK || !strings.Contains(body, "From source to pods") {
		t.Errorf("a good token: HTTP %d:\n%s", status, body)
	}
}

func TestOIDCStateCannotBeForgedOrReplayed(t *testing.T) {
	o := startOIDC(t, false)
	tenant := o.c.Tenant(t, "ui-oidc-state", nil)
	o.issuer.SignIn(servers.OIDCUser{Email: tenant.Name})
	c := o.visitor(t)
	// Stop at the callback: its address (code and state) and this browser's sign-in cookie.
	var callback *url.URL
	c.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		if req.URL.Path == "/auth/callback" {
			callback = req.URL
			return http.ErrUseLastResponse
		}
		return nil
	}
	fetch(t, c, o.base+"/")
	c.CheckRedirect = nil
	if callback == nil {
		t.Fatal("the sign-in never came back to /auth/callback")
	}
	var loginCookie *http.Cookie
	for _, ck := range c.Jar.Cookies(callback) {
		if strings.HasPrefix(ck.Name, "siteops-ui-login-") {
			loginCookie = ck
		}
	}
	if loginCookie == nil {
		t.Fatal("no sign-in cookie for /auth/callback")
	}
	refused := func(what string, cl *http.Client, u string, headers ...string) {
		t.Helper()
		status, body, _ := fetch(t, cl, u, headers...)
		if status < 400 || strings.Contains(body, tenant.Name) {
			t.Errorf("%s: HTTP %d, want it refused:\n%s", what, status, body)
		}
	}

	// Another browser, which did not start this sign-in, cannot finish it.
	stranger := o.visitor(t)
	refused("the callback in another browser", stranger, callback.String())
	// A forged state: unknown, or another sign-in's cookie under it.
	forged := *callback
	q := forged.Query()
	q.Set("state", strings.Repeat("A", 43))
	forged.RawQuery = q.Encode()
	refused("a forged state", c, forged.String())
	refused("a forged state with the real sign-in cookie", stranger, forged.String(), "Cookie", strings.Replace(loginCookie.String(), loginCookie.Name, "siteops-ui-login-AAAAAAAAAAAAAAAA", 1))
	if o.session(c) != "" || o.session(stranger) != "" {
		t.Fatal("a refused callback signed someone in")
	}

	// This browser finishes it.
	if status, body, _ := fetch(t, c, callback.String()); status != http.StatusOK || o.session(c) == "" {
		t.Fatalf("the real callback: HTTP %d, session %v:\n%s", status, o.session(c) != "", body)
	}
	// Replayed: the sign-in cookie is spent; kept by someone who copied it, the issuer takes
	// the code only once.
	replay := o.visitor(t)
	refused("the callback again", replay, callback.String())
	refused("the callback again with the copied sign-in cookie", replay, callback.String(), "Cookie", loginCookie.Name+"="+loginCookie.Value)
	if o.session(replay) != "" {
		t.Error("a replayed callback signed someone in")
	}
	if o.issuer.Issued() != 1 {
		t.Errorf("%d ID tokens issued, want 1", o.issuer.Issued())
	}
}

func TestOIDCForgedCookieIsRefused(t *testing.T) {
	o := startOIDC(t, false)
	tenant := o.c.Tenant(t, "ui-oidc-cookie", nil)
	o.issuer.SignIn(servers.OIDCUser{Email: tenant.Name})
	c := o.visitor(t)
	if status, body, _ := fetch(t, c, o.base+"/"); status != http.StatusOK || !strings.Contains(body, tenant.Name) {
		t.Fatalf("sign-in: HTTP %d:\n%s", status, body)
	}
	good := o.session(c)
	raw, err := base64.RawURLEncoding.DecodeString(good)
	if err != nil {
		t.Fatal(err)
	}
	flipped := []byte(string(raw))
	flipped[len(flipped)/2] ^= 0x20
	clear, _ := json.Marshal(map[string]any{"u": "admin", "g": []string{"system:masters"}, "e": 1 << 40})
	noRedirect := &http.Client{Transport: c.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for name, v := range map[string]string{
		"the real one":         good,
		"a byte changed":       base64.RawURLEncoding.EncodeToString(flipped),
		"written in the clear": base64.RawURLEncoding.EncodeToString(clear),
		"cut short":            good[:len(good)-4],
	} {
		// Not as the proxy either: with OIDC alone, identity headers count for nothing.
		status, body, _ := fetch(t, noRedirect, o.base+"/", "Cookie", access.SessionCookieName+"="+v, access.HeaderUser, "admin", access.HeaderGroup, "system:masters")
		switch {
		case name == "the real one" && (status != http.StatusOK || !strings.Contains(body, tenant.Name) || strings.Contains(body, "system:masters")):
			t.Errorf("%s: HTTP %d, want the tenant's overview:\n%s", name, status, body)
		case name != "the real one" && status != http.StatusSeeOther:
			t.Errorf("%s: HTTP %d, want a redirect to the sign-in:\n%s", name, status, body)
		}
	}
}

func TestOIDCBesideTheProxy(t *testing.T) {
	o := startOIDC(t, true)
	tenant := o.c.Tenant(t, "ui-oidc-both", nil)
	o.site(t, tenant.Namespace, "shop", map[string]string{"home": `{"title":"shop"}`})
	path := "/namespaces/" + tenant.Namespace + "/decofiles/shop"

	// The proxy's connections (its client certificate) still name the person in headers.
	if status, body, _ := fetch(t, http.DefaultClient, o.proxy(t, tenant.Name)+path); status != http.StatusOK || !strings.Contains(body, "From source to pods") {
		t.Errorf("through the proxy: HTTP %d:\n%s", status, body)
	}
	// Anyone else must sign in: the headers are not believed without the certificate.
	c := o.visitor(t)
	noRedirect := &http.Client{Transport: c.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if status, body, _ := fetch(t, noRedirect, o.base+path, access.HeaderUser, tenant.Name); status != http.StatusSeeOther {
		t.Errorf("headers without the proxy's certificate: HTTP %d, want a redirect to the sign-in:\n%s", status, body)
	}
	o.issuer.SignIn(servers.OIDCUser{Email: tenant.Name})
	if status, body, _ := fetch(t, c, o.base+path); status != http.StatusOK || !strings.Contains(body, "From source to pods") {
		t.Errorf("signed in with OIDC: HTTP %d:\n%s", status, body)
	}
	// A certificate of the proxy CA with another name is no proxy, and no session counts on
	// its connection.
	certPEM, keyPEM := o.mtls.Issue(t, "tenant-pod", x509.ExtKeyUsageClientAuth, nil)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	tc := o.mtls.ClientTLS(t)
	tc.Certificates = []tls.Certificate{cert}
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, CheckRedirect: noRedirect.CheckRedirect}
	if status, _, _ := fetch(t, withCert, o.base+path, "Cookie", access.SessionCookieName+"="+o.session(c), access.HeaderUser, tenant.Name); status == http.StatusOK {
		t.Errorf("another certificate of the proxy CA: HTTP %d, want it refused", status)
	}
}

func TestOptionsSayWhatToSet(t *testing.T) {
	oidc := ui.OIDCOptions{IssuerURL: "https://dex.example.com", ClientID: "siteops-ui", ClientSecretFile: "/s/client-secret",
		RedirectURL: "https://siteops.example.com/auth/callback", CookieSecretFile: "/s/cookie-secret"}
	base := ui.Options{BindAddress: ":9446", CertDir: "/certs"}
	with := func(f func(*ui.Options)) ui.Options {
		o := base
		o.OIDC = oidc
		f(&o)
		return o
	}
	for name, c := range map[string]struct {
		o    ui.Options
		want []string
	}{
		"the proxy alone":     {with(func(o *ui.Options) { o.ProxyCAFile, o.OIDC = "/ca.crt", ui.OIDCOptions{} }), nil},
		"OIDC alone":          {with(func(*ui.Options) {}), nil},
		"both":                {with(func(o *ui.Options) { o.ProxyCAFile = "/ca.crt" }), nil},
		"off":                 {ui.Options{}, nil},
		"neither":             {base, []string{"--ui-proxy-ca-file", "--ui-oidc-issuer-url"}},
		"no certificate":      {with(func(o *ui.Options) { o.CertDir = "" }), []string{"--ui-cert-dir"}},
		"no client":           {with(func(o *ui.Options) { o.OIDC.ClientID, o.OIDC.ClientSecretFile = "", "" }), []string{"--ui-oidc-client-id", "--ui-oidc-client-secret-file"}},
		"no cookie secret":    {with(func(o *ui.Options) { o.OIDC.CookieSecretFile = "" }), []string{"--ui-oidc-cookie-secret-file", "32 random bytes"}},
		"plain HTTP issuer":   {with(func(o *ui.Options) { o.OIDC.IssuerURL = "http://dex.example.com" }), []string{"--ui-oidc-issuer-url", "https://"}},
		"another callback":    {with(func(o *ui.Options) { o.OIDC.RedirectURL = "https://siteops.example.com/callback" }), []string{"--ui-oidc-redirect-url", "/auth/callback"}},
		"a client, no issuer": {with(func(o *ui.Options) { o.ProxyCAFile, o.OIDC.IssuerURL = "/ca.crt", "" }), []string{"--ui-oidc-client-id is set without --ui-oidc-issuer-url"}},
	} {
		err := c.o.Validate()
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to say %q", name, err, w)
			}
		}
	}
}
