package push_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/siteops/siteops/internal/decofile/push"
)

const secret = "s3cret-push"

// recorder is the Trigger: it records the keys of every event passed on, and follows the
// repositories in known.
type recorder struct {
	mu    sync.Mutex
	calls [][]string
	known map[string]bool
}

func (r *recorder) Trigger(_ context.Context, keys []string) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, keys)
	n := 0
	for _, k := range keys {
		if r.known[k] {
			n++
		}
	}
	return n, nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// serve starts a receiver on a loopback port and returns its URL.
func serve(t *testing.T, cfg push.Config) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listener = l
	if cfg.Secret == nil {
		cfg.Secret = []byte(secret)
	}
	run(t, cfg)
	return "http://" + l.Addr().String() + push.Path
}

// run starts a receiver of cfg until the test ends.
func run(t *testing.T, cfg push.Config) *push.Receiver {
	t.Helper()
	rcv, err := push.NewReceiver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rcv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("receiver: %v", err)
		}
	})
	return rcv
}

func githubPush(repo, ref, after string) []byte {
	b, _ := json.Marshal(map[string]any{
		"ref": ref, "after": after,
		"repository": map[string]any{
			"full_name": repo, "clone_url": "https://github.com/" + repo + ".git",
			"ssh_url": "git@github.com:" + repo + ".git", "html_url": "https://github.com/" + repo,
		},
	})
	return b
}

func sign(body []byte, key string) string { return hex.EncodeToString(push.Sign(body, []byte(key))) }

func post(t *testing.T, url string, headers map[string]string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func events(provider, result string) float64 {
	mfs, err := crmetrics.Registry.(prometheus.Gatherer).Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "siteops_decofile_push_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["provider"] == provider && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestGitHubSignatures(t *testing.T) {
	rec := &recorder{known: map[string]bool{push.GitHubKey("Acme", "Shop", "main"): true}}
	url := serve(t, push.Config{Trigger: rec})
	body := githubPush("acme/shop", "refs/heads/main", "1111111111111111111111111111111111111111")
	hdr := func(sig, id string) map[string]string {
		h := map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": id}
		if sig != "" {
			h["X-Hub-Signature-256"] = sig
		}
		return h
	}

	// Missing and wrong signatures: 401, counted, nothing passed on.
	before := events(push.ProviderGitHub, push.ResultUnauthorized)
	for name, sig := range map[string]string{
		"missing":        "",
		"wrong secret":   "sha256=" + sign(body, "not-the-secret"),
		"no prefix":      sign(body, secret),
		"not hex":        "sha256=zz",
		"other body":     "sha256=" + sign(append(slices.Clone(body), ' '), secret),
		"sha1 signature": "sha1=" + sign(body, secret)[:40],
	} {
		if code, msg := post(t, url, hdr(sig, "d-"+name), body); code != http.StatusUnauthorized {
			t.Errorf("%s signature: HTTP %d %s, want 401", name, code, msg)
		}
	}
	if got := events(push.ProviderGitHub, push.ResultUnauthorized) - before; got != 6 {
		t.Errorf("unauthorized counter rose by %v, want 6", got)
	}
	if rec.count() != 0 {
		t.Fatalf("an unsigned event was passed on: %v", rec.calls)
	}

	// A good signature: 202, the GitHub key and the git URL keys passed on.
	if code, msg := post(t, url, hdr("sha256="+sign(body, secret), "delivery-1"), body); code != http.StatusAccepted {
		t.Fatalf("signed push: HTTP %d %s", code, msg)
	}
	if rec.count() != 1 {
		t.Fatalf("%d triggers, want 1", rec.count())
	}
	want := []string{push.GitHubKey("acme", "shop", "main"), "git/github.com/acme/shop#main"}
	if !slices.Equal(rec.calls[0], want) {
		t.Fatalf("keys %q, want %q", rec.calls[0], want)
	}

	// A replay of that delivery, and the same signed body under a new delivery ID (the ID is
	// not signed): answered, nothing passed on.
	for _, id := range []string{"delivery-1", "delivery-2"} {
		if code, msg := post(t, url, hdr("sha256="+sign(body, secret), id), body); code != http.StatusOK || !strings.Contains(msg, "already handled") {
			t.Fatalf("replay as %s: HTTP %d %s", id, code, msg)
		}
	}
	if rec.count() != 1 {
		t.Fatalf("a replayed delivery was passed on: %d triggers", rec.count())
	}

	// Ping is answered.
	ping := []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)
	if code, msg := post(t, url, map[string]string{"X-GitHub-Event": "ping", "X-GitHub-Delivery": "p1", "X-Hub-Signature-256": "sha256=" + sign(ping, secret)}, ping); code != http.StatusOK || !strings.Contains(msg, "pong") {
		t.Fatalf("ping: HTTP %d %s", code, msg)
	}
}

func TestUnknownRepositoryIsAcceptedWithNothingDone(t *testing.T) {
	rec := &recorder{known: map[string]bool{push.GitHubKey("acme", "shop", "main"): true}}
	url := serve(t, push.Config{Trigger: rec})
	known := githubPush("acme/shop", "refs/heads/main", "a")
	unknown := githubPush("stranger/elsewhere", "refs/heads/main", "b")
	before := events(push.ProviderGitHub, push.ResultUnmatched)
	code1, msg1 := post(t, url, map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sign(known, secret)}, known)
	code2, msg2 := post(t, url, map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sign(unknown, secret)}, unknown)
	if code2 != http.StatusAccepted {
		t.Fatalf("unknown repository: HTTP %d %s, want 202", code2, msg2)
	}
	// The sender cannot tell which repositories Decofiles follow.
	if code1 != code2 || msg1 != msg2 {
		t.Fatalf("known and unknown repositories answered differently: %d %s / %d %s", code1, msg1, code2, msg2)
	}
	if got := events(push.ProviderGitHub, push.ResultUnmatched) - before; got != 1 {
		t.Fatalf("unmatched counter rose by %v", got)
	}
	// Other events and refs that are neither branches nor tags do nothing.
	issue := []byte(`{"action":"opened"}`)
	if code, _ := post(t, url, map[string]string{"X-GitHub-Event": "issues", "X-Hub-Signature-256": "sha256=" + sign(issue, secret)}, issue); code != http.StatusAccepted {
		t.Fatalf("issues event: HTTP %d", code)
	}
	pr := githubPush("acme/shop", "refs/pull/1/head", "c")
	if code, _ := post(t, url, map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sign(pr, secret)}, pr); code != http.StatusAccepted {
		t.Fatalf("pull ref: HTTP %d", code)
	}
	if n := rec.count(); n != 3 || len(rec.calls[2]) != 0 {
		t.Fatalf("triggers %v: want the pull ref passed on with no keys", rec.calls)
	}
}

func TestGiteaForgejoAndGitLab(t *testing.T) {
	rec := &recorder{}
	url := serve(t, push.Config{Trigger: rec})
	gitea := []byte(`{"ref":"refs/heads/main","repository":{"full_name":"acme/shop","clone_url":"http://git.example:3000/Acme/Shop.git","ssh_url":"ssh://git@git.example:2222/acme/shop.git"}}`)
	for _, p := range []string{"Gitea", "Forgejo"} {
		if code, msg := post(t, url, map[string]string{"X-" + p + "-Event": "push", "X-" + p + "-Delivery": p, "X-" + p + "-Signature": sign(gitea, "wrong")}, gitea); code != http.StatusUnauthorized {
			t.Fatalf("%s with a wrong signature: HTTP %d %s", p, code, msg)
		}
	}
	// Gitea also sends X-GitHub-Event; its own headers decide.
	if code, msg := post(t, url, map[string]string{"X-Gitea-Event": "push", "X-GitHub-Event": "push", "X-Gitea-Delivery": "g1", "X-Gitea-Signature": sign(gitea, secret)}, gitea); code != http.StatusAccepted {
		t.Fatalf("gitea: HTTP %d %s", code, msg)
	}
	want := []string{"git/git.example:3000/acme/shop#main", "git/git.example:2222/acme/shop#main"}
	if len(rec.calls) != 1 || !slices.Equal(rec.calls[0], want) {
		t.Fatalf("gitea keys %q, want %q (no github key from Gitea)", rec.calls, want)
	}

	gitlab := []byte(`{"object_kind":"tag_push","ref":"refs/tags/v1.2","project":{"path_with_namespace":"acme/shop","git_http_url":"https://gitlab.example/acme/shop.git","git_ssh_url":"git@gitlab.example:acme/shop.git","web_url":"https://gitlab.example/acme/shop"}}`)
	if code, _ := post(t, url, map[string]string{"X-Gitlab-Event": "Tag Push Hook"}, gitlab); code != http.StatusUnauthorized {
		t.Fatalf("gitlab without token: HTTP %d", code)
	}
	if code, _ := post(t, url, map[string]string{"X-Gitlab-Event": "Tag Push Hook", "X-Gitlab-Token": "wrong"}, gitlab); code != http.StatusUnauthorized {
		t.Fatalf("gitlab with a wrong token: HTTP %d", code)
	}
	if code, msg := post(t, url, map[string]string{"X-Gitlab-Event": "Tag Push Hook", "X-Gitlab-Token": secret, "X-Gitlab-Event-UUID": "u1"}, gitlab); code != http.StatusAccepted {
		t.Fatalf("gitlab: HTTP %d %s", code, msg)
	}
	if len(rec.calls) != 2 || !slices.Equal(rec.calls[1], []string{"git/gitlab.example/acme/shop#v1.2"}) {
		t.Fatalf("gitlab keys %q", rec.calls)
	}
	// A GitLab replay: same event UUID, different (unsigned) body.
	if code, _ := post(t, url, map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": secret, "X-Gitlab-Event-UUID": "u1"}, bytes.Replace(gitlab, []byte("v1.2"), []byte("v1.3"), 1)); code != http.StatusOK {
		t.Fatalf("gitlab replay: HTTP %d", code)
	}
	if len(rec.calls) != 2 {
		t.Fatalf("gitlab replay passed on")
	}
}

func TestBodyAndRateBounds(t *testing.T) {
	rec := &recorder{}
	url := serve(t, push.Config{Trigger: rec, MaxBodyBytes: 1024, Rate: 0.001, Burst: 3})
	big := githubPush("acme/shop", "refs/heads/main", strings.Repeat("x", 2048))
	if code, _ := post(t, url, map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sign(big, secret)}, big); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversize body: HTTP %d, want 413", code)
	}
	// The burst is 3 (one already spent): the next two pass, then 429.
	var codes []int
	for i := range 4 {
		b := githubPush("acme/shop", "refs/heads/main", fmt.Sprint(i))
		code, _ := post(t, url, map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sign(b, secret)}, b)
		codes = append(codes, code)
	}
	if !slices.Equal(codes, []int{202, 202, 429, 429}) {
		t.Fatalf("codes %v, want [202 202 429 429]", codes)
	}
	// Unsigned floods are bounded by the same rate: they cost no body read.
	if code, _ := post(t, url, map[string]string{"X-GitHub-Event": "push"}, big); code != http.StatusTooManyRequests {
		t.Fatalf("flood: HTTP %d, want 429", code)
	}
}

func TestReplayWindowForgets(t *testing.T) {
	rec := &recorder{}
	now := time.Unix(1_800_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	url := serve(t, push.Config{Trigger: rec, ReplayWindow: time.Minute, Now: clock})
	body := githubPush("acme/shop", "refs/heads/main", "z")
	h := map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": "same", "X-Hub-Signature-256": "sha256=" + sign(body, secret)}
	post(t, url, h, body)
	if code, _ := post(t, url, h, body); code != http.StatusOK {
		t.Fatalf("replay within the window: HTTP %d", code)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	if code, _ := post(t, url, h, body); code != http.StatusAccepted {
		t.Fatalf("after the window: HTTP %d, want 202", code)
	}
	if rec.count() != 2 {
		t.Fatalf("%d triggers, want 2", rec.count())
	}
}

func TestRepoIdentity(t *testing.T) {
	for in, want := range map[string]string{
		"https://github.com/Acme/Shop.git":          "github.com/acme/shop",
		"https://user:pw@github.com:443/acme/shop/": "github.com/acme/shop",
		"git@github.com:acme/shop.git":              "github.com/acme/shop",
		"ssh://git@github.com:22/acme/shop.git":     "github.com/acme/shop",
		"http://127.0.0.1:8080/site-x.git":          "127.0.0.1:8080/site-x",
		"http://[::1]:8080/g/site.git":              "[::1]:8080/g/site",
	} {
		if got, ok := push.RepoIdentity(in); !ok || got != want {
			t.Errorf("RepoIdentity(%q) = %q %v, want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{"file:///srv/repo.git", "", "/srv/repo", "https://github.com/"} {
		if got, ok := push.RepoIdentity(bad); ok {
			t.Errorf("RepoIdentity(%q) = %q, want none", bad, got)
		}
	}
}
