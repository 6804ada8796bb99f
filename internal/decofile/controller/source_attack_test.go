package controller_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/source/ghtest"
	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// Loopback addresses of the URL policy tests: the package's manager allows the first (as a
// platform would allow its own git host) and nothing else on loopback but 127.0.0.1, where the
// package's stand-in servers run.
const (
	allowedGitHost = "127.0.3.7"
	refusedGitHost = "127.0.3.8"
)

// sourceTimeout is the package manager's --source-timeout: short, so a tarpit test is quick.
const sourceTimeout = 10 * time.Second

// testEgress is the source URL policy of the package's manager: plain HTTP to the stand-in
// servers on 127.0.0.1 and to allowedGitHost, nothing else private.
var testEgress = egress.MustNew(egress.Config{
	Schemes:  []string{"http", "https"},
	Hosts:    []string{"127.0.0.1", allowedGitHost},
	Settings: source.EgressSettings,
})

// managerLogs holds everything the package's manager logs, so tests can check what reached it.
var managerLogs logSink

type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		fmt.Fprintln(&s.buf, prefix, args)
	}, funcr.Options{Verbosity: 10})
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func uniqueMarker() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "MARKER-" + hex.EncodeToString(b)
}

// internalAdmin is an internal service on 127.0.0.1 that answers 404 with mark in its body.
func internalAdmin(t *testing.T, mark string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, "no such page; internal token "+mark)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

func gitDecofile(ns, name, url string) *decov1.Decofile {
	return &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceGit, Git: &decov1.GitSource{URL: url, Ref: "main", Path: "blocks"}}}
}

// assertNowhere checks that text is in no Decofile status, Event or manager log line of ns.
func (e *env) assertNowhere(t *testing.T, ns, text string) {
	t.Helper()
	ctx := context.Background()
	var dfs decov1.DecofileList
	if err := e.c.Client.List(ctx, &dfs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, df := range dfs.Items {
		raw, _ := json.Marshal(df.Status)
		if strings.Contains(string(raw), text) {
			t.Errorf("Decofile %s status holds %q: %s", df.Name, text, raw)
		}
	}
	var evs eventsv1.EventList
	if err := e.c.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var core corev1.EventList
	if err := e.c.Client.List(ctx, &core, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if strings.Contains(ev.Note, text) {
			t.Errorf("Event %s/%s holds %q: %s", ev.Reason, ev.Name, text, ev.Note)
		}
	}
	for _, ev := range core.Items {
		if strings.Contains(ev.Message, text) {
			t.Errorf("Event %s/%s holds %q: %s", ev.Reason, ev.Name, text, ev.Message)
		}
	}
	if strings.Contains(managerLogs.String(), text) {
		t.Errorf("the manager logged %q", text)
	}
}

// TestSSRFReadBackAsTenant: a tenant points a git Decofile at an internal HTTP service the
// platform allows; the service's answer never comes back to the tenant, in status or Events,
// nor goes to the manager's logs. The status says the HTTP status and what to check.
func TestSSRFReadBackAsTenant(t *testing.T) {
	e := start(t)
	tenant := e.c.Tenant(t, "ssrf", nil)
	mark := uniqueMarker()
	base := internalAdmin(t, mark)
	if err := tenant.Client.Create(context.Background(), gitDecofile(tenant.Namespace, "site", base+"/internal/admin")); err != nil {
		t.Fatal(err)
	}
	df := e.waitReady(t, tenant.Namespace, "site", metav1.ConditionFalse, source.ReasonNotFound, nil)
	e.hasEvent(t, tenant.Namespace, "site", corev1.EventTypeWarning, source.ReasonNotFound, "")
	e.assertNowhere(t, tenant.Namespace, mark)
	if msg := ready(df).Message; !strings.Contains(msg, "HTTP 404") || !strings.Contains(msg, "spec.git.url") {
		t.Errorf("the message does not say the HTTP status and what to check: %s", msg)
	}
}

// TestLoopbackRemoteRefusedAsTenant: a git URL on a loopback address the platform did not allow
// is refused before anything is sent, naming the setting; the same remote on an allowed address
// is delivered.
func TestLoopbackRemoteRefusedAsTenant(t *testing.T) {
	e := start(t)
	tenant := e.c.Tenant(t, "loopback", nil)
	ctx := context.Background()
	var urls []string
	for _, host := range []string{refusedGitHost, allowedGitHost} {
		remote := testenv.GitRemote(t, servers.GitRemoteOptions{Host: host})
		url, err := remote.CreateRepo("site", "main")
		if err != nil {
			t.Fatal(err)
		}
		work := t.TempDir()
		testenv.Git(t, work, "init", "-q", "-b", "main")
		testenv.CommitFiles(t, work, "content", map[string]string{"blocks/a.json": `{"v":1}`})
		testenv.Git(t, work, "push", "-q", url, "main")
		urls = append(urls, url)
	}
	if err := tenant.Client.Create(ctx, gitDecofile(tenant.Namespace, "refused", urls[0])); err != nil {
		t.Fatal(err)
	}
	df := e.waitReady(t, tenant.Namespace, "refused", metav1.ConditionFalse, source.ReasonNotAllowed, nil)
	// The suggestion names the remote's host:port, not the bare host (which opens every port).
	refused, err := url.Parse(urls[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"loopback", "add " + refused.Host + " to --source-allowed-hosts"} {
		if !strings.Contains(ready(df).Message, m) {
			t.Errorf("message %q does not mention %q", ready(df).Message, m)
		}
	}
	e.hasEvent(t, tenant.Namespace, "refused", corev1.EventTypeWarning, source.ReasonNotAllowed, "--source-allowed-hosts")

	if err := tenant.Client.Create(ctx, gitDecofile(tenant.Namespace, "allowed", urls[1])); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, tenant.Namespace, "allowed", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
}

// TestCrossTenantPrivateRepoNeedsGrant: the operator's GitHub token reads private repositories
// of an allowed org; a tenant gets it only for the repositories the platform granted its
// namespace (Namespace annotation), so it cannot read another tenant's private repository.
func TestCrossTenantPrivateRepoNeedsGrant(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	victimRepo := "victim-" + uniqueMarker()[7:15]
	e.gh.Private(allowedOrg, victimRepo, fallbackToken)
	e.gh.Push(allowedOrg, victimRepo, "main", map[string]string{".deco/blocks/secret.json": `{"private":true}`})

	attacker := e.c.Tenant(t, "attacker", map[string]string{source.AnnotationGitHubRepos: allowedOrg + "/attacker-site"})
	if err := attacker.Client.Create(ctx, githubDecofile(attacker.Namespace, allowedOrg, victimRepo, "main", "")); err != nil {
		t.Fatal(err)
	}
	df := e.waitReady(t, attacker.Namespace, "site", metav1.ConditionFalse, source.ReasonNotFound, nil)
	for _, m := range []string{"spec.github.secret", source.AnnotationGitHubRepos} {
		if !strings.Contains(ready(df).Message, m) {
			t.Errorf("message %q does not mention %q", ready(df).Message, m)
		}
	}
	for _, a := range e.gh.RepoAuthorizations(allowedOrg, victimRepo, ghtest.KindResolve) {
		if a != "" {
			t.Fatalf("the operator's token was sent for a repository not granted to the namespace: %q", a)
		}
	}

	owner := e.c.Tenant(t, "owner", map[string]string{source.AnnotationGitHubRepos: allowedOrg + "/" + victimRepo})
	if err := owner.Client.Create(ctx, githubDecofile(owner.Namespace, allowedOrg, victimRepo, "main", "")); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, owner.Namespace, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	if got := e.configMap(t, owner.Namespace, "site").Data[decov1.KeyJSON]; got != `{"secret":{"private":true}}` {
		t.Fatalf("granted namespace got %s", got)
	}
}

// gitRemoteOn starts a git remote on host with repository "site" whose main holds files, pushed
// into the bare folder (the CGI stand-in cannot take the chunked bodies of big pushes).
func gitRemoteOn(t *testing.T, host string, files map[string]string) (remote *servers.GitRemote, url, sha string) {
	t.Helper()
	remote = testenv.GitRemote(t, servers.GitRemoteOptions{Host: host})
	url, err := remote.CreateRepo("site", "main")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	testenv.Git(t, work, "init", "-q", "-b", "main")
	sha = testenv.CommitFiles(t, work, "content", files)
	testenv.Git(t, work, "push", "-q", remote.RepoDir("site"), "main")
	return remote, url, sha
}

// listenOn listens on a free port of host; closed when the test ends.
func listenOn(t *testing.T, host string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestTarpitRemoteAsTenant: a remote that accepts connections and never answers costs one
// delivery the source timeout, then a retried SourceUnavailable naming the setting.
func TestTarpitRemoteAsTenant(t *testing.T) {
	e := start(t)
	tenant := e.c.Tenant(t, "tarpit", nil)
	stopRetriesAtEnd(t, e, tenant.Namespace)
	l := listenOn(t, allowedGitHost)
	held := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held <- c // never answered
		}
	}()
	t.Cleanup(func() {
		for len(held) > 0 {
			_ = (<-held).Close()
		}
	})
	if err := tenant.Client.Create(context.Background(), gitDecofile(tenant.Namespace, "site", "http://"+l.Addr().String()+"/site.git")); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, tenant.Namespace, "site", metav1.ConditionFalse, source.ReasonUnavailable, nil)
	// The attempt that ran says which flag bounded it. Ready may say "remote busy" by now: the
	// retries that follow find the slot of slow remotes taken while other tests' hang.
	e.hasEvent(t, tenant.Namespace, "site", corev1.EventTypeWarning, source.ReasonUnavailable, "--source-timeout")
}

// TestPackBombAsTenant: a repository with a big blob beside the block files is cut off at the
// archive byte limit while it arrives.
func TestPackBombAsTenant(t *testing.T) {
	e := start(t)
	tenant := e.c.Tenant(t, "packbomb", nil)
	_, url, _ := gitRemoteOn(t, allowedGitHost, map[string]string{"blocks/a.json": `{}`, "assets/video.bin": randomBytes(maxArchiveBytes + 1<<20)})
	if err := tenant.Client.Create(context.Background(), gitDecofile(tenant.Namespace, "site", url)); err != nil {
		t.Fatal(err)
	}
	df := e.waitReady(t, tenant.Namespace, "site", metav1.ConditionFalse, source.ReasonLimitExceeded, nil)
	for _, m := range []string{fmt.Sprintf("more than %d bytes", maxArchiveBytes), "--decofile-max-archive-bytes"} {
		if !strings.Contains(ready(df).Message, m) {
			t.Errorf("message %q does not mention %q", ready(df).Message, m)
		}
	}
}

// TestRedirectToInternalAsTenant: an allowed git host cannot redirect the operator to an
// address that is not allowed.
func TestRedirectToInternalAsTenant(t *testing.T) {
	e := start(t)
	tenant := e.c.Tenant(t, "redirect", nil)
	_, internalURL, _ := gitRemoteOn(t, refusedGitHost, map[string]string{"blocks/a.json": `{"internal":true}`})
	l := listenOn(t, allowedGitHost)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, strings.TrimSuffix(internalURL, "/site.git")+r.URL.RequestURI(), http.StatusFound)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	if err := tenant.Client.Create(context.Background(), gitDecofile(tenant.Namespace, "site", "http://"+l.Addr().String()+"/site.git")); err != nil {
		t.Fatal(err)
	}
	df := e.waitReady(t, tenant.Namespace, "site", metav1.ConditionFalse, source.ReasonNotAllowed, nil)
	if msg := ready(df).Message; !strings.Contains(msg, refusedGitHost) || !strings.Contains(msg, "--source-allowed-hosts") {
		t.Fatalf("message %q does not name the refused address and the setting", msg)
	}
}

// TestUnadvertisedSHAAsTenant: pinning a commit the remote does not have fails with NotFound
// without downloading the remote's other branches.
func TestUnadvertisedSHAAsTenant(t *testing.T) {
	e := start(t)
	tenant := e.c.Tenant(t, "sha", nil)
	remote, _, _ := gitRemoteOn(t, "127.0.0.1", map[string]string{"blocks/a.json": `{}`})
	work := t.TempDir()
	testenv.Git(t, work, "clone", "-q", remote.RepoDir("site"), ".")
	testenv.Git(t, work, "checkout", "-q", "-b", "heavy")
	testenv.CommitFiles(t, work, "heavy", map[string]string{"assets/big.bin": randomBytes(1 << 20)})
	testenv.Git(t, work, "push", "-q", remote.RepoDir("site"), "heavy")

	var served atomic.Int64
	target, _ := url.Parse(remote.BaseURL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &served}
		return nil
	}
	l := listenOn(t, allowedGitHost)
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	missing := strings.Repeat("d", 40)
	df := gitDecofile(tenant.Namespace, "site", "http://"+l.Addr().String()+"/site.git")
	df.Spec.Git.Ref = missing
	if err := tenant.Client.Create(context.Background(), df); err != nil {
		t.Fatal(err)
	}
	got := e.waitReady(t, tenant.Namespace, "site", metav1.ConditionFalse, source.ReasonNotFound, nil)
	if !strings.Contains(ready(got).Message, missing) {
		t.Errorf("message %q does not name the commit", ready(got).Message)
	}
	if n := served.Load(); n > 256<<10 {
		t.Fatalf("the remote served %d bytes for a commit it does not have: every branch was fetched", n)
	}
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// heldRequests counts the requests hanging hosts hold now and the ones they have let go.
type heldRequests struct {
	now, released atomic.Int64
}

// Load returns how many requests are held now.
func (h *heldRequests) Load() int64 { return h.now.Load() }

// hangingHost starts an HTTP server on allowedGitHost that accepts every request and never
// answers it, counting the requests in held until the client gives up; it returns the server's
// base URL.
// stopRetriesAtEnd deletes the Decofiles of ns when the test ends: the package's tests share one
// manager, and Decofiles retrying dead remotes would take the retrieval slots of the next test.
func stopRetriesAtEnd(t *testing.T, e *env, ns string) {
	t.Cleanup(func() { _ = e.c.Client.DeleteAllOf(context.Background(), &decov1.Decofile{}, client.InNamespace(ns)) })
}

// waitDeliveryIdle waits until no delivery worker is reconciling (controller-runtime's
// active_workers gauge), for at most two source timeouts; past that it goes on and says so.
func waitDeliveryIdle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * sourceTimeout)
	for {
		busy := deliveryWorkersBusy()
		if busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("%v delivery workers still busy after %s; going on", busy, 2*sourceTimeout)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// deliveryWorkersBusy is how many delivery workers are reconciling now.
func deliveryWorkersBusy() float64 {
	return deliveryMetric("controller_runtime_active_workers").GetGauge().GetValue()
}

func hangingHost(t *testing.T, held *heldRequests) string {
	t.Helper()
	l := listenOn(t, allowedGitHost)
	srv := &http.Server{Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		held.now.Add(1)
		<-r.Context().Done()
		held.now.Add(-1)
		held.released.Add(1)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

// TestHangingHostsOfTwoTenantsAsTenants: two tenants point Decofiles at two hosts each that
// accept requests and never answer. They hold the delivery workers for one --source-timeout;
// after that their retrievals hold one request at a time together, whatever host they name, and
// a third tenant's Decofile is delivered meanwhile.
func TestHangingHostsOfTwoTenantsAsTenants(t *testing.T) {
	e := start(t)
	var held heldRequests
	hosts := []string{hangingHost(t, &held), hangingHost(t, &held), hangingHost(t, &held), hangingHost(t, &held)}
	for i, tn := range []*testenv.Tenant{e.c.Tenant(t, "hang-a", nil), e.c.Tenant(t, "hang-b", nil)} {
		stopRetriesAtEnd(t, e, tn.Namespace)
		for j, host := range hosts[2*i : 2*i+2] {
			for k := range 3 {
				if err := tn.Client.Create(context.Background(), gitDecofile(tn.Namespace, fmt.Sprintf("site-%d-%d", j, k), host+"/site.git")); err != nil {
					t.Fatalf("tenant creates its Decofile: %v", err)
				}
			}
		}
	}
	testenv.Eventually(t, waitFor, func() error {
		if n := held.Load(); n < 3 {
			return fmt.Errorf("%d requests held by the hanging hosts", n)
		}
		return nil
	})
	// The retrievals of that first round end with the timeout; on a busy machine some started
	// late, before their tenant counted as hanging, and run to their own timeout: wait them out,
	// then watch for one timeout more.
	time.Sleep(sourceTimeout + 2*time.Second)
	testenv.Eventually(t, sourceTimeout+5*time.Second, func() error {
		if n := held.Load(); n > 1 {
			return fmt.Errorf("%d requests still held by the first round", n)
		}
		return nil
	})
	_, healthyURL, _ := gitRemoteOn(t, allowedGitHost, map[string]string{"blocks/home.json": `{"title":"home"}`})
	victim := e.c.Tenant(t, "hang-victim", nil)
	if err := victim.Client.Create(context.Background(), gitDecofile(victim.Namespace, "site", healthyURL)); err != nil {
		t.Fatal(err)
	}
	// A request the client gave up on is counted until the server notices the closed
	// connection, which on a busy machine can trail the next request by a moment: a count
	// counts once it held for three samples in a row (40 ms).
	var most, samples, run, prev int64
	until := time.Now().Add(sourceTimeout + 2*time.Second)
	delivered := time.Duration(0)
	start := time.Now()
	for time.Now().Before(until) {
		n := held.Load()
		if n == prev {
			run++
		} else {
			run, prev = 1, n
		}
		if run >= 3 {
			most = max(most, n)
		}
		samples++
		if delivered == 0 && e.isReady(client.ObjectKey{Namespace: victim.Namespace, Name: "site"}) {
			delivered = time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if most > 1 {
		t.Errorf("after their first timeout the two tenants' retrievals held %d requests at once, want at most 1", most)
	}
	if delivered == 0 {
		t.Errorf("another tenant's Decofile was not delivered within %s while the hanging hosts were retried", sourceTimeout+2*time.Second)
	}
	t.Logf("%d samples over one timeout: at most %d request held; another tenant's Decofile Ready after %s", samples, most, delivered.Round(time.Millisecond))
}

// TestRetrievalsLeaveWorkersToInlineAsTenants: three tenants point four Decofiles each at hosts
// that never answer: more Decofiles than workers (8 by default). The retrievals they hold stay at
// the bound (4 by default), the others wait for a slot without holding a worker, and a fourth
// tenant's inline Decofile is delivered meanwhile: before any held request is let go, so it
// cannot have waited for a worker one of them freed.
func TestRetrievalsLeaveWorkersToInlineAsTenants(t *testing.T) {
	e := start(t)
	// The fourth tenant exists first: making a user and waiting for its binding is not delivery.
	other := e.c.Tenant(t, "hold-inline", nil)
	// The three tenants exist before any Decofile: were each made between Decofiles, the first
	// retrievals could time out (and let their requests go) before the last were created.
	var holders []*testenv.Tenant
	for i := range 3 {
		holders = append(holders, e.c.Tenant(t, fmt.Sprintf("hold-%d", i), nil))
	}
	// The package's tests share one manager: an earlier test's retrievals, still running out
	// their timeout, would hold slots this test counts on.
	waitDeliveryIdle(t)
	var held heldRequests
	for _, tn := range holders {
		stopRetriesAtEnd(t, e, tn.Namespace)
		for j := range 4 {
			if err := tn.Client.Create(context.Background(), gitDecofile(tn.Namespace, fmt.Sprintf("site-%d", j), hangingHost(t, &held)+"/site.git")); err != nil {
				t.Fatalf("tenant creates its Decofile: %v", err)
			}
		}
	}
	testenv.Eventually(t, waitFor, func() error {
		if n := held.Load(); n < controller.DefaultMaxConcurrentRetrievals {
			return fmt.Errorf("%d requests held by the hanging hosts", n)
		}
		return nil
	})
	if n := held.released.Load(); n > 0 {
		t.Fatalf("%d held requests were let go before the bound was reached; the test cannot tell whether a freed worker served the inline Decofile", n)
	}
	df := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: other.Namespace},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(map[string]string{"home": `{"title":"home"}`})}}
	created := time.Now()
	if err := other.Client.Create(context.Background(), df); err != nil {
		t.Fatal(err)
	}
	var most int64
	delivered := time.Duration(0)
	for delivered == 0 && held.released.Load() == 0 {
		most = max(most, held.Load())
		if e.isReady(client.ObjectKeyFromObject(df)) {
			delivered = time.Since(created)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if most > controller.DefaultMaxConcurrentRetrievals {
		t.Errorf("the hanging hosts held %d requests at once, want at most %d", most, controller.DefaultMaxConcurrentRetrievals)
	}
	if delivered == 0 {
		t.Fatalf("the inline Decofile was not delivered before the first held request timed out (%s after it was created)", time.Since(created).Round(time.Millisecond))
	}
	t.Logf("at most %d requests held; the inline Decofile Ready %s after it was created, while they were held", most, delivered.Round(time.Millisecond))
}
