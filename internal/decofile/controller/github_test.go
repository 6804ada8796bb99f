package controller_test

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/source/ghtest"
	"github.com/siteops/siteops/internal/testenv"
)

func githubDecofile(ns, org, repo, ref, secret string) *decov1.Decofile {
	return &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceGitHub, Interval: &metav1.Duration{Duration: pollEvery},
			GitHub: &decov1.GitHubSource{Org: org, Repo: repo, Commit: ref, Path: ".deco/blocks", Secret: secret}}}
}

func TestGitHubBranchCachingAndPolling(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "gh", nil)
	org, repo := "acme", "site-"+ns
	e.gh.Private(org, repo, "own-token")
	sha1 := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/Header.json": `{"v":1}`, ".deco/blocksX/No.json": `{}`})
	e.create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gh", Namespace: ns}, StringData: map[string]string{"token": "own-token"}})
	e.create(t, githubDecofile(ns, org, repo, "main", "gh"))

	df := e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	if df.Status.GitHubCommit != sha1 || df.Status.ShortCommit != sha1[:7] || df.Status.SourceType != decov1.SourceGitHub {
		t.Fatalf("status %+v, want commit %s", df.Status, sha1)
	}
	if got := e.configMap(t, ns, "site").Data[decov1.KeyJSON]; got != `{"Header":{"v":1}}` {
		t.Fatalf("decofile.json %s", got)
	}
	if !strings.Contains(ready(df).Message, sha1) {
		t.Fatalf("Ready message lacks the commit: %s", ready(df).Message)
	}
	for _, kind := range []string{ghtest.KindResolve, ghtest.KindArchive} {
		for _, a := range e.gh.RepoAuthorizations(org, repo, kind) {
			if a != "token own-token" {
				t.Fatalf("%s request sent Authorization %q", kind, a)
			}
		}
	}

	// Unchanged SHA: the branch is re-resolved every interval, but never downloaded again.
	resolves := e.gh.CountRepo(org, repo, ghtest.KindResolve)
	testenv.Eventually(t, waitFor, func() error {
		if n := e.gh.CountRepo(org, repo, ghtest.KindResolve); n < resolves+1 {
			return errorf("%d resolves so far", n)
		}
		return nil
	})
	if n := e.gh.CountRepo(org, repo, ghtest.KindArchive); n != 1 {
		t.Fatalf("%d archive downloads for one commit", n)
	}
	if cur := e.get(t, ns, "site"); cur.ResourceVersion != df.ResourceVersion {
		t.Fatalf("status rewritten while nothing changed: %+v", cur.Status)
	}

	// A push to the branch is picked up within the interval.
	sha2 := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/Header.json": `{"v":2}`})
	df2 := e.waitReady(t, ns, "site", metav1.ConditionTrue, "", func(d *decov1.Decofile) error {
		if d.Status.GitHubCommit != sha2 {
			return errorf("still at %s", d.Status.GitHubCommit)
		}
		return nil
	})
	if df2.Status.Timestamp <= df.Status.Timestamp || e.configMap(t, ns, "site").Data[decov1.KeyJSON] != `{"Header":{"v":2}}` {
		t.Fatalf("new commit not stored: %+v", df2.Status)
	}
	if n := e.gh.CountRepo(org, repo, ghtest.KindArchive); n != 2 {
		t.Fatalf("%d archive downloads for two commits", n)
	}
}

func TestGitHubPinnedSHAIsNotPolled(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "pinned", nil)
	org, repo := "acme", "pinned-"+ns
	sha := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `1`})
	e.create(t, githubDecofile(ns, org, repo, sha, ""))
	e.waitReady(t, ns, "site", metav1.ConditionTrue, "", nil)
	time.Sleep(pollEvery + time.Second) // more than one interval
	if n := e.gh.CountRepo(org, repo, ghtest.KindResolve); n != 0 {
		t.Fatalf("a commit SHA was resolved %d times", n)
	}
	if n := e.gh.CountRepo(org, repo, ghtest.KindArchive); n != 1 {
		t.Fatalf("%d archive downloads", n)
	}
}

func TestGitHubFallbackToken(t *testing.T) {
	e := start(t)
	// The platform granted the namespace the org's repositories for the operator's token.
	ns := e.c.Namespace(t, "fallback", map[string]string{source.AnnotationGitHubRepos: allowedOrg + "/*"})
	// Both repositories are readable with the operator's token; only the allowed org may use it.
	e.gh.Private(allowedOrg, "site-"+ns, fallbackToken)
	e.gh.Push(allowedOrg, "site-"+ns, "main", map[string]string{".deco/blocks/a.json": `1`})
	e.gh.Private("stranger", "site-"+ns, fallbackToken)
	e.gh.Push("stranger", "site-"+ns, "main", map[string]string{".deco/blocks/a.json": `1`})

	ok := githubDecofile(ns, allowedOrg, "site-"+ns, "main", "")
	e.create(t, ok)
	e.waitReady(t, ns, "site", metav1.ConditionTrue, "", nil)

	refused := githubDecofile(ns, "stranger", "site-"+ns, "main", "")
	refused.Name = "refused"
	e.create(t, refused)
	df := e.waitReady(t, ns, "refused", metav1.ConditionFalse, source.ReasonNotFound, nil)
	if msg := ready(df).Message; !strings.Contains(msg, "spec.github.secret") || !strings.Contains(msg, "--github-token-orgs") {
		t.Fatalf("message does not say how to fix it: %s", msg)
	}
	for _, a := range e.gh.RepoAuthorizations("stranger", "site-"+ns, ghtest.KindResolve) {
		if a != "" {
			t.Fatalf("the fallback token was sent for an org not allowed: %q", a)
		}
	}
	e.hasEvent(t, ns, "refused", corev1.EventTypeWarning, source.ReasonNotFound, "--github-token-orgs")
}

func randomBytes(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return string(b)
}

func randomHex(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// TestBadInputKeepsConfigMap drives one Decofile through every kind of bad input. Each sets
// Ready=False with a specific reason and message and a Warning event, and leaves the last good
// ConfigMap exactly as it was; good content afterwards recovers.
func TestBadInputKeepsConfigMap(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "bad", nil)
	org, repo := "acme", "bad-"+ns
	good := map[string]string{".deco/blocks/a.json": `{"good":true}`}
	goodSHA := e.gh.Push(org, repo, "main", good)
	e.create(t, githubDecofile(ns, org, repo, "main", ""))
	e.waitReady(t, ns, "site", metav1.ConditionTrue, "", nil)
	cm := e.configMap(t, ns, "site")

	cases := []struct {
		name    string
		push    func()
		reason  string
		message []string
	}{
		{"invalid JSON", func() {
			e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `{}`, ".deco/blocks/pages/broken.json": `{"a":`})
		}, source.ReasonInvalidContent, []string{".deco/blocks/pages/broken.json"}},
		{"name collision", func() {
			e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/My%20Page.json": `{}`, ".deco/blocks/x/My Page.json": `{}`})
		}, source.ReasonNameCollision, []string{".deco/blocks/My%20Page.json", ".deco/blocks/x/My Page.json"}},
		{"zip bomb", func() {
			e.gh.PushArchive(org, repo, "main", ghtest.ZipBomb("top", ".deco/blocks/bomb.json", 40<<20))
		}, source.ReasonLimitExceeded, []string{"decompressed bytes", "8388608"}},
		{"archive over the limit", func() {
			// Incompressible bytes in a file that is not even a block: the archive itself is too big.
			e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `{}`, "assets/video.bin": randomBytes(3 << 20)})
		}, source.ReasonLimitExceeded, []string{"archive bytes"}},
		{"ref not found", func() {
			e.update(t, ns, "site", func(d *decov1.Decofile) { d.Spec.GitHub.Commit = "no-such-branch" })
		}, source.ReasonNotFound, []string{"no-such-branch"}},
		{"repository not found", func() {
			e.update(t, ns, "site", func(d *decov1.Decofile) { d.Spec.GitHub.Commit = "main"; d.Spec.GitHub.Repo = "gone" })
		}, source.ReasonNotFound, []string{"HTTP 404"}},
		{"too large for a ConfigMap", func() {
			e.update(t, ns, "site", func(d *decov1.Decofile) { d.Spec.GitHub.Repo = repo })
			e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `"` + randomHex(600<<10) + `"`})
		}, decov1.ReasonTooLarge, []string{"target: s3", "bytes of JSON compress to"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.push()
			e.poke(t, ns, "site") // look now rather than at the next poll (spec.interval is at least 10s)
			df := e.waitReady(t, ns, "site", metav1.ConditionFalse, c.reason, func(d *decov1.Decofile) error {
				if !strings.Contains(ready(d).Message, c.message[0]) {
					return errorf("still %s", ready(d).Message)
				}
				return nil
			})
			for _, m := range c.message {
				if !strings.Contains(ready(df).Message, m) {
					t.Errorf("message %q does not mention %q", ready(df).Message, m)
				}
			}
			e.hasEvent(t, ns, "site", corev1.EventTypeWarning, c.reason, c.message[0])
			if now := e.configMap(t, ns, "site"); now.ResourceVersion != cm.ResourceVersion {
				t.Fatalf("ConfigMap changed after %s", c.name)
			}
			if df.Status.ContentHash != encode.Hash([]byte(cm.Data[decov1.KeyJSON])) || df.Status.GitHubCommit != goodSHA {
				t.Fatalf("status no longer describes the stored content: %+v", df.Status)
			}
			if c.name == "invalid JSON" {
				// Polling finds the same bad commit: no second download, no new status write.
				archives := e.gh.CountRepo(org, repo, ghtest.KindArchive)
				resolves := e.gh.CountRepo(org, repo, ghtest.KindResolve)
				testenv.Eventually(t, waitFor, func() error {
					if n := e.gh.CountRepo(org, repo, ghtest.KindResolve); n < resolves+1 {
						return errorf("%d resolves", n)
					}
					return nil
				})
				if n := e.gh.CountRepo(org, repo, ghtest.KindArchive); n != archives {
					t.Fatalf("the rejected commit was downloaded %d more times", n-archives)
				}
				if cur := e.get(t, ns, "site"); cur.ResourceVersion != df.ResourceVersion {
					t.Fatalf("status rewritten for the same rejected commit")
				}
			}
		})
	}

	// 500s then recovery, without any spec change: transient errors are retried with backoff.
	e.gh.FailNextRepo(org, repo, ghtest.KindResolve, http.StatusInternalServerError, http.StatusInternalServerError)
	sha := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `{"recovered":true}`})
	e.poke(t, ns, "site")
	e.hasEvent(t, ns, "site", corev1.EventTypeWarning, source.ReasonUnavailable, "HTTP 500")
	df := e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, func(d *decov1.Decofile) error {
		if d.Status.GitHubCommit != sha {
			return errorf("at %s", d.Status.GitHubCommit)
		}
		return nil
	})
	if got := e.configMap(t, ns, "site").Data[decov1.KeyJSON]; got != `{"a":{"recovered":true}}` || df.Status.Timestamp <= 0 {
		t.Fatalf("after recovery: %s", got)
	}
}
