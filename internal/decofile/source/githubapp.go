package source

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/sync/singleflight"

	"github.com/siteops/siteops/internal/egress"
)

// Lifetimes of what a GitHubApp caches.
const (
	// appTokenRefresh is how long before its expiry an installation token is replaced: a token
	// handed out is good for at least this long (a fetch takes at most --source-timeout).
	appTokenRefresh = 5 * time.Minute
	// appInstallationTTL is how long an installation ID is kept; appMissingTTL how long "the
	// app is not installed for this repository" is.
	appInstallationTTL = time.Hour
	appMissingTTL      = time.Minute
	// appJWTLifetime is the app JWT's lifetime (GitHub accepts at most 10 minutes); it is
	// issued 60 s in the past against clock skew, as GitHub recommends.
	appJWTLifetime = 9 * time.Minute
	appJWTSkew     = 60 * time.Second
	// appAnswerBytes bounds the success answers read (an installation, a token).
	appAnswerBytes = 64 << 10
)

// GitHubApp mints GitHub App installation tokens, each scoped to the one repository it is
// asked for, and caches them until shortly before they expire. Tokens are never logged or
// shown in a message. TokenPolicy decides who may use them, as for the fallback token.
type GitHubApp struct {
	// ID is the app's ID (--github-app-id), the JWT issuer.
	ID int64
	// Key is the app's private key (--github-app-private-key-file).
	Key *rsa.PrivateKey
	// APIURL is the REST API base; default DefaultGitHubAPIURL.
	APIURL string
	// Egress is the URL policy requests go through; nil means https to public addresses only.
	Egress *egress.Policy
	// Timeout bounds each request; 0 means DefaultTimeout.
	Timeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Observe, when set, is told about every request: kind (app-installation, app-token) and
	// status code (0 for a transport error).
	Observe func(kind string, code int)

	mu            sync.Mutex
	installations map[string]appInstallation // lower-case org → installation
	tokens        map[string]appToken        // lower-case org/repo → token
	flight        singleflight.Group

	once sync.Once
	http *http.Client
}

type appInstallation struct {
	id      int64 // 0: the app is not installed for the repository
	expires time.Time
}

type appToken struct {
	value   string // "" when the installation cannot read the repository
	expires time.Time
}

// LoadGitHubAppKey reads a GitHub App private key (PEM, PKCS#1 or PKCS#8 RSA) from path.
func LoadGitHubAppKey(path string) (*rsa.PrivateKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the GitHub App private key: %w", err)
	}
	key, err := jwt.ParseRSAPrivateKeyFromPEM(raw)
	if err != nil {
		return nil, fmt.Errorf("the GitHub App private key in %s is not a PEM RSA private key: %w", path, err)
	}
	return key, nil
}

func (a *GitHubApp) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

func (a *GitHubApp) client() *http.Client {
	a.once.Do(func() { a.http = &http.Client{Transport: newTransport(a.Egress)} })
	return a.http
}

// Token returns an installation token that reads org/repo and nothing else, or "" when the app
// is not installed for that repository.
func (a *GitHubApp) Token(ctx context.Context, org, repo string) (string, error) {
	key := strings.ToLower(org + "/" + repo)
	a.mu.Lock()
	t, ok := a.tokens[key]
	a.mu.Unlock()
	if ok && a.now().Before(t.expires) {
		return t.value, nil
	}
	// One request per repository at a time; other repositories are not held up.
	v, err, _ := a.flight.Do(key, func() (any, error) {
		a.mu.Lock()
		t, ok := a.tokens[key]
		a.mu.Unlock()
		if ok && a.now().Before(t.expires) {
			return t, nil
		}
		t, err := a.mint(ctx, org, repo)
		if err != nil {
			return appToken{}, err
		}
		a.mu.Lock()
		if a.tokens == nil || len(a.tokens) >= maxETags {
			a.tokens = map[string]appToken{}
		}
		a.tokens[key] = t
		a.mu.Unlock()
		return t, nil
	})
	if err != nil {
		return "", err
	}
	return v.(appToken).value, nil
}

// mint asks GitHub for a token of the installation covering org/repo, scoped to repo.
func (a *GitHubApp) mint(ctx context.Context, org, repo string) (appToken, error) {
	id, err := a.installation(ctx, org, repo)
	if err != nil || id == 0 {
		return appToken{expires: a.now().Add(appMissingTTL)}, err
	}
	body, _ := json.Marshal(map[string]any{"repositories": []string{repo}})
	var answer struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	code, err := a.call(ctx, http.MethodPost, fmt.Sprintf("/app/installations/%d/access_tokens", id), body, "app-token", &answer)
	switch {
	case err != nil:
		return appToken{}, err
	case code == http.StatusNotFound || code == http.StatusUnprocessableEntity:
		// The installation does not cover this repository (or was removed): no token.
		a.forgetInstallation(org)
		return appToken{expires: a.now().Add(appMissingTTL)}, nil
	case code != http.StatusCreated && code != http.StatusOK:
		return appToken{}, a.statusError(code, "mint an installation token for "+org+"/"+repo)
	case answer.Token == "" || answer.ExpiresAt.IsZero():
		return appToken{}, errorf(ReasonUnavailable, true, "mint an installation token for %s/%s: GitHub's answer has no token or expiry; check --github-api-url (retrying)", org, repo)
	}
	return appToken{value: answer.Token, expires: answer.ExpiresAt.Add(-appTokenRefresh)}, nil
}

// installation finds the app's installation for org (cached per org), 0 when there is none.
func (a *GitHubApp) installation(ctx context.Context, org, repo string) (int64, error) {
	k := strings.ToLower(org)
	a.mu.Lock()
	in, ok := a.installations[k]
	a.mu.Unlock()
	if ok && in.id != 0 && a.now().Before(in.expires) {
		return in.id, nil
	}
	var answer struct {
		ID int64 `json:"id"`
	}
	// The repository's installation: works for organisations and user accounts alike.
	code, err := a.call(ctx, http.MethodGet, "/repos/"+url.PathEscape(org)+"/"+url.PathEscape(repo)+"/installation", nil, "app-installation", &answer)
	switch {
	case err != nil:
		return 0, err
	case code == http.StatusNotFound:
		return 0, nil
	case code != http.StatusOK:
		return 0, a.statusError(code, "find the GitHub App installation of "+org)
	case answer.ID <= 0:
		return 0, errorf(ReasonUnavailable, true, "find the GitHub App installation of %s: GitHub's answer has no installation ID; check --github-api-url (retrying)", org)
	}
	a.mu.Lock()
	if a.installations == nil || len(a.installations) >= maxETags {
		a.installations = map[string]appInstallation{}
	}
	a.installations[k] = appInstallation{id: answer.ID, expires: a.now().Add(appInstallationTTL)}
	a.mu.Unlock()
	return answer.ID, nil
}

func (a *GitHubApp) forgetInstallation(org string) {
	a.mu.Lock()
	delete(a.installations, strings.ToLower(org))
	a.mu.Unlock()
}

// jwt signs the app's JSON Web Token (RS256, issuer the app ID).
func (a *GitHubApp) jwt() (string, error) {
	now := a.now()
	claims := jwt.RegisteredClaims{
		Issuer:    strconv.FormatInt(a.ID, 10),
		IssuedAt:  jwt.NewNumericDate(now.Add(-appJWTSkew)),
		ExpiresAt: jwt.NewNumericDate(now.Add(appJWTLifetime)),
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, claims).SignedString(a.Key)
	if err != nil {
		return "", errorf(ReasonCredentials, false, "sign the GitHub App JWT: %w; check --github-app-private-key-file", err)
	}
	return s, nil
}

// call sends one app request and decodes a success answer into out; it returns the status.
func (a *GitHubApp) call(ctx context.Context, method, path string, body []byte, kind string, out any) (int, error) {
	ctx, o, cancel := begin(ctx, a.Timeout, appAnswerBytes*4)
	defer cancel()
	token, err := a.jwt()
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, method, base(a.APIURL, DefaultGitHubAPIURL)+path, bytes.NewReader(body))
	if err != nil {
		return 0, errorf(ReasonInvalidContent, false, "build GitHub App request: %w", err)
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	what := "GitHub App request (" + kind + ")"
	resp, err := a.client().Do(req)
	if err != nil {
		a.observe(kind, 0)
		return 0, requestError(ctx, o, what, "--github-api-url", err)
	}
	defer func() { _ = resp.Body.Close() }()
	a.observe(kind, resp.StatusCode)
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, appAnswerBytes)).Decode(out); err != nil {
		return 0, errorf(ReasonUnavailable, true, "%s: the answer is not the JSON GitHub sends; check --github-api-url (retrying)", what)
	}
	return resp.StatusCode, nil
}

func (a *GitHubApp) observe(kind string, code int) {
	if a.Observe != nil {
		a.Observe(kind, code)
	}
}

// statusError describes a refused app request by its status and what to check.
func (a *GitHubApp) statusError(code int, what string) error {
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden:
		return errorf(ReasonUnauthorized, true, "%s: GitHub refused the app's credentials (HTTP %d); check --github-app-id and --github-app-private-key-file (retrying)", what, code)
	case http.StatusTooManyRequests:
		return errorf(ReasonUnavailable, true, "%s: rate limited by GitHub (HTTP %d); retrying", what, code)
	default:
		return errorf(ReasonUnavailable, true, "%s: GitHub answered HTTP %d; check --github-api-url (retrying)", what, code)
	}
}
