package controller_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/source/ghtest"
)

// The package manager's GitHub App is installed on appOrg, every repository; the org may use
// the operator's credentials (--github-token-orgs), each namespace still needs a grant.
const (
	appOrg = "appcorp"
	appID  = 31337
)

func installApp(t *testing.T, gh *ghtest.Server) *source.GitHubApp {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	gh.InstallApp(appID, &key.PublicKey, 9001, appOrg, nil, ghtest.AppOptions{})
	return &source.GitHubApp{ID: appID, Key: key, APIURL: gh.APIURL, Egress: testEgress, Timeout: sourceTimeout}
}

// A tenant whose namespace was granted the repository reads it with an app token scoped to it;
// a tenant without the grant pointing at the same kind of private repository gets nothing: no
// token is minted for it and no credential is sent.
func TestGitHubAppNeedsGrantAsTenant(t *testing.T) {
	e := start(t)
	granted := e.c.Tenant(t, "appok", map[string]string{source.AnnotationGitHubRepos: appOrg + "/*"})
	repo := "shop-" + granted.Namespace
	attacker := e.c.Tenant(t, "appattack", nil)
	e.gh.Private(appOrg, repo, "no-static-token")
	sha := e.gh.Push(appOrg, repo, "main", map[string]string{".deco/blocks/a.json": `{"secret":"victim content"}`})

	if err := granted.Client.Create(context.Background(), githubDecofile(granted.Namespace, appOrg, repo, "main", "")); err != nil {
		t.Fatal(err)
	}
	e.atCommit(t, granted.Namespace, "site", sha)
	for _, kind := range []string{ghtest.KindResolve, ghtest.KindArchive} {
		auths := e.gh.RepoAuthorizations(appOrg, repo, kind)
		if len(auths) == 0 || !strings.HasPrefix(auths[0], "token ghs_") {
			t.Fatalf("%s requests sent %q, want an installation token", kind, auths)
		}
	}
	if !slices.ContainsFunc(e.gh.AppTokenScopes(), func(s []string) bool { return slices.Equal(s, []string{repo}) }) {
		t.Fatalf("no token scoped to %s alone: %q", repo, e.gh.AppTokenScopes())
	}
	for _, s := range e.gh.AppTokenScopes() {
		if len(s) != 1 {
			t.Fatalf("a token was asked for %q: every token is for one repository", s)
		}
	}

	// The attacker's namespace has no grant: the same repository is not found, no token is
	// minted for it and nothing is sent.
	before := len(e.gh.RepoAuthorizations(appOrg, repo, ghtest.KindResolve))
	tokens := e.gh.Count(ghtest.KindAppToken)
	if err := attacker.Client.Create(context.Background(), githubDecofile(attacker.Namespace, appOrg, repo, "main", "")); err != nil {
		t.Fatal(err)
	}
	df := e.waitReady(t, attacker.Namespace, "site", metav1.ConditionFalse, source.ReasonNotFound, nil)
	if !strings.Contains(ready(df).Message, "no token was sent") {
		t.Fatalf("message: %s", ready(df).Message)
	}
	for _, a := range e.gh.RepoAuthorizations(appOrg, repo, ghtest.KindResolve)[before:] {
		if a != "" {
			t.Fatalf("the attacker's Decofile sent %q", a)
		}
	}
	if n := e.gh.Count(ghtest.KindAppToken); n != tokens {
		t.Fatalf("%d tokens minted for a namespace without the grant", n-tokens)
	}
	if df.Status.GitHubCommit != "" || df.Status.ContentHash != "" {
		t.Fatalf("the attacker's Decofile stored something: %+v", df.Status)
	}
	if got := e.configMap(t, granted.Namespace, "site").Data[decov1.KeyJSON]; got != `{"a":{"secret":"victim content"}}` {
		t.Fatalf("granted Decofile stored %s", got)
	}
}
