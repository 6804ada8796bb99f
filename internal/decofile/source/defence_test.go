package source

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// The attacks of a tenant on the sources: it names the URL of a git remote, so it can point the
// operator at internal services, at servers that never answer or send too much, and at commits
// that make it download everything.

func marker() string { return "MARKER-" + randomHex(24) }

// internalService is an internal HTTP service on a fresh loopback address answering every
// request with status and a body holding mark.
func internalService(t *testing.T, status int, mark string) string {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "internal admin page: "+mark+"\n")
	}), ReadHeaderTimeout: 5 * time.Second}
	l := testenv.LoopbackListener(t)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

// TestErrorBodiesAreNeverShown: what an internal service answers to a git or GitHub request must
// not come back in the error (which becomes the Decofile's status and Events), only its status.
func TestErrorBodiesAreNeverShown(t *testing.T) {
	ctx := context.Background()
	for _, status := range []int{http.StatusNotFound, http.StatusUnauthorized, http.StatusForbidden, http.StatusInternalServerError, http.StatusTeapot, http.StatusOK} {
		mark := marker()
		base := internalService(t, status, mark)
		g := newGit(local, 10*time.Second, Limits{})
		_, err := g.Resolve(ctx, base+"/internal/admin", "main", nil)
		checkHidden(t, "git resolve", status, err, mark)
		_, err = g.Fetch(ctx, base+"/internal/admin", strings.Repeat("a", 40), strings.Repeat("a", 40), "", nil)
		checkHidden(t, "git fetch", status, err, mark)

		gh := newGitHub(base+"/api", base+"/archive", local, 10*time.Second, Limits{})
		_, err = gh.Resolve(ctx, "org", "repo", "main", "tok")
		checkHidden(t, "github resolve", status, err, mark)
		_, err = gh.Fetch(ctx, "org", "repo", strings.Repeat("b", 40), "", "tok")
		checkHidden(t, "github archive", status, err, mark)
	}
}

func checkHidden(t *testing.T, what string, status int, err error, mark string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s against an internal service answering %d succeeded", what, status)
		return
	}
	if strings.Contains(err.Error(), mark) || strings.Contains(err.Error(), "internal admin page") {
		t.Errorf("%s (HTTP %d): the remote's body is in the error: %v", what, status, err)
	}
	if status != http.StatusOK && !strings.Contains(err.Error(), fmt.Sprint(status)) {
		t.Errorf("%s: the error does not say the HTTP status %d: %v", what, status, err)
	}
}

// TestLoopbackAndPrivateURLsRefused: a git URL on a loopback address is refused with the
// setting that would allow it named, and works once the platform allows that host.
func TestLoopbackAndPrivateURLsRefused(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	repoURL, sha := pushedRepo(t, remote, "site", map[string]string{"b/a.json": `{"ok":true}`})
	ctx := context.Background()

	// The suggestion names the remote's port: a bare host would open every port of it.
	host := strings.TrimPrefix(remote.BaseURL, "http://")
	httpOnly := egress.MustNew(egress.Config{Schemes: []string{"http", "https"}, Settings: EgressSettings})
	_, err := newGit(httpOnly, 10*time.Second, Limits{}).Resolve(ctx, repoURL, "main", nil)
	wantReason(t, err, ReasonNotAllowed, "loopback", "add "+host+" to --source-allowed-hosts")
	_, err = newGit(httpOnly, 10*time.Second, Limits{}).Fetch(ctx, repoURL, sha, sha, "b", nil)
	wantReason(t, err, ReasonNotAllowed, "loopback", "--source-allowed-hosts")

	// Private ranges name the second setting too; the address is reached through a name that
	// resolves to it only at connect time, as a rebinding name would.
	private := egress.MustNew(egress.Config{Schemes: []string{"http"}, Settings: EgressSettings})
	_, err = newGit(private, 10*time.Second, Limits{}).Resolve(ctx, "http://10.255.255.1:9/x.git", "main", nil)
	wantReason(t, err, ReasonNotAllowed, "private", "add 10.255.255.1:9 to --source-allowed-hosts", "--source-allow-private-networks")

	// Plain HTTP is not allowed by default.
	_, err = newGit(nil, 10*time.Second, Limits{}).Resolve(ctx, repoURL, "main", nil)
	wantReason(t, err, ReasonNotAllowed, `"http"`, "--source-allowed-schemes")
	_, err = newGit(nil, 10*time.Second, Limits{}).Resolve(ctx, "file:///etc", "main", nil)
	wantReason(t, err, ReasonNotAllowed, `"file"`, "--source-allowed-schemes")

	allowed := egress.MustNew(egress.Config{Schemes: []string{"http"}, Hosts: []string{host}, Settings: EgressSettings})
	got, err := newGit(allowed, 10*time.Second, Limits{}).Resolve(ctx, repoURL, "main", nil)
	if err != nil || got != sha {
		t.Fatalf("allowed host: %s %v", got, err)
	}
	b, err := newGit(allowed, 10*time.Second, Limits{}).Fetch(ctx, repoURL, "main", sha, "b", nil)
	if err != nil || string(b["a"]) != `{"ok":true}` {
		t.Fatalf("allowed host fetch: %v %v", b, err)
	}
}

// TestSSHDestinationsChecked: SSH remotes are dialled through the same policy.
func TestSSHDestinationsChecked(t *testing.T) {
	l := testenv.LoopbackListener(t)
	auth := sshAuth(t)
	ctx := context.Background()
	sshOK := egress.MustNew(egress.Config{Settings: EgressSettings})
	_, err := newGit(sshOK, 10*time.Second, Limits{}).Resolve(ctx, "ssh://git@"+l.Addr().String()+"/org/repo.git", "main", auth)
	wantReason(t, err, ReasonNotAllowed, "loopback", "--source-allowed-hosts")
	_, err = newGit(sshOK, 10*time.Second, Limits{}).Resolve(ctx, "ssh://git@"+l.Addr().String()+"/org/repo.git", "main", nil)
	wantReason(t, err, ReasonCredentials, "identity")

	// Allowed, the connection is made through the same dialer and held to the timeout: the
	// listener accepts and never answers the SSH handshake.
	allowed := egress.MustNew(egress.Config{Hosts: []string{l.Addr().String()}, Settings: EgressSettings})
	start := time.Now()
	_, err = newGit(allowed, time.Second, Limits{}).Resolve(ctx, "ssh://git@"+l.Addr().String()+"/org/repo.git", "main", auth)
	wantReason(t, err, ReasonUnavailable, "--source-timeout")
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("an SSH remote that never answers held the operation %s with a 1s timeout", took)
	}

	// A real SSH server whose host key is not in known_hosts: refused by the client, said so.
	srv := sshServer(t)
	allowed = egress.MustNew(egress.Config{Hosts: []string{srv}, Settings: EgressSettings})
	_, err = newGit(allowed, 10*time.Second, Limits{}).Resolve(ctx, "ssh://git@"+srv+"/org/repo.git", "main", auth)
	wantReason(t, err, ReasonUnauthorized, "SSH handshake failed", "known_hosts")
}

// sshServer is an SSH server on loopback with a fresh host key, accepting any client; it
// serves no git. It returns its address.
func sshServer(t *testing.T) string {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(signer)
	l := testenv.LoopbackListener(t)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				if sc, _, _, err := ssh.NewServerConn(c, cfg); err == nil {
					_ = sc.Close()
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestTarpitRemoteBoundedByTimeout: a remote that accepts connections and never answers holds
// a retrieval for the configured timeout, not forever.
func TestTarpitRemoteBoundedByTimeout(t *testing.T) {
	l := testenv.LoopbackListener(t)
	held := make(chan net.Conn, 64) // kept open, never answered
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held <- c
		}
	}()
	t.Cleanup(func() {
		for len(held) > 0 {
			_ = (<-held).Close()
		}
	})
	base := "http://" + l.Addr().String()
	ctx := context.Background()
	g := newGit(local, time.Second, Limits{})
	gh := newGitHub(base+"/api", base+"/archive", local, time.Second, Limits{})
	sha := strings.Repeat("c", 40)
	calls := map[string]func() error{
		"git resolve":    func() error { _, err := g.Resolve(ctx, base+"/x.git", "main", nil); return err },
		"git fetch":      func() error { _, err := g.Fetch(ctx, base+"/x.git", sha, sha, "", nil); return err },
		"github resolve": func() error { _, err := gh.Resolve(ctx, "o", "r", "main", ""); return err },
		"github archive": func() error { _, err := gh.Fetch(ctx, "o", "r", sha, "", ""); return err },
	}
	for name, call := range calls {
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- call() }()
		select {
		case err := <-done:
			wantReason(t, err, ReasonUnavailable, "--source-timeout")
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("%s took %s with a 1s timeout", name, took)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s still waiting for the tarpit after 20s with a 1s timeout", name)
		}
	}
}

// TestGitPackBombBounded: a repository whose commit holds a big blob beside the block files is
// refused while receiving, past the archive byte limit, with the limit named.
func TestGitPackBombBounded(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	repoURL, sha := pushedRepo(t, remote, "bomb", map[string]string{"b/a.json": `{}`, "assets/big.bin": randomBytes(3 << 20)})
	ctx := context.Background()
	g := newGit(local, 30*time.Second, Limits{ArchiveBytes: 1 << 20})
	_, err := g.Fetch(ctx, repoURL, "main", sha, "b", nil)
	wantReason(t, err, ReasonLimitExceeded, "more than 1048576 bytes", "archive bytes", "--decofile-max-archive-bytes")
	_, err = g.Fetch(ctx, repoURL, sha, sha, "b", nil)
	wantReason(t, err, ReasonLimitExceeded, "more than 1048576 bytes")
}

// TestUnadvertisedSHANotFetchedWithEverything: a commit SHA the remote does not have must not
// make the operator download every branch to look for it.
func TestUnadvertisedSHANotFetchedWithEverything(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	pushedRepo(t, remote, "wide", map[string]string{"b/a.json": `{}`})
	work := t.TempDir()
	testenv.Git(t, work, "clone", "-q", remote.RepoDir("wide"), ".")
	testenv.Git(t, work, "checkout", "-q", "-b", "heavy")
	testenv.CommitFiles(t, work, "heavy", map[string]string{"assets/big.bin": randomBytes(2 << 20)})
	testenv.Git(t, work, "push", "-q", remote.RepoDir("wide"), "heavy")

	var served atomic.Int64
	proxyURL := countingProxy(t, remote.BaseURL, &served)
	ctx := context.Background()
	missing := strings.Repeat("d", 40)
	_, err := newGit(local, 30*time.Second, Limits{}).Fetch(ctx, proxyURL+"/wide.git", missing, missing, "b", nil)
	wantReason(t, err, ReasonNotFound, missing)
	if n := served.Load(); n > 256<<10 {
		t.Fatalf("the remote served %d bytes for a commit it does not have: every branch was fetched", n)
	}
}

// TestRedirectToLoopbackRefused: a remote the platform allows cannot send the operator on to an
// internal address with a redirect, neither for GitHub nor for git over HTTP.
func TestRedirectToLoopbackRefused(t *testing.T) {
	sha := strings.Repeat("e", 40)
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, sha)
	}))
	t.Cleanup(internal.Close)
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	repoURL, _ := pushedRepo(t, remote, "site", map[string]string{"b/a.json": `{}`})

	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/git/") {
			http.Redirect(w, r, repoURL+strings.TrimPrefix(r.URL.Path, "/git/site.git")+"?"+r.URL.RawQuery, http.StatusFound)
			return
		}
		http.Redirect(w, r, internal.URL+r.URL.Path, http.StatusFound)
	}))
	t.Cleanup(front.Close)
	onlyFront := egress.MustNew(egress.Config{Schemes: []string{"http"}, Hosts: []string{front.Listener.Addr().String()}, Settings: EgressSettings})
	ctx := context.Background()

	gh := newGitHub(front.URL+"/api", front.URL+"/archive", onlyFront, 10*time.Second, Limits{})
	got, err := gh.Resolve(ctx, "org", "repo", "main", "")
	if err == nil {
		t.Fatalf("the redirect to %s was followed: resolved %s", internal.URL, got)
	}
	wantReason(t, err, ReasonNotAllowed, "loopback", "--source-allowed-hosts")

	_, err = newGit(onlyFront, 10*time.Second, Limits{}).Resolve(ctx, front.URL+"/git/site.git", "main", nil)
	wantReason(t, err, ReasonNotAllowed, "loopback", "--source-allowed-hosts")
}

// pushedRepo creates repository name on remote with one commit of files on main.
func pushedRepo(t *testing.T, remote *servers.GitRemote, name string, files map[string]string) (repoURL, sha string) {
	t.Helper()
	repoURL, err := remote.CreateRepo(name, "main")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	testenv.Git(t, work, "init", "-q", "-b", "main")
	sha = testenv.CommitFiles(t, work, "content", files)
	// Into the bare folder: the CGI stand-in cannot take the chunked bodies of big pushes.
	testenv.Git(t, work, "push", "-q", remote.RepoDir(name), "main")
	return repoURL, sha
}

// countingProxy forwards to target and counts the response bytes it passes on.
func countingProxy(t *testing.T, target string, served *atomic.Int64) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		resp.Body = &countReader{ReadCloser: resp.Body, n: served}
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

type countReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func randomBytes(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return string(b)
}

// sshAuth is an SSH identity with a known_hosts line (for a host never reached).
func sshAuth(t *testing.T) *GitAuth {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return &GitAuth{Identity: pem.EncodeToMemory(block), KnownHosts: []byte("example.com " + string(ssh.MarshalAuthorizedKey(pub)))}
}
