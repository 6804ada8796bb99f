package access

import (
	"cmp"
	"context"
	"crypto/cipher"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Cookies of the OIDC sign-in.
const (
	// SessionCookieName holds the signed-in person, sealed.
	SessionCookieName = "siteops-ui-session"
	// loginCookiePrefix names a sign-in in progress; the rest of the name is the start of its
	// state, so sign-ins started in several tabs at once do not overwrite each other.
	loginCookiePrefix = "siteops-ui-login-"
)

// Bounds of the sign-in.
const (
	// MaxSession is the longest a session lasts, however long the ID token is valid.
	MaxSession = 12 * time.Hour
	// loginTimeout is how long a sign-in may take between /auth/login and /auth/callback.
	loginTimeout = 10 * time.Minute
	// maxSessionCookie bounds the session cookie (name, "=" and value): browsers keep at most
	// 4096 bytes a cookie, and refuse larger ones silently.
	maxSessionCookie = 3500
	// maxPendingLogins bounds the sign-ins in progress one browser keeps cookies for.
	maxPendingLogins = 4
	// discoveryRetry is the least time between two discoveries of an issuer that failed.
	discoveryRetry = 5 * time.Second
	// MinCookieSecret is the least length of the cookie secret, in bytes.
	MinCookieSecret = 32
)

// ErrGroupsTooLarge is returned when a person's session would not fit in a cookie.
var ErrGroupsTooLarge = errors.New("the groups claim is too large for a session cookie")

// OIDCConfig configures signing in with OpenID Connect (the authorization code flow with PKCE).
type OIDCConfig struct {
	// IssuerURL is the issuer, as kube-apiserver's --oidc-issuer-url names it.
	IssuerURL string
	// ClientID and ClientSecret are the UI's client at the issuer.
	ClientID, ClientSecret string
	// RedirectURL is the UI's https://<host>/auth/callback, registered at the issuer.
	RedirectURL string
	// UsernameClaim is the ID token claim that names the person (default "email").
	UsernameClaim string
	// GroupsClaim is the claim holding the person's groups, a string or a list (default
	// "groups").
	GroupsClaim string
	// UsernamePrefix is put before every user name, as kube-apiserver's --oidc-username-prefix:
	// empty prefixes claims other than email with "<issuer URL>#", and "-" prefixes nothing.
	UsernamePrefix string
	// GroupsPrefix is put before every group, as kube-apiserver's --oidc-groups-prefix.
	GroupsPrefix string
	// CookieSecret seals the UI's cookies (at least MinCookieSecret bytes). The keys are
	// derived from it; another secret makes every session void.
	CookieSecret []byte
	// HTTPClient reaches the issuer; nil uses the system's roots.
	HTTPClient *http.Client
	// Log receives sign-ins and their failures, never a token.
	Log *slog.Logger
}

// OIDC signs people in with an OpenID Connect issuer and keeps them signed in with a sealed
// session cookie: Authenticate reads the cookie, Handler serves /auth/login, /auth/callback and
// /auth/logout. The person is named as kube-apiserver's OIDC authenticator names them, so the
// UI's people are the API server's people.
//
// Both cookies are sealed with AES-256-GCM under keys derived from the cookie secret, not only
// signed: the sign-in cookie carries the PKCE verifier and the nonce, which must stay secret,
// and one mechanism serves both. The browser can neither read nor change them, and the cookie's
// name is authenticated with it, so one cookie cannot stand in for another.
type OIDC struct {
	cfg        OIDCConfig
	userPrefix string
	session    cipher.AEAD
	login      cipher.AEAD
	client     *http.Client
	log        *slog.Logger
	now        func() time.Time

	mu       sync.Mutex
	oauth    *oauth2.Config
	verifier *oidc.IDTokenVerifier
	tried    time.Time
	err      error
}

// NewOIDC checks cfg and prepares the sign-in; the issuer is discovered on first use, so the
// UI starts while the issuer is away.
func NewOIDC(cfg OIDCConfig) (*OIDC, error) {
	if err := ValidateIssuerURL(cfg.IssuerURL); err != nil {
		return nil, err
	}
	if cfg.ClientID == "" || cfg.ClientSecret == "" {
		return nil, errors.New("OIDC sign-in needs the client ID and its secret")
	}
	if err := ValidateRedirectURL(cfg.RedirectURL); err != nil {
		return nil, err
	}
	if len(cfg.CookieSecret) < MinCookieSecret {
		return nil, fmt.Errorf("the cookie secret has %d bytes, want at least %d random ones (head -c 32 /dev/urandom | base64)", len(cfg.CookieSecret), MinCookieSecret)
	}
	if cfg.UsernameClaim == "" {
		cfg.UsernameClaim = "email"
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	o := &OIDC{cfg: cfg, log: cfg.Log, now: time.Now}
	if o.log == nil {
		o.log = slog.Default()
	}
	switch {
	case cfg.UsernamePrefix == "-":
	case cfg.UsernamePrefix == "" && cfg.UsernameClaim != "email":
		o.userPrefix = cfg.IssuerURL + "#"
	default:
		o.userPrefix = cfg.UsernamePrefix
	}
	var err error
	if o.session, err = sealer(cfg.CookieSecret, "siteops-ui session cookie v1"); err != nil {
		return nil, err
	}
	if o.login, err = sealer(cfg.CookieSecret, "siteops-ui sign-in cookie v1"); err != nil {
		return nil, err
	}
	o.client = withheldBodies(cfg.HTTPClient)
	return o, nil
}

// ValidateIssuerURL says what is wrong with an issuer URL: it must be https, with no query or
// fragment, as kube-apiserver requires.
func ValidateIssuerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("the OIDC issuer URL %q must be https://host[/path], without query or fragment", s)
	}
	return nil
}

// ValidateRedirectURL says what is wrong with a redirect URL: the UI's own https address with
// the path /auth/callback, where Handler answers.
func ValidateRedirectURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.Path != "/auth/callback" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("the OIDC redirect URL %q must be the UI's https://<host>/auth/callback", s)
	}
	return nil
}

// Authenticate reads the person from the session cookie.
func (o *OIDC) Authenticate(r *http.Request) (Person, error) {
	c, err := r.Cookie(SessionCookieName)
	if err != nil {
		return Person{}, errors.Join(ErrUnauthenticated, errors.New("sign in at /auth/login"))
	}
	b, err := unseal(o.session, SessionCookieName, c.Value)
	var s session
	if err != nil || json.Unmarshal(b, &s) != nil || s.User == "" {
		return Person{}, errors.Join(ErrUnauthenticated, errors.New("the session cookie is not valid: sign in again at /auth/login"))
	}
	if !o.now().Before(time.Unix(s.Expires, 0)) {
		return Person{}, errors.Join(ErrUnauthenticated, errors.New("the session has ended: sign in again at /auth/login"))
	}
	p := Person{User: s.User, Groups: []string{"system:authenticated"}}
	for _, g := range s.Groups {
		if !slices.Contains(p.Groups, g) {
			p.Groups = append(p.Groups, g)
		}
	}
	return p, nil
}

// loginState is what the sign-in cookie holds between /auth/login and /auth/callback.
type loginState struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Next     string `json:"x"`
	Expires  int64  `json:"e"`
}

// loginCookieName is the sign-in cookie of state (43 characters, base64 of 32 random bytes).
func loginCookieName(state string) string { return loginCookiePrefix + state[:16] }

// Handler serves the sign-in under /auth/.
func (o *OIDC) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /auth/login", o.signIn)
	mux.HandleFunc("GET /auth/callback", o.callback)
	mux.HandleFunc("GET /auth/logout", o.signOutPage)
	mux.HandleFunc("POST /auth/logout", o.signOut)
	return mux
}

// SafeNext returns next when it is a path on this server ("/…", not "//…", no backslash and
// no control character, which browsers would read as another host), and "/" otherwise.
func SafeNext(next string) string {
	if next == "" || next[0] != '/' || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/auth/") {
		return "/"
	}
	for _, c := range next {
		if c == '\\' || c < 0x20 || c == 0x7f {
			return "/"
		}
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "/"
	}
	return next
}

// signIn sends the browser to the issuer with a fresh state, nonce and PKCE verifier, kept in a
// sealed cookie until the callback.
func (o *OIDC) signIn(w http.ResponseWriter, r *http.Request) {
	oc, _, err := o.discover(r.Context())
	if err != nil {
		o.log.Error("OIDC sign-in: the issuer cannot be discovered", "issuer", o.cfg.IssuerURL, "err", err)
		o.page(w, http.StatusBadGateway, "The identity provider cannot be reached",
			"The identity provider at "+o.cfg.IssuerURL+" did not answer as an OpenID Connect issuer. Try again shortly; if it persists, the UI's log says why.")
		return
	}
	ls := loginState{State: random(32), Nonce: random(32), Verifier: oauth2.GenerateVerifier(),
		Next: SafeNext(r.URL.Query().Get("next")), Expires: o.now().Add(loginTimeout).Unix()}
	payload, err := json.Marshal(ls)
	if err != nil {
		o.page(w, http.StatusInternalServerError, "Cannot sign in", "The sign-in could not be prepared.")
		return
	}
	o.prunePending(w, r)
	http.SetCookie(w, &http.Cookie{Name: loginCookieName(ls.State), Value: seal(o.login, loginCookieName(ls.State), payload),
		Path: "/auth/callback", MaxAge: int(loginTimeout.Seconds()), HttpOnly: true, Secure: true,
		// The issuer sends the browser back from another site: a Strict cookie would stay
		// behind, Lax comes along on that top-level GET.
		SameSite: http.SameSiteLaxMode})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, oc.AuthCodeURL(ls.State, oidc.Nonce(ls.Nonce), oauth2.S256ChallengeOption(ls.Verifier)), http.StatusSeeOther)
}

// prunePending drops the oldest sign-in cookies of this browser beyond maxPendingLogins-1, and
// unreadable or expired ones, so abandoned sign-ins do not pile up.
func (o *OIDC) prunePending(w http.ResponseWriter, r *http.Request) {
	type pending struct {
		name    string
		expires int64
	}
	var keep []pending
	for _, c := range r.Cookies() {
		if !strings.HasPrefix(c.Name, loginCookiePrefix) {
			continue
		}
		var ls loginState
		b, err := unseal(o.login, c.Name, c.Value)
		if err == nil && json.Unmarshal(b, &ls) == nil && o.now().Unix() < ls.Expires {
			keep = append(keep, pending{c.Name, ls.Expires})
			continue
		}
		clearCookie(w, c.Name, "/auth/callback")
	}
	slices.SortFunc(keep, func(a, b pending) int { return cmp.Compare(a.expires, b.expires) })
	for len(keep) > maxPendingLogins-1 {
		clearCookie(w, keep[0].name, "/auth/callback")
		keep = keep[1:]
	}
}

func clearCookie(w http.ResponseWriter, name, path string) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: path, MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
}

// errorCode is the form of an OAuth error code worth repeating on a page.
var errorCode = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// staleSignIn is the answer to a callback whose sign-in this browser does not hold.
const staleSignIn = "This sign-in was not started in this browser, was already used, or took longer than 10 minutes. Sign in again."

// callback finishes a sign-in: the state must be the one this browser's sign-in cookie holds,
// the code is exchanged with the PKCE verifier, and the ID token must be the issuer's, for this
// client, unexpired and carry the sign-in's nonce. Then the session cookie is set.
func (o *OIDC) callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		if !errorCode.MatchString(e) {
			e = "unreadable"
		}
		o.log.Info("OIDC sign-in refused by the issuer", "error", e)
		o.page(w, http.StatusForbidden, "The identity provider refused the sign-in", "The identity provider answered with the error "+e+".")
		return
	}
	state, code := q.Get("state"), q.Get("code")
	if len(state) != 43 || code == "" {
		o.page(w, http.StatusBadRequest, "Not a sign-in", "This address answers the identity provider only. "+staleSignIn)
		return
	}
	c, err := r.Cookie(loginCookieName(state))
	if err != nil {
		o.page(w, http.StatusBadRequest, "Sign-in not recognised", staleSignIn)
		return
	}
	// A state is good once.
	clearCookie(w, c.Name, "/auth/callback")
	var ls loginState
	b, err := unseal(o.login, c.Name, c.Value)
	if err != nil || json.Unmarshal(b, &ls) != nil || subtle.ConstantTimeCompare([]byte(ls.State), []byte(state)) != 1 || o.now().Unix() >= ls.Expires {
		o.page(w, http.StatusBadRequest, "Sign-in not recognised", staleSignIn)
		return
	}
	oc, verifier, err := o.discover(r.Context())
	if err != nil {
		o.log.Error("OIDC sign-in: the issuer cannot be discovered", "issuer", o.cfg.IssuerURL, "err", err)
		o.page(w, http.StatusBadGateway, "The identity provider cannot be reached", "Try again shortly.")
		return
	}
	ctx, cancel := context.WithTimeout(oidc.ClientContext(r.Context(), o.client), 30*time.Second)
	defer cancel()
	tok, err := oc.Exchange(ctx, code, oauth2.VerifierOption(ls.Verifier))
	if err != nil {
		o.log.Info("OIDC sign-in: the issuer did not take the code", "err", summary(err))
		o.page(w, http.StatusBadGateway, "The identity provider did not complete the sign-in",
			"It did not take the sign-in's code ("+summary(err)+"). Sign in again.")
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		o.log.Info("OIDC sign-in: the issuer sent no ID token")
		o.page(w, http.StatusBadGateway, "The identity provider sent no ID token", "Check that the client may use the openid scope.")
		return
	}
	idt, err := verifier.Verify(ctx, raw)
	if err != nil {
		o.log.Info("OIDC sign-in: the ID token is not valid for this UI", "err", summary(err))
		o.page(w, http.StatusUnauthorized, "The sign-in is not valid for this UI",
			"The identity provider's ID token was refused: its issuer, audience, signature or expiry is not this UI's. Sign in again; if it persists, the UI's log says why.")
		return
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(ls.Nonce)) != 1 {
		o.log.Info("OIDC sign-in: the ID token carries another sign-in's nonce")
		o.page(w, http.StatusUnauthorized, "The sign-in is not valid for this UI", "The ID token belongs to another sign-in. Sign in again.")
		return
	}
	p, err := o.person(idt)
	if err != nil {
		o.log.Info("OIDC sign-in refused", "err", err)
		o.page(w, http.StatusForbidden, "Cannot sign you in", err.Error())
		return
	}
	expires := idt.Expiry
	if limit := o.now().Add(MaxSession); expires.After(limit) {
		expires = limit
	}
	sc, err := o.sessionCookie(p, expires)
	if errors.Is(err, ErrGroupsTooLarge) {
		o.log.Info("OIDC sign-in refused", "user", p.User, "err", err)
		o.page(w, http.StatusForbidden, "Your groups claim is too large",
			fmt.Sprintf("The identity provider's %q claim names %d groups for you, more than a browser cookie can hold (%s). Ask its administrators to send this client fewer groups (a filter on the groups claim), or sign in through the authenticating proxy.",
				o.cfg.GroupsClaim, len(p.Groups), err))
		return
	}
	if err != nil {
		o.page(w, http.StatusInternalServerError, "Cannot sign in", "The session could not be made.")
		return
	}
	http.SetCookie(w, sc)
	o.log.Info("signed in with OIDC", "user", p.User, "groups", len(p.Groups), "until", expires)
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, ls.Next, http.StatusSeeOther)
}

// person names the ID token's holder as kube-apiserver would: the username claim with the
// username prefix, the groups claim with the groups prefix.
func (o *OIDC) person(idt *oidc.IDToken) (Person, error) {
	var claims map[string]json.RawMessage
	if err := idt.Claims(&claims); err != nil {
		return Person{}, fmt.Errorf("the ID token's claims cannot be read: %w", err)
	}
	var user string
	if err := json.Unmarshal(claims[o.cfg.UsernameClaim], &user); err != nil || user == "" {
		return Person{}, fmt.Errorf("the ID token has no %q claim naming you (the UI's username claim)", o.cfg.UsernameClaim)
	}
	if o.cfg.UsernameClaim == "email" {
		if v, ok := claims["email_verified"]; ok {
			var verified bool
			if json.Unmarshal(v, &verified) != nil {
				// Some issuers send it as a string.
				var s string
				verified = json.Unmarshal(v, &s) == nil && s == "true"
			}
			if !verified {
				return Person{}, fmt.Errorf("the identity provider has not verified the email address %s", user)
			}
		}
	}
	p := Person{User: o.userPrefix + user}
	if raw, ok := claims[o.cfg.GroupsClaim]; ok && string(raw) != "null" {
		var groups []string
		var one string
		switch {
		case json.Unmarshal(raw, &groups) == nil:
		case json.Unmarshal(raw, &one) == nil:
			groups = []string{one}
		default:
			return Person{}, fmt.Errorf("the ID token's %q claim is neither a string nor a list of strings", o.cfg.GroupsClaim)
		}
		for _, g := range groups {
			if g != "" && !slices.Contains(p.Groups, o.cfg.GroupsPrefix+g) {
				p.Groups = append(p.Groups, o.cfg.GroupsPrefix+g)
			}
		}
	}
	return p, nil
}

// signOutPage asks for a POST, which cross-site pages cannot send (the server's cross-origin
// protection), so no other site signs people out.
func (o *OIDC) signOutPage(w http.ResponseWriter, _ *http.Request) {
	o.render(w, http.StatusOK, pageData{Title: "Sign out", Message: "Sign out of the siteops UI in this browser.", SignOut: true})
}

// signOut ends the session in this browser. The identity provider's own session is its own: a
// new sign-in may pass through without a question.
func (o *OIDC) signOut(w http.ResponseWriter, _ *http.Request) {
	clearCookie(w, SessionCookieName, "/")
	o.page(w, http.StatusOK, "Signed out", "You are signed out of the siteops UI in this browser.")
}

// Discover reads the issuer's discovery document now, for a start-up check; sign-ins retry
// it while it fails.
func (o *OIDC) Discover(ctx context.Context) error {
	_, _, err := o.discover(ctx)
	return err
}

// discover returns the OAuth2 client and the ID token verifier of the issuer, reading its
// discovery document once it answers; a failure is retried at most every discoveryRetry.
func (o *OIDC) discover(ctx context.Context) (*oauth2.Config, *oidc.IDTokenVerifier, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.oauth != nil {
		return o.oauth, o.verifier, nil
	}
	if o.err != nil && o.now().Sub(o.tried) < discoveryRetry {
		return nil, nil, o.err
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	o.tried = o.now()
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, o.client), o.cfg.IssuerURL)
	if err != nil {
		o.err = fmt.Errorf("discover the OIDC issuer %s: %s", o.cfg.IssuerURL, summary(err))
		return nil, nil, o.err
	}
	var supported struct {
		Scopes []string `json:"scopes_supported"`
	}
	_ = p.Claims(&supported)
	scopes := []string{oidc.ScopeOpenID}
	for _, s := range []string{"email", "profile", "groups"} {
		// Without a list, ask for email only: some issuers refuse a scope they do not know.
		if slices.Contains(supported.Scopes, s) || len(supported.Scopes) == 0 && s == "email" {
			scopes = append(scopes, s)
		}
	}
	o.oauth = &oauth2.Config{ClientID: o.cfg.ClientID, ClientSecret: o.cfg.ClientSecret, RedirectURL: o.cfg.RedirectURL, Endpoint: p.Endpoint(), Scopes: scopes}
	o.verifier = p.VerifierContext(oidc.ClientContext(context.Background(), o.client), &oidc.Config{ClientID: o.cfg.ClientID})
	o.err = nil
	return o.oauth, o.verifier, nil
}

// pageData is what a sign-in page shows.
type pageData struct {
	Title, Message string
	SignOut        bool
}

var authPage = template.Must(template.New("auth").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} · siteops</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/static/app.css">
</head>
<body>
<header class="top"><a class="brand" href="/">siteops</a></header>
<main id="main">
<h1>{{.Title}}</h1>
<p>{{.Message}}</p>
{{if .SignOut}}<form method="post" action="/auth/logout"><button type="submit">Sign out</button></form>{{else}}<p><a href="/auth/login">Sign in</a></p>{{end}}
</main>
</body>
</html>
`))

// page answers with a sign-in page saying what happened.
func (o *OIDC) page(w http.ResponseWriter, code int, title, msg string) {
	o.render(w, code, pageData{Title: title, Message: msg})
}

func (o *OIDC) render(w http.ResponseWriter, code int, d pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = authPage.Execute(w, d)
}
