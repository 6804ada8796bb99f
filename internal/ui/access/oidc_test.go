package access

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/servers"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// testOIDC is an OIDC for an issuer that is never asked (cookies only).
func testOIDC(t *testing.T, secret []byte) *OIDC {
	t.Helper()
	o, err := NewOIDC(OIDCConfig{IssuerURL: "https://issuer.invalid", ClientID: "ui", ClientSecret: "s", RedirectURL: "https://ui.invalid/auth/callback", CookieSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func withCookie(c *http.Cookie) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(c)
	return r
}

func TestSessionCookieIsSealed(t *testing.T) {
	o := testOIDC(t, testSecret)
	c, err := o.sessionCookie(Person{User: "jane@example.com", Groups: []string{"oidc:dev"}}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteLaxMode || c.Path != "/" {
		t.Errorf("session cookie %+v: want HttpOnly, Secure, SameSite=Lax, Path=/", c)
	}
	if strings.Contains(c.Value, "jane") || strings.Contains(c.String(), "oidc:dev") {
		t.Errorf("the cookie shows the person: %s", c.Value)
	}
	p, err := o.Authenticate(withCookie(c))
	if err != nil || p.User != "jane@example.com" || !slices.Equal(p.Groups, []string{"system:authenticated", "oidc:dev"}) {
		t.Fatalf("the cookie reads as %+v, %v", p, err)
	}

	// Any changed bit (nonce, ciphertext, tag) is refused.
	raw, _ := base64.RawURLEncoding.DecodeString(c.Value)
	for _, i := range []int{0, 11, 12, len(raw) / 2, len(raw) - 1} {
		forged := slices.Clone(raw)
		forged[i] ^= 1
		f := *c
		f.Value = base64.RawURLEncoding.EncodeToString(forged)
		if p, err := o.Authenticate(withCookie(&f)); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("byte %d changed: %+v, %v; want ErrUnauthenticated", i, p, err)
		}
	}
	// Cut short, or a cookie written in the clear.
	clear, _ := json.Marshal(session{User: "admin", Groups: []string{"system:masters"}, Expires: time.Now().Add(time.Hour).Unix()})
	for name, v := range map[string]string{"truncated": c.Value[:20], "clear": base64.RawURLEncoding.EncodeToString(clear), "empty": ""} {
		if p, err := o.Authenticate(withCookie(&http.Cookie{Name: SessionCookieName, Value: v})); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s cookie: %+v, %v; want ErrUnauthenticated", name, p, err)
		}
	}
	// Sealed under another secret (another installation), or for another cookie of this one
	// (a sign-in cookie holds what its sender chose: the next path).
	other := testOIDC(t, []byte("another secret, thirty-two bytes long"))
	if _, err := other.Authenticate(withCookie(c)); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("a cookie of another cookie secret: %v, want ErrUnauthenticated", err)
	}
	for name, v := range map[string]string{
		"sign-in key":  seal(o.login, SessionCookieName, clear),
		"another name": seal(o.session, loginCookiePrefix+"x", clear),
	} {
		if p, err := o.Authenticate(withCookie(&http.Cookie{Name: SessionCookieName, Value: v})); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("sealed with the %s: %+v, %v; want ErrUnauthenticated", name, p, err)
		}
	}
}

func TestSessionEnds(t *testing.T) {
	o := testOIDC(t, testSecret)
	now := time.Unix(1_000_000, 0)
	o.now = func() time.Time { return now }
	c, err := o.sessionCookie(Person{User: "jane"}, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(59 * time.Minute)
	if _, err := o.Authenticate(withCookie(c)); err != nil {
		t.Fatalf("a minute before the end: %v", err)
	}
	now = now.Add(time.Minute)
	if _, err := o.Authenticate(withCookie(c)); !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "ended") {
		t.Errorf("at the end: %v, want the session ended", err)
	}
}

func TestSessionCookieSizeIsBounded(t *testing.T) {
	o := testOIDC(t, testSecret)
	groups := func(n int) []string {
		g := make([]string, n)
		for i := range g {
			g[i] = fmt.Sprintf("oidc:team-%03d-sites", i)
		}
		return g
	}
	c, err := o.sessionCookie(Person{User: "jane@example.com", Groups: groups(40)}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatalf("40 groups: %v", err)
	}
	if n := len(c.Name) + 1 + len(c.Value); n > maxSessionCookie {
		t.Errorf("a %d-byte cookie was made, above the bound %d", n, maxSessionCookie)
	}
	if _, err := o.sessionCookie(Person{User: "jane@example.com", Groups: groups(200)}, time.Now().Add(time.Hour)); !errors.Is(err, ErrGroupsTooLarge) {
		t.Errorf("200 groups: %v, want ErrGroupsTooLarge", err)
	}
}

func TestSafeNextKeepsLocalPathsOnly(t *testing.T) {
	for next, want := range map[string]string{
		"/namespaces/shop/decofiles/site?tab=rollout": "/namespaces/shop/decofiles/site?tab=rollout",
		"/":                      "/",
		"":                       "/",
		"//evil.example/":        "/",
		"/\\evil.example/":       "/",
		"/\t/evil.example/":      "/",
		"/%0d%0aSet-Cookie:x=y":  "/%0d%0aSet-Cookie:x=y", // still escaped: a path, not a header
		"/a\r\nSet-Cookie: x=y":  "/",
		"https://evil.example/":  "/",
		"javascript:alert(1)":    "/",
		"evil.example":           "/",
		"/auth/login?next=/":     "/",
		"/mirror#commits":        "/mirror#commits",
		"/ /evil.example":        "/ /evil.example",
		"\\\\evil.example":       "/",
		"/namespaces/a/../../..": "/namespaces/a/../../..",
	} {
		if got := SafeNext(next); got != want {
			t.Errorf("SafeNext(%q) = %q, want %q", next, got, want)
		}
	}
}

// flow is a UI over HTTPS that serves the sign-in and, at every other path, the person, and an
// issuer over HTTPS for it; the client trusts both and keeps cookies.
type flow struct {
	issuer *servers.OIDCIssuer
	oidc   *OIDC
	ui     *httptest.Server
	client *http.Client
	// log is what the sign-in logged.
	log *syncBuffer

	mu      sync.Mutex
	session *http.Cookie
}

func newFlow(t *testing.T, cfg OIDCConfig, o servers.OIDCIssuerOptions) *flow {
	t.Helper()
	m, err := servers.NewMTLS(t.TempDir(), "client", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	o.CertDir, o.ClientID, o.ClientSecret = m.CertDir, "siteops-ui", "issuer-secret"
	iss, err := servers.StartOIDCIssuer(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = iss.Stop() })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(m.CAPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	f := &flow{issuer: iss, log: &syncBuffer{}}

	mux := http.NewServeMux()
	f.ui = httptest.NewUnstartedServer(mux)
	cert, err := tls.LoadX509KeyPair(filepath.Join(m.CertDir, "tls.crt"), filepath.Join(m.CertDir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	f.ui.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	f.ui.StartTLS()
	t.Cleanup(f.ui.Close)

	cfg.IssuerURL, cfg.ClientID, cfg.RedirectURL = iss.URL, o.ClientID, f.ui.URL+"/auth/callback"
	if cfg.ClientSecret == "" {
		cfg.ClientSecret = o.ClientSecret
	}
	cfg.CookieSecret, cfg.HTTPClient = testSecret, &http.Client{Transport: tr}
	cfg.Log = slog.New(slog.NewTextHandler(f.log, nil))
	if f.oidc, err = NewOIDC(cfg); err != nil {
		t.Fatal(err)
	}
	iss.AllowRedirect(cfg.RedirectURL)
	mux.Handle("/auth/", f.oidc.Handler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		p, err := f.oidc.Authenticate(r)
		if err != nil {
			http.Redirect(w, r, "/auth/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		fmt.Fprintf(w, "%s %s %s", r.URL.RequestURI(), p.User, strings.Join(p.Groups, ","))
	})
	jar, _ := cookiejar.New(nil)
	f.client = &http.Client{Jar: jar, Transport: recordSession{tr, f}}
	return f
}

// recordSession keeps the session cookie the UI sets, attributes and all.
type recordSession struct {
	next http.RoundTripper
	f    *flow
}

func (r recordSession) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := r.next.RoundTrip(req)
	if err == nil {
		for _, c := range res.Cookies() {
			if c.Name == SessionCookieName && c.MaxAge >= 0 {
				r.f.mu.Lock()
				r.f.session = c
				r.f.mu.Unlock()
			}
		}
	}
	return res, err
}

// open gets path, following redirects, and returns the last status and body.
func (f *flow) open(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := f.client.Get(f.ui.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestOIDCSignIn(t *testing.T) {
	jane := servers.OIDCUser{Subject: "u-123", Email: "jane@example.com", Groups: []string{"dev", "sites"}}
	t.Run("email and prefixed groups, back to the page", func(t *testing.T) {
		f := newFlow(t, OIDCConfig{GroupsPrefix: "oidc:"}, servers.OIDCIssuerOptions{TokenLifetime: 48 * time.Hour})
		f.issuer.SignIn(jane)
		start := time.Now()
		code, body := f.open(t, "/namespaces/shop?tab=events")
		if want := "/namespaces/shop?tab=events jane@example.com system:authenticated,oidc:dev,oidc:sites"; code != http.StatusOK || body != want {
			t.Fatalf("HTTP %d %q, want %q", code, body, want)
		}
		s := f.session
		if s == nil || !s.HttpOnly || !s.Secure || s.SameSite != http.SameSiteLaxMode {
			t.Fatalf("session cookie %+v: want HttpOnly, Secure, SameSite=Lax", s)
		}
		if end := start.Add(MaxSession + time.Minute); s.Expires.After(end) {
			t.Errorf("a 48 h ID token gives a session until %s, want at most 12 h", s.Expires)
		}
		// Signed in: no second trip to the issuer.
		if code, body := f.open(t, "/mirror"); code != http.StatusOK || !strings.HasPrefix(body, "/mirror jane@example.com") || f.issuer.Issued() != 1 {
			t.Errorf("the next page: HTTP %d %q after %d ID tokens", code, body, f.issuer.Issued())
		}
		// Signing out ends the session.
		res, err := f.client.Post(f.ui.URL+"/auth/logout", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		f.session = nil
		f.open(t, "/")
		if f.issuer.Issued() != 2 {
			t.Errorf("after signing out, %d ID tokens issued; want a new sign-in", f.issuer.Issued())
		}
	})
	t.Run("the token's expiry ends the session", func(t *testing.T) {
		f := newFlow(t, OIDCConfig{}, servers.OIDCIssuerOptions{TokenLifetime: 30 * time.Minute})
		f.issuer.SignIn(jane)
		start := time.Now()
		f.open(t, "/")
		if s := f.session; s == nil || s.Expires.Before(start.Add(29*time.Minute)) || s.Expires.After(start.Add(31*time.Minute)) {
			t.Errorf("session cookie %+v: want it to end with the 30-minute ID token", s)
		}
	})
	for name, c := range map[string]struct {
		cfg  OIDCConfig
		want string
	}{
		"sub, issuer-prefixed as the API server does": {OIDCConfig{UsernameClaim: "sub"}, "#u-123 "},
		"sub without prefix":                          {OIDCConfig{UsernameClaim: "sub", UsernamePrefix: "-"}, " u-123 "},
		"email with a prefix":                         {OIDCConfig{UsernamePrefix: "oidc:"}, " oidc:jane@example.com "},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFlow(t, c.cfg, servers.OIDCIssuerOptions{})
			f.issuer.SignIn(jane)
			code, body := f.open(t, "/")
			if code != http.StatusOK || !strings.Contains(body, c.want) {
				t.Errorf("HTTP %d %q, want the user %q", code, body, c.want)
			}
			if strings.Contains(c.want, "#") && !strings.Contains(body, " "+f.issuer.URL+"#u-123 ") {
				t.Errorf("%q: want the user %s#u-123", body, f.issuer.URL)
			}
		})
	}
}

func TestOIDCSignInRefused(t *testing.T) {
	many := make([]string, 300)
	for i := range many {
		many[i] = fmt.Sprintf("team-%03d-of-a-large-directory", i)
	}
	for name, c := range map[string]struct {
		cfg   OIDCConfig
		user  *servers.OIDCUser
		fault *servers.OIDCFault
		code  int
		want  string
	}{
		"another audience":        {fault: &servers.OIDCFault{Audience: "another-client"}, code: http.StatusUnauthorized, want: "not valid for this UI"},
		"another issuer":          {fault: &servers.OIDCFault{Issuer: "https://evil.example"}, code: http.StatusUnauthorized, want: "not valid for this UI"},
		"expired":                 {fault: &servers.OIDCFault{Lifetime: -time.Minute}, code: http.StatusUnauthorized, want: "not valid for this UI"},
		"signed by another key":   {fault: &servers.OIDCFault{ForeignKey: true}, code: http.StatusUnauthorized, want: "not valid for this UI"},
		"another sign-in's nonce": {fault: &servers.OIDCFault{Nonce: "replayed"}, code: http.StatusUnauthorized, want: "another sign-in"},
		"too many groups":         {user: &servers.OIDCUser{Email: "jane@example.com", Groups: many}, code: http.StatusForbidden, want: "groups claim is too large"},
		"unverified email":        {user: &servers.OIDCUser{Email: "jane@example.com", Claims: map[string]any{"email_verified": false}}, code: http.StatusForbidden, want: "not verified"},
		"no username claim":       {cfg: OIDCConfig{UsernameClaim: "preferred_username"}, code: http.StatusForbidden, want: "preferred_username"},
		"groups of numbers":       {user: &servers.OIDCUser{Email: "jane@example.com", Claims: map[string]any{"groups": []int{1}}}, code: http.StatusForbidden, want: "neither a string nor a list"},
		"the issuer refuses":      {user: &servers.OIDCUser{}, code: http.StatusForbidden, want: "refused the sign-in"},
		// The token endpoint's answer is summarised: status and error code, never its body.
		"a wrong client secret": {cfg: OIDCConfig{ClientSecret: "wrong"}, code: http.StatusBadGateway, want: "HTTP 401 invalid_client"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFlow(t, c.cfg, servers.OIDCIssuerOptions{})
			switch {
			case c.user == nil:
				f.issuer.SignIn(servers.OIDCUser{Email: "jane@example.com"})
			case c.user.Email != "":
				f.issuer.SignIn(*c.user)
			}
			f.issuer.SetFault(c.fault)
			code, body := f.open(t, "/")
			if code != c.code || !strings.Contains(body, c.want) {
				t.Errorf("HTTP %d, want %d saying %q:\n%s", code, c.code, c.want, body)
			}
			if f.session != nil {
				t.Errorf("a session cookie was set (%d bytes)", len(f.session.Value))
			}
			if strings.Contains(body, "eyJ") || strings.Contains(body, "test issuer refused") {
				t.Errorf("the page shows a token or the issuer's response:\n%s", body)
			}
			if l := f.log.String(); strings.Contains(l, "eyJ") || strings.Contains(l, "test issuer refused") {
				t.Errorf("the log shows a token or the issuer's response:\n%s", l)
			}
		})
	}
}

// untilCallback starts a sign-in and stops at the callback, as a thief of its address would
// see it; the sign-in cookie stays in f's client.
func (f *flow) untilCallback(t *testing.T) *url.URL {
	t.Helper()
	var callback *url.URL
	f.client.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		if req.URL.Path == "/auth/callback" {
			callback = req.URL
			return http.ErrUseLastResponse
		}
		return nil
	}
	defer func() { f.client.CheckRedirect = nil }()
	f.open(t, "/")
	if callback == nil {
		t.Fatal("the sign-in never reached the callback")
	}
	return callback
}

// withState is callback with its state replaced.
func withState(callback *url.URL, state string) string {
	u := *callback
	q := u.Query()
	q.Set("state", state)
	u.RawQuery = q.Encode()
	return u.RequestURI()
}

func TestOIDCCallbackNeedsItsOwnSignIn(t *testing.T) {
	f := newFlow(t, OIDCConfig{}, servers.OIDCIssuerOptions{})
	f.issuer.SignIn(servers.OIDCUser{Email: "jane@example.com"})
	callback := f.untilCallback(t)

	// Another browser (no sign-in cookie) cannot use it.
	other := &http.Client{Transport: f.client.Transport}
	res, err := other.Get(callback.String())
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || f.session != nil {
		t.Errorf("the callback in another browser: HTTP %d, session set %v; want 400 and none", res.StatusCode, f.session != nil)
	}
	// This browser, with another state, neither.
	if code, _ := f.open(t, withState(callback, strings.Repeat("A", 43))); code != http.StatusBadRequest {
		t.Errorf("a forged state: HTTP %d, want 400", code)
	}
	// The real one once, then never again.
	if code, _ := f.open(t, callback.RequestURI()); code != http.StatusOK || f.session == nil {
		t.Fatalf("the real callback: HTTP %d; want a session", code)
	}
	f.session = nil
	if code, _ := f.open(t, callback.RequestURI()); code != http.StatusBadRequest || f.session != nil {
		t.Errorf("the callback again: HTTP %d, session set %v; want 400 and none", code, f.session != nil)
	}

	// A state that starts as the real one (the sign-in cookie's name) and then differs: the
	// whole state is compared.
	f.client.Jar, _ = cookiejar.New(nil)
	callback = f.untilCallback(t)
	state := callback.Query().Get("state")
	if code, _ := f.open(t, withState(callback, state[:16]+strings.Repeat("A", 27))); code != http.StatusBadRequest || f.session != nil {
		t.Errorf("a state with the real one's start: HTTP %d, session set %v; want 400 and none", code, f.session != nil)
	}
}

// syncBuffer is a log sink for the sign-in's handlers.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestIssuerResponsesAreNotQuoted(t *testing.T) {
	// An issuer that fails with a body worth hiding.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "internal error: id_token=eyJhbGciOiJSUzI1NiJ9.secret", http.StatusInternalServerError)
	}))
	defer srv.Close()
	o, err := NewOIDC(OIDCConfig{IssuerURL: srv.URL, ClientID: "ui", ClientSecret: "s", RedirectURL: "https://ui.invalid/auth/callback",
		CookieSecret: testSecret, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	err = o.Discover(t.Context())
	if err == nil || !strings.Contains(err.Error(), "500") || strings.Contains(err.Error(), "eyJ") {
		t.Errorf("discovery of a failing issuer: %v; want its status without its answer", err)
	}
}
