package ghtest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// DefaultAppTokenTTL is how long an installation token lives, as on GitHub.
const DefaultAppTokenTTL = time.Hour

// app is the GitHub App the server knows: its key, its one installation and the tokens issued.
type app struct {
	id             int64
	key            *rsa.PublicKey
	installationID int64
	org            string
	repos          []string // the installation's repositories; empty: all of org's
	tokenTTL       time.Duration
	now            func() time.Time
	tokens         map[string]issuedToken
	scopes         [][]string
	refusedJWTs    int
}

type issuedToken struct {
	org     string
	repos   []string
	expires time.Time
}

// AppOptions configure InstallApp.
type AppOptions struct {
	// TokenTTL is the lifetime of installation tokens; default DefaultAppTokenTTL.
	TokenTTL time.Duration
	// Now is the server's clock for JWTs and token expiry; default time.Now.
	Now func() time.Time
}

// InstallApp registers a GitHub App (its ID and public key) installed as installationID on org
// for repos (none: every repository of org). JWTs are verified with key: RS256, issuer the app
// ID, issued in the past, expiring in the future and at most 10 minutes after issue.
func (s *Server) InstallApp(id int64, key *rsa.PublicKey, installationID int64, org string, repos []string, o AppOptions) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o.TokenTTL == 0 {
		o.TokenTTL = DefaultAppTokenTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s.app = &app{id: id, key: key, installationID: installationID, org: org, repos: repos, tokenTTL: o.TokenTTL, now: o.Now, tokens: map[string]issuedToken{}}
}

// AppTokenScopes are the repositories each installation token request asked for, in order.
func (s *Server) AppTokenScopes() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.app == nil {
		return nil
	}
	return slices.Clone(s.app.scopes)
}

// RefusedJWTs is how many app requests had a JWT that did not verify.
func (s *Server) RefusedJWTs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.app == nil {
		return 0
	}
	return s.app.refusedJWTs
}

// appTokenReads reports whether authorization carries an unexpired installation token scoped
// to org/name. Called with s.mu held.
func (s *Server) appTokenReads(authorization, org, name string) bool {
	if s.app == nil {
		return false
	}
	t, ok := s.app.tokens[strings.TrimPrefix(authorization, "token ")]
	return ok && s.app.now().Before(t.expires) && strings.EqualFold(t.org, org) && slices.ContainsFunc(t.repos, func(r string) bool { return strings.EqualFold(r, name) })
}

// serveApp answers the app endpoints under /api; false when the path is none of them. Called
// with s.mu held.
func (s *Server) serveApp(w http.ResponseWriter, req *http.Request, parts []string) bool {
	var kind string
	switch {
	case len(parts) == 5 && parts[0] == "api" && parts[1] == "repos" && parts[4] == "installation" && req.Method == http.MethodGet,
		len(parts) == 4 && parts[0] == "api" && parts[1] == "orgs" && parts[3] == "installation" && req.Method == http.MethodGet:
		kind = KindAppInstallation
	case len(parts) == 5 && parts[0] == "api" && parts[1] == "app" && parts[2] == "installations" && parts[4] == "access_tokens" && req.Method == http.MethodPost:
		kind = KindAppToken
	default:
		return false
	}
	s.counts[kind]++
	a := s.app
	if a == nil || !a.verify(req.Header.Get("Authorization")) {
		if a != nil {
			a.refusedJWTs++
		}
		http.Error(w, `{"message":"A JSON web token could not be decoded"}`, http.StatusUnauthorized)
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	if kind == KindAppInstallation {
		org := parts[2]
		if parts[1] == "repos" && len(a.repos) > 0 && !slices.Contains(a.repos, parts[3]) || !strings.EqualFold(org, a.org) {
			http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
			return true
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"id": a.installationID, "account": map[string]string{"login": a.org}})
		return true
	}
	if parts[3] != strconv.FormatInt(a.installationID, 10) {
		http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
		return true
	}
	var body struct {
		Repositories []string `json:"repositories"`
	}
	if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
		http.Error(w, `{"message":"Problems parsing JSON"}`, http.StatusBadRequest)
		return true
	}
	a.scopes = append(a.scopes, slices.Clone(body.Repositories))
	scope := body.Repositories
	if len(scope) == 0 {
		scope = a.repos // GitHub: every repository of the installation
	}
	for _, r := range scope {
		if len(a.repos) > 0 && !slices.Contains(a.repos, r) {
			http.Error(w, `{"message":"There is at least one repository that does not exist or is not accessible to the parent installation."}`, http.StatusUnprocessableEntity)
			return true
		}
	}
	raw := make([]byte, 20)
	_, _ = rand.Read(raw)
	token := "ghs_" + hex.EncodeToString(raw)
	expires := a.now().Add(a.tokenTTL).UTC().Truncate(time.Second)
	a.tokens[token] = issuedToken{org: a.org, repos: slices.Clone(scope), expires: expires}
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"token": token, "expires_at": expires.Format(time.RFC3339)})
	return true
}

// verify checks a "Bearer <jwt>" header as GitHub does.
func (a *app) verify(authorization string) bool {
	raw, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok {
		return false
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return a.key, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithTimeFunc(a.now), jwt.WithIssuedAt(), jwt.WithExpirationRequired(),
		jwt.WithIssuer(strconv.FormatInt(a.id, 10)))
	if err != nil {
		return false
	}
	if claims.IssuedAt == nil || claims.ExpiresAt.Sub(claims.IssuedAt.Time) > 10*time.Minute {
		return false
	}
	return true
}
