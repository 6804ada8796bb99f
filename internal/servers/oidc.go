package servers

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// OIDCIssuerOptions configures an OpenID Connect issuer.
type OIDCIssuerOptions struct {
	// Host to bind, and the host of the issuer URL; default 127.0.0.1. "localhost" makes the
	// issuer another site than a server on 127.0.0.1, as an identity provider is.
	Host string
	// CertDir, when set, holds tls.crt and tls.key: the issuer serves HTTPS with them, as an
	// issuer must. Empty serves plain HTTP.
	CertDir string
	// ClientID and ClientSecret are the one client the issuer knows. Required.
	ClientID, ClientSecret string
	// RedirectURLs are the client's registered redirect URLs (AllowRedirect adds more).
	RedirectURLs []string
	// TokenLifetime is how long ID tokens are valid; default an hour.
	TokenLifetime time.Duration
	// AskToContinue makes the authorization endpoint show a page whose Continue button signs
	// the user in (a form POST), as an identity provider's sign-in page does: the way back to
	// the client is then a navigation another site started, as in production. Without it the
	// endpoint redirects at once.
	AskToContinue bool
}

// OIDCUser is the person the issuer signs in.
type OIDCUser struct {
	// Subject is the "sub" claim; default the email address.
	Subject string
	// Email is the "email" claim, sent with "email_verified": true.
	Email string
	// Groups is the "groups" claim.
	Groups []string
	// Claims are more claims, or replace the ones above ("email_verified": false).
	Claims map[string]any
}

// OIDCFault is how the issuer's ID tokens go wrong, for tests of what a client refuses.
type OIDCFault struct {
	// Audience, when set, is the tokens' "aud" instead of the client ID.
	Audience string
	// Issuer, when set, is the tokens' "iss" instead of the issuer URL.
	Issuer string
	// Nonce, when set, is the tokens' "nonce" instead of the one the sign-in asked for.
	Nonce string
	// Lifetime, when not zero, replaces TokenLifetime; negative tokens are expired when issued.
	Lifetime time.Duration
	// ForeignKey signs the tokens with a key the issuer does not publish.
	ForeignKey bool
}

// OIDCIssuer is a small OpenID Connect issuer: discovery, its signing keys (JWKS), an
// authorization endpoint that signs in the user SignIn names at once (no form) and sends the
// browser back with a code, and a token endpoint that takes the code once, with the client's
// secret and the PKCE verifier, for an RS256 ID token carrying the sign-in's nonce.
type OIDCIssuer struct {
	// URL is the issuer URL (its "iss").
	URL string

	o       OIDCIssuerOptions
	server  *http.Server
	key     *rsa.PrivateKey
	foreign *rsa.PrivateKey

	mu        sync.Mutex
	user      *OIDCUser
	fault     *OIDCFault
	redirects []string
	codes     map[string]oidcGrant
	issued    int
}

// oidcGrant is what an authorization code stands for until it is redeemed.
type oidcGrant struct {
	user        OIDCUser
	redirect    string
	nonce       string
	challenge   string
	clientID    string
	notAfter    time.Time
	scopesAsked string
}

// The key ID of the published signing key.
const oidcKeyID = "siteops-test-1"

// StartOIDCIssuer starts an issuer on a free port of o.Host.
func StartOIDCIssuer(ctx context.Context, o OIDCIssuerOptions) (*OIDCIssuer, error) {
	if o.ClientID == "" || o.ClientSecret == "" {
		return nil, errors.New("the OIDC issuer needs a client ID and secret")
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.TokenLifetime == 0 {
		o.TokenLifetime = time.Hour
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	foreign, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort(o.Host, "0"))
	if err != nil {
		return nil, fmt.Errorf("listen for the OIDC issuer: %w", err)
	}
	scheme := "http"
	if o.CertDir != "" {
		scheme = "https"
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	i := &OIDCIssuer{URL: scheme + "://" + net.JoinHostPort(o.Host, port), o: o, key: key, foreign: foreign,
		redirects: slices.Clone(o.RedirectURLs), codes: map[string]oidcGrant{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", i.discovery)
	mux.HandleFunc("GET /keys", i.keys)
	mux.HandleFunc("GET /authorize", i.authorize)
	mux.HandleFunc("POST /authorize", i.authorize)
	mux.HandleFunc("POST /token", i.token)
	i.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if o.CertDir != "" {
			_ = i.server.ServeTLS(l, filepath.Join(o.CertDir, "tls.crt"), filepath.Join(o.CertDir, "tls.key"))
			return
		}
		_ = i.server.Serve(l)
	}()
	return i, nil
}

// SignIn makes the authorization endpoint sign in u from now on.
func (i *OIDCIssuer) SignIn(u OIDCUser) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.user = &u
}

// SetFault makes the ID tokens issued from now on go wrong as f says; nil issues good ones.
func (i *OIDCIssuer) SetFault(f *OIDCFault) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.fault = f
}

// AllowRedirect registers another redirect URL of the client.
func (i *OIDCIssuer) AllowRedirect(u string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.redirects = append(i.redirects, u)
}

// Issued is how many ID tokens the token endpoint gave out.
func (i *OIDCIssuer) Issued() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.issued
}

// Stop closes the server.
func (i *OIDCIssuer) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := i.server.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (i *OIDCIssuer) discovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                i.URL,
		"authorization_endpoint":                i.URL + "/authorize",
		"token_endpoint":                        i.URL + "/token",
		"jwks_uri":                              i.URL + "/keys",
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"scopes_supported":                      []string{"openid", "email", "profile", "groups"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post"},
		"grant_types_supported":                 []string{"authorization_code"},
		"code_challenge_methods_supported":      []string{"S256"},
		"claims_supported":                      []string{"iss", "sub", "aud", "exp", "iat", "nonce", "email", "email_verified", "groups"},
	})
}

func (i *OIDCIssuer) keys(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &i.key.PublicKey, KeyID: oidcKeyID, Algorithm: string(jose.RS256), Use: "sig"},
	}})
}

// authorize signs in the configured user and sends the browser back to the client with a code.
// Errors the client must not be redirected with (unknown client, unregistered redirect URL)
// are answered here, as an issuer does.
func (i *OIDCIssuer) authorize(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	q := r.Form
	i.mu.Lock()
	user, registered := i.user, slices.Contains(i.redirects, q.Get("redirect_uri"))
	i.mu.Unlock()
	if q.Get("client_id") != i.o.ClientID {
		http.Error(w, "unknown client", http.StatusBadRequest)
		return
	}
	if !registered {
		http.Error(w, "redirect_uri is not registered for this client", http.StatusBadRequest)
		return
	}
	back, err := url.Parse(q.Get("redirect_uri"))
	if err != nil {
		http.Error(w, "bad redirect_uri", http.StatusBadRequest)
		return
	}
	answer := url.Values{}
	if s := q.Get("state"); s != "" {
		answer.Set("state", s)
	}
	refuse := func(code string) {
		answer.Set("error", code)
		back.RawQuery = answer.Encode()
		http.Redirect(w, r, back.String(), http.StatusFound)
	}
	switch {
	case q.Get("response_type") != "code":
		refuse("unsupported_response_type")
		return
	case !slices.Contains(strings.Fields(q.Get("scope")), "openid"):
		refuse("invalid_scope")
		return
	case q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256":
		// This issuer requires PKCE, as OAuth 2.1 does.
		refuse("invalid_request")
		return
	case user == nil:
		refuse("access_denied")
		return
	case i.o.AskToContinue && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = continuePage.Execute(w, map[string]any{"User": firstSet(user.Email, user.Subject), "Params": q})
		return
	}
	code := randomToken()
	i.mu.Lock()
	i.codes[code] = oidcGrant{user: *user, redirect: q.Get("redirect_uri"), nonce: q.Get("nonce"), challenge: q.Get("code_challenge"),
		clientID: q.Get("client_id"), notAfter: time.Now().Add(time.Minute), scopesAsked: q.Get("scope")}
	i.mu.Unlock()
	answer.Set("code", code)
	back.RawQuery = answer.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

// token redeems a code once for an ID token.
func (i *OIDCIssuer) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	id, secret, basic := r.BasicAuth()
	if basic {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != i.o.ClientID || subtle.ConstantTimeCompare([]byte(secret), []byte(i.o.ClientSecret)) != 1 {
		w.Header().Set("WWW-Authenticate", `Basic realm="token"`)
		oauthError(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	if r.PostForm.Get("grant_type") != "authorization_code" {
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type")
		return
	}
	code := r.PostForm.Get("code")
	i.mu.Lock()
	g, ok := i.codes[code]
	delete(i.codes, code) // a code is good once, whatever happens next
	fault := i.fault
	i.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	switch {
	case !ok, time.Now().After(g.notAfter), g.clientID != id, g.redirect != r.PostForm.Get("redirect_uri"),
		base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		oauthError(w, http.StatusBadRequest, "invalid_grant")
		return
	}
	idToken, err := i.idToken(g, fault)
	if err != nil {
		oauthError(w, http.StatusInternalServerError, "server_error")
		return
	}
	i.mu.Lock()
	i.issued++
	i.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"access_token": randomToken(), "token_type": "Bearer",
		"expires_in": int(i.o.TokenLifetime.Seconds()), "id_token": idToken, "scope": g.scopesAsked})
}

// idToken signs g's ID token, gone wrong as fault says.
func (i *OIDCIssuer) idToken(g oidcGrant, fault *OIDCFault) (string, error) {
	if fault == nil {
		fault = &OIDCFault{}
	}
	now := time.Now()
	lifetime := i.o.TokenLifetime
	if fault.Lifetime != 0 {
		lifetime = fault.Lifetime
	}
	sub := g.user.Subject
	if sub == "" {
		sub = g.user.Email
	}
	claims := map[string]any{
		"iss": firstSet(fault.Issuer, i.URL), "sub": sub, "aud": firstSet(fault.Audience, i.o.ClientID),
		"iat": now.Unix(), "exp": now.Add(lifetime).Unix(), "nonce": firstSet(fault.Nonce, g.nonce),
	}
	if g.user.Email != "" {
		claims["email"], claims["email_verified"] = g.user.Email, true
	}
	if g.user.Groups != nil {
		claims["groups"] = g.user.Groups
	}
	for k, v := range g.user.Claims {
		claims[k] = v
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	key := i.key
	if fault.ForeignKey {
		key = i.foreign
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: oidcKeyID}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", err
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}

// continuePage is the issuer's sign-in page: its button posts the authorization request back.
var continuePage = template.Must(template.New("continue").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>Sign in · test issuer</title></head>
<body><form method="post" action="/authorize">
{{range $k, $v := .Params}}{{range $v}}<input type="hidden" name="{{$k}}" value="{{.}}">{{end}}{{end}}
<p>Sign in as {{.User}}</p>
<button type="submit" id="continue">Continue</button>
</form></body></html>
`))

func oauthError(w http.ResponseWriter, status int, code string) {
	writeJSON(w, status, map[string]string{"error": code, "error_description": "the test issuer refused the request: " + code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func firstSet(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
