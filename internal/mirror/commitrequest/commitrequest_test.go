package commitrequest_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror/commitrequest"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/store"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

var webhookPort int

func TestMain(m *testing.M) {
	flag.Parse()
	opts := servers.APIServerOptions{}
	if !testing.Short() {
		var err error
		if webhookPort, err = servers.FreePort("127.0.0.1"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		vwc := commitrequest.WebhookConfiguration(commitrequest.URLClientConfig("https://127.0.0.1:"+strconv.Itoa(webhookPort), nil))
		opts.Webhooks = envtest.WebhookInstallOptions{
			LocalServingHost:   "127.0.0.1",
			LocalServingPort:   webhookPort,
			ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{vwc},
		}
	}
	testenv.Main(m, opts)
}

// closer stands in for the mirror engine: it records what the controller asks for. The real
// engine is exercised by the mirror's end-to-end tests.
type closer struct {
	mu    sync.Mutex
	calls []call
	fail  error
	// loseOutcome pushes and then reports an error, as a leader gone between its push and its
	// status write would leave the request.
	loseOutcome bool
	pushed      map[types.UID]commitrequest.Closed
}

type call struct {
	target  types.NamespacedName
	request types.UID
	message string
	author  *gitwriter.Signature
}

func (c *closer) CloseWindow(_ context.Context, target types.NamespacedName, request types.UID, message string, author *gitwriter.Signature) (commitrequest.Closed, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, call{target, request, message, author})
	if c.fail != nil {
		return commitrequest.Closed{}, c.fail
	}
	a := gitwriter.Signature{Name: "Mirror", Email: "mirror@example.com"}
	if author != nil {
		a = *author
	}
	res := commitrequest.Closed{Commit: fmt.Sprintf("%040d", len(c.calls)), Author: a}
	if c.pushed == nil {
		c.pushed = map[types.UID]commitrequest.Closed{}
	}
	c.pushed[request] = res
	if c.loseOutcome {
		return commitrequest.Closed{}, errors.New("the push's outcome was lost")
	}
	return res, nil
}

// FindCommit finds what CloseWindow pushed for request, as the branch's trailers would.
func (c *closer) FindCommit(_ context.Context, _ types.NamespacedName, request types.UID) (commitrequest.Closed, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return commitrequest.Closed{}, c.fail
	}
	return c.pushed[request], nil
}

// callsFor counts the CloseWindow calls made for request.
func (c *closer) callsFor(request types.UID) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, call := range c.calls {
		if call.request == request {
			n++
		}
	}
	return n
}

func (c *closer) last() call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[len(c.calls)-1]
}

type fixture struct {
	c      *testenv.Cluster
	redis  *servers.Process
	raw    *redis.Client
	closer *closer
}

// start runs Redis and a manager with the webhook and the controller for the test.
func start(t *testing.T) *fixture {
	t.Helper()
	c := testenv.APIServer(t)
	rds := testenv.Redis(t, servers.RedisOptions{})
	st, err := store.NewRedisStore(store.RedisStoreConfig{Addr: rds.Addr, KeyPrefix: "cr"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	wio := c.Env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme:                 c.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          webhook.NewServer(webhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir}),
	})
	if err != nil {
		t.Fatal(err)
	}
	cl := &closer{}
	if err := commitrequest.Setup(mgr, commitrequest.Options{Authors: st.CommandAuthorStore(), Closer: cl, RetryAfter: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testenv.Eventually(t, 30*time.Second, func() error { return mgr.GetWebhookServer().StartedChecker()(nil) })
	raw := redis.NewClient(&redis.Options{Addr: rds.Addr})
	t.Cleanup(func() { _ = raw.Close() })
	return &fixture{c: c, redis: rds, raw: raw, closer: cl}
}

// TestCommitRequest runs the command flow against a real API server calling the webhook, real
// Redis and a manager running the controller; users have their own client certificates.
func TestCommitRequest(t *testing.T) {
	f := start(t)
	t.Run("AuthoredBySubmitter", func(t *testing.T) { testAuthoredBySubmitter(t, f) })
	t.Run("DryRunRecordsNothing", func(t *testing.T) { testDryRunRecordsNothing(t, f) })
	t.Run("WebhookDownFallsBackToCommitter", func(t *testing.T) { testWebhookDown(t, f) })
	t.Run("TargetNotRunningRetries", func(t *testing.T) { testTargetNotRunning(t, f) })
	t.Run("LostOutcomeFoundNotCommittedAgain", func(t *testing.T) { testLostOutcome(t, f) })
}

// testLostOutcome: the push of a request's commit succeeds but its outcome never reaches the
// controller; the retry finds the commit by the request's UID and reports it, without closing
// the window a second time.
func testLostOutcome(t *testing.T, f *fixture) {
	ctx := context.Background()
	ns := f.c.Namespace(t, "cr", nil)
	f.closer.mu.Lock()
	f.closer.loseOutcome = true
	f.closer.mu.Unlock()
	t.Cleanup(func() {
		f.closer.mu.Lock()
		f.closer.loseOutcome = false
		f.closer.mu.Unlock()
	})
	cr := newRequest(ns, "lost", "site", "Release 3")
	if err := f.c.Client.Create(ctx, cr); err != nil {
		t.Fatal(err)
	}
	got := waitCondition(t, f.c.Client, client.ObjectKeyFromObject(cr), mirrorv1alpha1.ConditionCommitted, metav1.ConditionTrue, mirrorv1alpha1.ReasonPushed)
	f.closer.mu.Lock()
	pushed := f.closer.pushed[got.UID]
	f.closer.mu.Unlock()
	if got.Status.Commit == "" || got.Status.Commit != pushed.Commit {
		t.Fatalf("status commit %q, the pushed one %q", got.Status.Commit, pushed.Commit)
	}
	if n := f.closer.callsFor(got.UID); n != 1 {
		t.Fatalf("the window was closed %d times for the request, want once", n)
	}
}

func newRequest(ns, name, target, message string) *mirrorv1alpha1.CommitRequest {
	return &mirrorv1alpha1.CommitRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: target}, Message: message},
	}
}

func waitCondition(t *testing.T, c client.Client, key client.ObjectKey, typ string, status metav1.ConditionStatus, reason string) *mirrorv1alpha1.CommitRequest {
	t.Helper()
	var cr mirrorv1alpha1.CommitRequest
	testenv.Eventually(t, 15*time.Second, func() error {
		if err := c.Get(context.Background(), key, &cr); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(cr.Status.Conditions, typ)
		if cond == nil || cond.Status != status || cond.Reason != reason {
			return fmt.Errorf("%s = %+v", typ, cond)
		}
		return nil
	})
	return &cr
}

func testAuthoredBySubmitter(t *testing.T, f *fixture) {
	ctx := context.Background()
	ns := f.c.Namespace(t, "cr", nil)
	alice := f.c.UserClient(t, "alice", "system:masters")
	cr := newRequest(ns, "release-1", "site", "Release 1: new landing page")
	if err := alice.Create(ctx, cr); err != nil {
		t.Fatal(err)
	}
	// The submitter is in Redis under the object's UID, exactly as specified.
	v, err := f.raw.Get(ctx, "cr:author:v1:command:"+string(cr.UID)).Result()
	if err != nil {
		t.Fatalf("command author record: %v", err)
	}
	if want := `{"author":"alice","requestedAt":`; len(v) < len(want) || v[:len(want)] != want {
		t.Fatalf("record = %s", v)
	}
	got := waitCondition(t, f.c.Client, client.ObjectKeyFromObject(cr), mirrorv1alpha1.ConditionCommitted, metav1.ConditionTrue, mirrorv1alpha1.ReasonPushed)
	a := meta.FindStatusCondition(got.Status.Conditions, mirrorv1alpha1.ConditionAuthorAttributed)
	if a == nil || a.Status != metav1.ConditionTrue || a.Reason != mirrorv1alpha1.ReasonCommandAuthor {
		t.Fatalf("AuthorAttributed = %+v", a)
	}
	if got.Status.Author != "alice <alice@users.noreply.invalid>" || got.Status.Commit == "" || got.Status.CompletionTime == nil {
		t.Fatalf("status = %+v", got.Status)
	}
	if r := meta.FindStatusCondition(got.Status.Conditions, mirrorv1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue {
		t.Fatalf("Ready = %+v", r)
	}
	c := f.closer.last()
	if c.target != (types.NamespacedName{Namespace: ns, Name: "site"}) || c.message != "Release 1: new landing page" || c.author == nil || c.author.Name != "alice" {
		t.Fatalf("CloseWindow call = %+v", c)
	}
}

func testDryRunRecordsNothing(t *testing.T, f *fixture) {
	ctx := context.Background()
	ns := f.c.Namespace(t, "cr", nil)
	bob := f.c.UserClient(t, "bob", "system:masters")
	before, _ := f.raw.Keys(ctx, "cr:author:v1:command:*").Result()
	if err := bob.Create(ctx, newRequest(ns, "dry", "site", "m"), client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	after, _ := f.raw.Keys(ctx, "cr:author:v1:command:*").Result()
	if len(after) != len(before) {
		t.Fatalf("a dry run recorded a submitter: %d keys before, %d after", len(before), len(after))
	}
}

func testWebhookDown(t *testing.T, f *fixture) {
	ctx := context.Background()
	ns := f.c.Namespace(t, "cr", nil)
	carol := f.c.UserClient(t, "carol", "system:masters")

	// Point the webhook at a port nobody serves: failurePolicy Ignore lets the request through.
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := f.c.Client.Get(ctx, client.ObjectKey{Name: commitrequest.WebhookConfigName}, &vwc); err != nil {
		t.Fatal(err)
	}
	saved := vwc.Webhooks[0].ClientConfig.DeepCopy()
	dead, err := servers.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	u := "https://127.0.0.1:" + strconv.Itoa(dead) + commitrequest.WebhookPath
	vwc.Webhooks[0].ClientConfig.URL = &u
	if err := f.c.Client.Update(ctx, &vwc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var cur admissionregistrationv1.ValidatingWebhookConfiguration
		if err := f.c.Client.Get(ctx, client.ObjectKey{Name: commitrequest.WebhookConfigName}, &cur); err == nil {
			cur.Webhooks[0].ClientConfig = *saved
			_ = f.c.Client.Update(ctx, &cur)
		}
	})
	cr := newRequest(ns, "release-2", "site", "Release 2")
	if err := carol.Create(ctx, cr); err != nil {
		t.Fatalf("create with the webhook down: %v", err)
	}
	got := waitCondition(t, f.c.Client, client.ObjectKeyFromObject(cr), mirrorv1alpha1.ConditionAuthorAttributed, metav1.ConditionFalse, mirrorv1alpha1.ReasonCommitterFallback)
	waitCondition(t, f.c.Client, client.ObjectKeyFromObject(cr), mirrorv1alpha1.ConditionCommitted, metav1.ConditionTrue, mirrorv1alpha1.ReasonPushed)
	if _, err := f.raw.Get(ctx, "cr:author:v1:command:"+string(got.UID)).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("a record exists although the webhook was down: %v", err)
	}
	f.closer.mu.Lock()
	var found bool
	for _, c := range f.closer.calls {
		if c.message == "Release 2" {
			found = true
			if c.author != nil {
				t.Errorf("author = %+v, want the committer (nil)", c.author)
			}
		}
	}
	f.closer.mu.Unlock()
	if !found {
		t.Fatal("CloseWindow was not called for the request")
	}
}

func testTargetNotRunning(t *testing.T, f *fixture) {
	ctx := context.Background()
	ns := f.c.Namespace(t, "cr", nil)
	f.closer.mu.Lock()
	f.closer.fail = commitrequest.ErrTargetNotRunning
	f.closer.mu.Unlock()
	cr := newRequest(ns, "early", "missing", "m")
	if err := f.c.Client.Create(ctx, cr); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, f.c.Client, client.ObjectKeyFromObject(cr), mirrorv1alpha1.ConditionCommitted, metav1.ConditionFalse, mirrorv1alpha1.ReasonTargetNotFound)
	f.closer.mu.Lock()
	f.closer.fail = nil
	f.closer.mu.Unlock()
	waitCondition(t, f.c.Client, client.ObjectKeyFromObject(cr), mirrorv1alpha1.ConditionCommitted, metav1.ConditionTrue, mirrorv1alpha1.ReasonPushed)

	// A target in another namespace is refused without calling the engine.
	other := newRequest(ns, "cross", "site", "m")
	other.Spec.TargetRef.Namespace = "kube-system"
	if err := f.c.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, f.c.Client, client.ObjectKeyFromObject(other), mirrorv1alpha1.ConditionCommitted, metav1.ConditionFalse, mirrorv1alpha1.ReasonTargetNotFound)
}
