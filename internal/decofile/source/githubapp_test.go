package source

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/decofile/source/ghtest"
)

// clock is a settable clock shared by the app and the GitHub stand-in.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func appKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// newApp installs an app on org "appcorp" for repos site and blog (private, readable with the
// app's tokens only) and returns the GitHub stand-in, the app and the shared clock.
func newApp(t *testing.T) (*ghtest.Server, *GitHubApp, *clock) {
	t.Helper()
	gh := ghtest.New(t)
	c := &clock{now: time.Now()}
	key := appKey(t)
	gh.InstallApp(4242, &key.PublicKey, 77, "appcorp", []string{"site", "blog"}, ghtest.AppOptions{Now: c.Now})
	for _, r := range []string{"site", "blog"} {
		gh.Private("appcorp", r, "nobody-has-this")
		gh.Push("appcorp", r, "main", map[string]string{".deco/blocks/a.json": `{"repo":"` + r + `"}`})
	}
	return gh, &GitHubApp{ID: 4242, Key: key, APIURL: gh.APIURL, Egress: local, Now: c.Now}, c
}

func TestGitHubAppTokenScopedToTheRepository(t *testing.T) {
	gh, app, _ := newApp(t)
	ctx := context.Background()
	g := &GitHub{APIURL: gh.APIURL, ArchiveURL: gh.ArchiveURL, Egress: local}
	token, err := app.Token(ctx, "appcorp", "site")
	if err != nil || !strings.HasPrefix(token, "ghs_") {
		t.Fatalf("token %q, %v", token, err)
	}
	if got := gh.AppTokenScopes(); len(got) != 1 || !slices.Equal(got[0], []string{"site"}) {
		t.Fatalf("token requests asked for %q, want exactly [site]", got)
	}
	sha, err := g.Resolve(ctx, "appcorp", "site", "main", token)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := g.Fetch(ctx, "appcorp", "site", sha, ".deco/blocks", token)
	if err != nil || string(blocks["a"]) != `{"repo":"site"}` {
		t.Fatalf("fetch with the app token: %v %s", err, blocks["a"])
	}
	// The same installation's other repository is not readable with that token.
	if _, err := g.Resolve(ctx, "appcorp", "blog", "main", token); AsError(err).Reason != ReasonNotFound {
		t.Fatalf("the site token read blog: %v", err)
	}
	// A repository the installation does not cover, and an org without the app: no token.
	for _, r := range [][2]string{{"appcorp", "elsewhere"}, {"stranger", "site"}} {
		if tok, err := app.Token(ctx, r[0], r[1]); err != nil || tok != "" {
			t.Fatalf("%s/%s: token %q, %v; want none", r[0], r[1], tok, err)
		}
	}
	if gh.RefusedJWTs() != 0 {
		t.Fatalf("%d JWTs refused", gh.RefusedJWTs())
	}
}

func TestGitHubAppTokenCachedThenRefreshed(t *testing.T) {
	gh, app, c := newApp(t)
	ctx := context.Background()
	first, err := app.Token(ctx, "appcorp", "site")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if tok, err := app.Token(ctx, "appcorp", "site"); err != nil || tok != first {
			t.Fatalf("second fetch: %v, same token %v", err, tok == first)
		}
	}
	if n := gh.Count(ghtest.KindAppToken); n != 1 {
		t.Fatalf("%d token requests for one repository within the token's life", n)
	}
	if n := gh.Count(ghtest.KindAppInstallation); n != 1 {
		t.Fatalf("%d installation look-ups", n)
	}
	// Another repository of the org: its own token, the installation is known.
	if _, err := app.Token(ctx, "appcorp", "blog"); err != nil {
		t.Fatal(err)
	}
	if gh.Count(ghtest.KindAppInstallation) != 1 || gh.Count(ghtest.KindAppToken) != 2 {
		t.Fatalf("installation look-ups %d, token requests %d", gh.Count(ghtest.KindAppInstallation), gh.Count(ghtest.KindAppToken))
	}

	// Shortly before expiry the token is replaced, and the new one reads the repository.
	c.Add(ghtest.DefaultAppTokenTTL - appTokenRefresh + time.Second)
	second, err := app.Token(ctx, "appcorp", "site")
	if err != nil || second == first {
		t.Fatalf("refresh: %v, new token %v", err, second != first)
	}
	if n := gh.Count(ghtest.KindAppToken); n != 3 {
		t.Fatalf("%d token requests, want a third for the refresh", n)
	}
	g := &GitHub{APIURL: gh.APIURL, ArchiveURL: gh.ArchiveURL, Egress: local}
	if _, err := g.Resolve(ctx, "appcorp", "site", "main", second); err != nil {
		t.Fatalf("refreshed token: %v", err)
	}
	// The old token has expired on GitHub's side.
	c.Add(appTokenRefresh)
	if _, err := g.Resolve(ctx, "appcorp", "site", "main", first); AsError(err).Reason != ReasonNotFound {
		t.Fatalf("the expired token still reads: %v", err)
	}
	if gh.RefusedJWTs() != 0 {
		t.Fatalf("%d JWTs refused", gh.RefusedJWTs())
	}
}

func TestGitHubAppWrongKeyIsRefused(t *testing.T) {
	gh, app, _ := newApp(t)
	app.Key = appKey(t) // not the key GitHub knows
	_, err := app.Token(context.Background(), "appcorp", "site")
	if e := AsError(err); e.Reason != ReasonUnauthorized || !strings.Contains(e.Error(), "--github-app-private-key-file") {
		t.Fatalf("wrong key: %v", err)
	}
	if gh.RefusedJWTs() != 1 {
		t.Fatalf("%d JWTs refused, want 1", gh.RefusedJWTs())
	}
}

func TestLoadGitHubAppKey(t *testing.T) {
	key := appKey(t)
	dir := t.TempDir()
	pkcs1 := filepath.Join(dir, "pkcs1.pem")
	if err := os.WriteFile(pkcs1, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := LoadGitHubAppKey(pkcs1)
	if err != nil || !got.Equal(key) {
		t.Fatalf("PKCS#1 key: %v", err)
	}
	bad := filepath.Join(dir, "bad.pem")
	_ = os.WriteFile(bad, []byte("not a key"), 0o600)
	if _, err := LoadGitHubAppKey(bad); err == nil || strings.Contains(err.Error(), "not a key") {
		t.Fatalf("bad key: %v", err)
	}
}
