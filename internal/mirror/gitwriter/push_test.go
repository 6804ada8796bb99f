package gitwriter

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// pushRequests counts a git remote's push requests as they reach it through a proxy.
type pushRequests struct {
	// adverts are the ref advertisements asked for a push; updates the updates sent.
	adverts, updates atomic.Int64
}

// proxy serves remote through a counting proxy and returns its base URL.
func (c *pushRequests) proxy(t *testing.T, remote *servers.GitRemote) string {
	t.Helper()
	backend, err := url.Parse(remote.BaseURL)
	if err != nil {
		t.Fatal(err)
	}
	next := httputil.NewSingleHostReverseProxy(backend)
	l := testenv.LoopbackListener(t)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Query().Get("service") == "git-receive-pack":
			c.adverts.Add(1)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack"):
			c.updates.Add(1)
		}
		next.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

func (c *pushRequests) counts() (adverts, updates int64) { return c.adverts.Load(), c.updates.Load() }

// Once the writer knows the remote's capabilities a push is one request; when the branch moved
// meanwhile the remote refuses that update, and the writer pushes again the long way, rebuilt
// on what it finds, losing nothing.
func TestPushIsOneRequestOnceTheRemoteIsKnown(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	if _, err := remote.CreateRepo("known", "main"); err != nil {
		t.Fatal(err)
	}
	bare := remote.RepoDir("known")
	var c pushRequests
	repoURL := c.proxy(t, remote) + "/known.git"
	w, _ := startWriter(t, Config{URL: repoURL, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: 20 * time.Millisecond})
	ctx := context.Background()
	for i, name := range []string{"a", "b", "c"} {
		_ = w.Enqueue(ctx, upsert("ns/core/configmaps/"+name+".yaml", name+"\n", name))
		waitCommits(t, bare, i+1)
	}
	if adverts, updates := c.counts(); adverts != 1 || updates != 3 {
		t.Fatalf("3 pushes asked for %d ref advertisements and sent %d updates; want 1 and 3", adverts, updates)
	}

	theirs := pushReadme(t, repoURL) // someone else moves the branch
	adverts, updates := c.counts()
	_ = w.Enqueue(ctx, upsert("ns/core/configmaps/d.yaml", "d\n", "d"))
	waitCommits(t, bare, 5)
	// The update without the advertisement is refused (the branch is not at its old value), the
	// long way finds the branch moved, the writer fetches and rebuilds, and that push is taken.
	if a, u := c.counts(); a-adverts != 2 || u-updates != 2 {
		t.Fatalf("the push after the branch moved asked for %d ref advertisements and sent %d updates; want 2 and 2", a-adverts, u-updates)
	}
	gitOut(t, "", "--git-dir", bare, "merge-base", "--is-ancestor", theirs, "main")
	if files := gitOut(t, "", "--git-dir", bare, "ls-tree", "-r", "--name-only", "main"); files != "README.md\nns/core/configmaps/a.yaml\nns/core/configmaps/b.yaml\nns/core/configmaps/c.yaml\nns/core/configmaps/d.yaml" {
		t.Fatalf("files:\n%s", files)
	}
	gitOut(t, "", "--git-dir", bare, "fsck", "--strict")
}
