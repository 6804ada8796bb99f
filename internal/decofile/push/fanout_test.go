package push_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/push"
	"github.com/siteops/siteops/internal/decofile/rollout"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/shard"
	"github.com/siteops/siteops/internal/testenv"
)

// Settings of the manager the fan-out tests share.
const (
	fanoutSecret = "fanout-push-secret"
	// fanoutTimeout is the manager's --source-timeout: longer than any wait of the tests, so a
	// remote that hangs holds its workers for the whole test unless the gate lets them go.
	fanoutTimeout = 5 * time.Minute
	fanoutWait    = 60 * time.Second
	// labelFanout marks the Decofiles of one test or benchmark, to list them.
	labelFanout = "test.siteops.dev/fanout"
)

var loopback = egress.MustNew(egress.Config{Schemes: []string{"http"}, Hosts: []string{"127.0.0.1"}, Settings: source.EgressSettings})

// fanoutEnv is the package's API server with a manager running the delivery controller at its
// default concurrency and a push receiver.
type fanoutEnv struct {
	c       *testenv.Cluster
	pushURL string
}

var (
	fanout     *fanoutEnv
	fanoutOnce sync.Once
)

func startFanout(t testing.TB) *fanoutEnv {
	t.Helper()
	c := testenv.APIServer(t)
	fanoutOnce.Do(func() {
		// As ctrl.GetConfig gives the siteops-manager command: no client-side rate limit (the
		// API server's priority and fairness applies).
		cfg := rest.CopyConfig(c.Config)
		cfg.QPS = -1
		mgr, err := ctrl.NewManager(cfg, ctrl.Options{
			Scheme:     c.Scheme,
			Logger:     logr.Discard(),
			Metrics:    metricsserver.Options{BindAddress: "0"},
			Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		})
		if err != nil {
			t.Fatal(err)
		}
		// 200 Decofiles of one namespace may follow the pushed repository.
		trigger, err := controller.NewPushTrigger(context.Background(), mgr, 1000, shard.Selector{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rcv, err := push.NewReceiver(push.Config{Listener: l, Secret: []byte(fanoutSecret), Trigger: trigger, Rate: 1000, Burst: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if err := mgr.Add(rcv); err != nil {
			t.Fatal(err)
		}
		err = controller.Setup(mgr, controller.Options{
			Push:    trigger,
			Git:     &source.Git{Egress: loopback, Timeout: fanoutTimeout},
			Encode:  encode.Options{},
			Rollout: rollout.Settler{Reader: mgr.GetAPIReader()},
		})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			if err := mgr.Start(context.Background()); err != nil {
				panic(fmt.Sprintf("manager stopped: %v", err))
			}
		}()
		fanout = &fanoutEnv{c: c, pushURL: "http://" + l.Addr().String() + push.Path}
	})
	if fanout == nil {
		t.Fatal("manager did not start")
	}
	return fanout
}

// proxiedRemote is a git remote (git http-backend) behind an HTTP server on loopback that
// counts the requests and, while held, does not answer them: a remote that hangs.
type proxiedRemote struct {
	git     *servers.GitRemote
	base    string // the proxy's http://host:port
	work    string // a work tree pushing to the repository
	name    string
	held    atomic.Pointer[holding]
	delay   atomic.Int64 // nanoseconds every request waits before it is answered
	waiting atomic.Int64 // requests held now
	fetches atomic.Int64 // POST git-upload-pack: one per fetch of a commit
	lists   atomic.Int64 // GET info/refs: one per resolve and one per fetch
}

func newProxiedRemote(t testing.TB, name string) *proxiedRemote {
	t.Helper()
	r := &proxiedRemote{git: testenv.GitRemote(t, servers.GitRemoteOptions{}), name: name, work: t.TempDir()}
	if _, err := r.git.CreateRepo(name, "main"); err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(r.git.BaseURL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch {
		case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/git-upload-pack"):
			r.fetches.Add(1)
		case strings.HasSuffix(req.URL.Path, "/info/refs") && req.URL.Query().Get("service") == "git-upload-pack":
			r.lists.Add(1)
		}
		if d := time.Duration(r.delay.Load()); d > 0 {
			r.waiting.Add(1)
			select {
			case <-time.After(d):
			case <-req.Context().Done():
			}
			r.waiting.Add(-1)
		}
		if held := r.held.Load(); held != nil && strings.HasPrefix(req.URL.Path, held.prefix) {
			r.waiting.Add(1)
			select {
			case <-held.until:
			case <-req.Context().Done():
			}
			r.waiting.Add(-1)
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.base = srv.URL
	testenv.Git(t, r.work, "init", "-q", "-b", "main")
	return r
}

// URL is the repository's URL through the proxy.
func (r *proxiedRemote) URL() string { return r.base + "/" + r.name + ".git" }

// holding is a hold of a remote's requests whose path starts with prefix, until until closes.
type holding struct {
	prefix string
	until  chan struct{}
}

// hold makes the remote stop answering until the returned release is called.
func (r *proxiedRemote) hold() (release func()) { return r.holdPath("/") }

// holdPath makes the remote stop answering requests under path prefix (its other repositories
// answer) until the returned release is called.
func (r *proxiedRemote) holdPath(prefix string) (release func()) {
	h := &holding{prefix: prefix, until: make(chan struct{})}
	r.held.Store(h)
	var once sync.Once
	return func() { once.Do(func() { r.held.Store(nil); close(h.until) }) }
}

// commit pushes a commit changing the block file to v, straight to the git remote.
func (r *proxiedRemote) commit(t testing.TB, v int) string {
	t.Helper()
	sha := testenv.CommitFiles(t, r.work, fmt.Sprintf("v%d", v), map[string]string{"blocks/site.json": fmt.Sprintf(`{"v":%d}`, v)})
	testenv.Git(t, r.work, "push", "-q", r.git.RepoURL(r.name), "main")
	return sha
}

// head is the commit the repository's main branch is at.
func (r *proxiedRemote) head(t testing.TB) string {
	t.Helper()
	return testenv.Git(t, r.work, "rev-parse", "HEAD")
}

// sendPush sends the push event Gitea and Forgejo send for the repository's main branch.
func (e *fanoutEnv) sendPush(t testing.TB, r *proxiedRemote, after string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"ref": "refs/heads/main", "after": after,
		"repository": map[string]string{"full_name": r.name, "clone_url": r.URL()}})
	mac := hmac.New(sha256.New, []byte(fanoutSecret))
	mac.Write(body)
	req, _ := http.NewRequest(http.MethodPost, e.pushURL, bytes.NewReader(body))
	req.Header.Set("X-Gitea-Event", "push")
	req.Header.Set("X-Gitea-Delivery", "fanout-"+after)
	req.Header.Set("X-Gitea-Signature", hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("push event: HTTP %d", resp.StatusCode)
	}
}

// follow creates, as c, n Decofiles in ns following r's main branch, labelled group, polling
// hourly so that only a push brings a change.
func (e *fanoutEnv) follow(t testing.TB, c client.Client, ns, group string, r *proxiedRemote, n int) {
	t.Helper()
	for i := range n {
		df := &decov1.Decofile{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", group, i), Namespace: ns, Labels: map[string]string{labelFanout: group}},
			Spec: decov1.DecofileSpec{Source: decov1.SourceGit, Interval: &metav1.Duration{Duration: time.Hour},
				Git: &decov1.GitSource{URL: r.URL(), Ref: "main", Path: "blocks"}},
		}
		if err := c.Create(context.Background(), df); err != nil {
			t.Fatal(err)
		}
	}
}

// atCommit counts the Decofiles of group that are Ready at sha, and all of the group.
func (e *fanoutEnv) atCommit(ns, group, sha string) (ready, all int, err error) {
	var list decov1.DecofileList
	if err := e.c.Client.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{labelFanout: group}); err != nil {
		return 0, 0, err
	}
	for _, df := range list.Items {
		if df.Status.GitHubCommit == sha && df.Status.ObservedGeneration == df.Generation &&
			meta.IsStatusConditionTrue(df.Status.Conditions, decov1.ConditionReady) {
			ready++
		}
	}
	return ready, len(list.Items), nil
}

// anyReady reports whether a Decofile of group is Ready.
func (e *fanoutEnv) anyReady(t testing.TB, ns, group string) bool {
	t.Helper()
	var list decov1.DecofileList
	if err := e.c.Client.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{labelFanout: group}); err != nil {
		t.Fatal(err)
	}
	for _, df := range list.Items {
		if meta.IsStatusConditionTrue(df.Status.Conditions, decov1.ConditionReady) {
			return true
		}
	}
	return false
}

// waitAtCommit waits until every Decofile of group is Ready at sha; while it waits, stillHeld
// (when set) must hold.
func (e *fanoutEnv) waitAtCommit(t testing.TB, ns, group, sha string, n int, stillHeld func() error) {
	t.Helper()
	testenv.Eventually(t, fanoutWait, func() error {
		if stillHeld != nil {
			if err := stillHeld(); err != nil {
				t.Fatal(err)
			}
		}
		ready, all, err := e.atCommit(ns, group, sha)
		if err != nil {
			return err
		}
		if ready != n || all != n {
			return fmt.Errorf("%d of %d Decofiles Ready at %s", ready, n, sha)
		}
		return nil
	})
}

// A tenant points more Decofiles than there are workers at a remote that accepts requests and
// never answers. Meanwhile another tenant's Decofiles of a healthy remote are delivered, after
// their creation and after a push, and the healthy repository is fetched once per commit however
// many Decofiles follow it. Once the hanging remote answers again its Decofiles are delivered too.
func TestPushNotBlockedBySlowRemote(t *testing.T) {
	e := startFanout(t)
	attacker, victim := e.c.Tenant(t, "fanouttarpit", nil), e.c.Tenant(t, "fanout", nil)
	slow, healthy := newProxiedRemote(t, "slow"), newProxiedRemote(t, "healthy")
	slow.commit(t, 1)
	first := healthy.commit(t, 1)

	release := slow.hold()
	defer release()
	const slowN, healthyN = 8, 20 // more Decofiles of the hanging remote than workers
	e.follow(t, attacker.Client, attacker.Namespace, "slow", slow, slowN)
	testenv.Eventually(t, fanoutWait, func() error {
		if n := slow.waiting.Load(); n < 1 {
			return fmt.Errorf("%d requests held by the slow remote", n)
		}
		return nil
	})
	stillHeld := func() error {
		if slow.waiting.Load() == 0 {
			return fmt.Errorf("the slow remote holds no request any more")
		}
		if e.anyReady(t, attacker.Namespace, "slow") {
			return fmt.Errorf("a Decofile of the slow remote is Ready although the remote never answered")
		}
		return nil
	}

	ns := victim.Namespace
	e.follow(t, victim.Client, ns, "healthy", healthy, healthyN)
	e.waitAtCommit(t, ns, "healthy", first, healthyN, stillHeld)
	second := healthy.commit(t, 2)
	sent := time.Now()
	e.sendPush(t, healthy, second)
	e.waitAtCommit(t, ns, "healthy", second, healthyN, stillHeld)
	t.Logf("push to all %d Ready: %s, with %d requests held by the slow remote", healthyN, time.Since(sent).Round(time.Millisecond), slow.waiting.Load())
	if got := healthy.fetches.Load(); got != 2 {
		t.Errorf("the healthy repository was fetched %d times for 2 commits followed by %d Decofiles, want once per commit", got, healthyN)
	}

	// The remote answers again and is pushed to: its Decofiles, which backed off, are
	// delivered at once.
	release()
	next := slow.commit(t, 2)
	e.sendPush(t, slow, next)
	e.waitAtCommit(t, attacker.Namespace, "slow", next, slowN, nil)
}

// A tenant points more Decofiles than there are workers at a repository path that never
// answers, on the git host another tenant's site uses. The attacker's retrievals hold one of
// the host's slots, not both, and the other tenant's Decofiles are delivered, after their
// creation and after a push, while the attacker's requests are still held.
func TestSlowRepositoryOnSharedHostAsTenant(t *testing.T) {
	e := startFanout(t)
	attacker, victim := e.c.Tenant(t, "fanoutshared", nil), e.c.Tenant(t, "fanoutvictim", nil)
	shared := newProxiedRemote(t, "shared")
	first := shared.commit(t, 1)
	release := shared.holdPath("/tarpit.git/")
	defer release()

	const slowN, healthyN = 8, 10
	for i := range slowN {
		df := &decov1.Decofile{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("tarpit-%d", i), Namespace: attacker.Namespace, Labels: map[string]string{labelFanout: "tarpit"}},
			Spec: decov1.DecofileSpec{Source: decov1.SourceGit, Interval: &metav1.Duration{Duration: time.Hour},
				Git: &decov1.GitSource{URL: shared.base + "/tarpit.git", Ref: "main", Path: "blocks"}},
		}
		if err := attacker.Client.Create(context.Background(), df); err != nil {
			t.Fatalf("tenant creates Decofile %s: %v", df.Name, err)
		}
	}
	testenv.Eventually(t, fanoutWait, func() error {
		if n := shared.waiting.Load(); n < 1 {
			return fmt.Errorf("%d requests held by the tarpit path", n)
		}
		return nil
	})
	oneSlot := func() error {
		if n := shared.waiting.Load(); n > 1 {
			return fmt.Errorf("the attacker's Decofiles hold %d requests to the shared host at once, want at most 1", n)
		}
		if n := shared.waiting.Load(); n == 0 {
			return fmt.Errorf("the tarpit path holds no request any more")
		}
		return nil
	}
	e.follow(t, victim.Client, victim.Namespace, "shared", shared, healthyN)
	e.waitAtCommit(t, victim.Namespace, "shared", first, healthyN, oneSlot)
	second := shared.commit(t, 2)
	sent := time.Now()
	e.sendPush(t, shared, second)
	e.waitAtCommit(t, victim.Namespace, "shared", second, healthyN, oneSlot)
	t.Logf("push to all %d Ready: %s, beside a tenant's tarpit path on the same host", healthyN, time.Since(sent).Round(time.Millisecond))
}
