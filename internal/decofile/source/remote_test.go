package source

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/siteops/siteops/internal/decofile/source/ghtest"
	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func TestGitHubResolveUsesETags(t *testing.T) {
	gh := ghtest.New(t)
	sha1 := gh.Push("org", "site", "main", map[string]string{".deco/blocks/a.json": `{"v":1}`})
	var seen []int
	g := &GitHub{APIURL: gh.APIURL, ArchiveURL: gh.ArchiveURL, Egress: local, Observe: func(kind string, code int) {
		if kind == "resolve" {
			seen = append(seen, code)
		}
	}}
	ctx := context.Background()
	for range 2 {
		got, err := g.Resolve(ctx, "org", "site", "main", "")
		if err != nil {
			t.Fatal(err)
		}
		if got != sha1 {
			t.Fatalf("resolved %s, want %s", got, sha1)
		}
	}
	sha2 := gh.Push("org", "site", "main", map[string]string{".deco/blocks/a.json": `{"v":2}`})
	got, err := g.Resolve(ctx, "org", "site", "main", "")
	if err != nil || got != sha2 {
		t.Fatalf("after a push resolved %s (%v), want %s", got, err, sha2)
	}
	if !slices.Equal(seen, []int{200, 304, 200}) {
		t.Fatalf("status codes %v, want a 304 for the unchanged branch", seen)
	}
	if got, _ := g.Resolve(ctx, "org", "site", strings.ToUpper(sha1), ""); got != sha1 || gh.Count(ghtest.KindResolve) != 3 {
		t.Fatalf("a SHA must resolve to itself without a request")
	}
	b, err := g.Fetch(ctx, "org", "site", sha2, ".deco/blocks", "")
	if err != nil {
		t.Fatal(err)
	}
	if string(b["a"]) != `{"v":2}` {
		t.Fatalf("fetched %s", b["a"])
	}
}

func TestGitHubErrors(t *testing.T) {
	gh := ghtest.New(t)
	gh.Push("org", "site", "main", map[string]string{"b/a.json": `{}`})
	gh.Private("org", "private", "s3cret")
	sha := gh.Push("org", "private", "main", map[string]string{"b/a.json": `{}`})
	g := &GitHub{APIURL: gh.APIURL, ArchiveURL: gh.ArchiveURL, Limits: Limits{ArchiveBytes: 1 << 20}, Egress: local}
	ctx := context.Background()

	_, err := g.Resolve(ctx, "org", "site", "nope", "")
	wantReason(t, err, ReasonNotFound, `"nope"`)
	_, err = g.Resolve(ctx, "org", "missing", "main", "")
	wantReason(t, err, ReasonNotFound, "spec.github.secret", "--github-token-orgs", AnnotationGitHubRepos)
	_, err = g.Resolve(ctx, "org", "private", "main", "wrong")
	wantReason(t, err, ReasonNotFound, "token can read")
	got, err := g.Resolve(ctx, "org", "private", "main", "s3cret")
	if err != nil || got != sha {
		t.Fatalf("private repo with token: %s %v", got, err)
	}
	if a := gh.Authorizations(ghtest.KindResolve); a[len(a)-1] != "token s3cret" {
		t.Fatalf("Authorization sent: %q", a[len(a)-1])
	}

	gh.FailNext(ghtest.KindResolve, http.StatusBadGateway)
	_, err = g.Resolve(ctx, "org", "site", "main", "")
	wantReason(t, err, ReasonUnavailable, "502")
	if !AsError(err).Transient {
		t.Fatal("a 502 must be transient")
	}
	gh.FailNext(ghtest.KindResolve, http.StatusUnauthorized)
	_, err = g.Resolve(ctx, "org", "site", "main", "x")
	wantReason(t, err, ReasonUnauthorized, "401")

	big := gh.PushArchive("org", "site", "big", ghtest.Zip("top", map[string]string{"b/a.json": `"` + randomHex(256<<10) + `"`}))
	g.Limits.ArchiveBytes = 64 << 10
	_, err = g.Fetch(ctx, "org", "site", big, "b", "")
	wantReason(t, err, ReasonLimitExceeded, "archive bytes")
}

func TestGitRemote(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{Username: "bot", Password: "pw"})
	url, err := remote.CreateRepo("site", "main")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	authURL := strings.Replace(url, "http://", "http://bot:pw@", 1)
	testenv.Git(t, work, "init", "-q", "-b", "main")
	testenv.CommitFiles(t, work, "one", map[string]string{".deco/blocks/a%20b.json": `{"v":1}`, ".deco/blocksX/no.json": `{}`})
	testenv.Git(t, work, "push", "-q", authURL, "main")
	first := testenv.Git(t, work, "rev-parse", "HEAD")
	testenv.CommitFiles(t, work, "two", map[string]string{".deco/blocks/a%20b.json": `{"v":2}`, ".deco/blocks/sub/c.json": `[]`})
	testenv.Git(t, work, "tag", "v2")
	testenv.Git(t, work, "push", "-q", authURL, "main", "v2")
	second := testenv.Git(t, work, "rev-parse", "HEAD")

	g := &Git{Egress: local}
	auth := &GitAuth{Username: "bot", Password: "pw"}
	ctx := context.Background()
	for _, ref := range []string{"main", "v2", "refs/heads/main"} {
		sha, err := g.Resolve(ctx, url, ref, auth)
		if err != nil || sha != second {
			t.Fatalf("resolve %s: %s %v, want %s", ref, sha, err, second)
		}
	}
	b, err := g.Fetch(ctx, url, "main", second, ".deco/blocks", auth)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(b); !slices.Equal(got, []string{"a b", "c"}) || string(b["a b"]) != `{"v":2}` {
		t.Fatalf("blocks %q %s", got, b["a b"])
	}
	// A pinned older commit that is no branch tip.
	b, err = g.Fetch(ctx, url, first, first, ".deco/blocks", auth)
	if err != nil {
		t.Fatal(err)
	}
	if string(b["a b"]) != `{"v":1}` {
		t.Fatalf("pinned commit content %s", b["a b"])
	}

	_, err = g.Resolve(ctx, url, "main", &GitAuth{Username: "bot", Password: "wrong"})
	wantReason(t, err, ReasonUnauthorized)
	_, err = g.Resolve(ctx, url, "nope", auth)
	wantReason(t, err, ReasonNotFound, `"nope"`)
	_, err = g.Fetch(ctx, url, "main", second, ".deco/blocks", &GitAuth{Identity: []byte("k")})
	wantReason(t, err, ReasonCredentials, "known_hosts")
}

// local is the policy of tests whose remotes run on loopback: plain HTTP to 127.0.0.0/8.
var local = egress.MustNew(egress.Config{Schemes: []string{"http", "https"}, Hosts: []string{"127.0.0.0/8"}, Settings: EgressSettings})

func randomHex(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
