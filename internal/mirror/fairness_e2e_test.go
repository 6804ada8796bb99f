package mirror_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/mirror/fairness"
	mirrormetrics "github.com/siteops/siteops/internal/mirror/metrics"
	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// stallingRemote is a loopback TCP front of a git remote: it forwards connections until stall,
// and from then on cuts the forwarded ones and accepts new connections without ever answering
// them (a remote that hangs).
type stallingRemote struct {
	addr, target string
	stalled      atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
}

func newStallingRemote(t testing.TB, gitURL string) *stallingRemote {
	t.Helper()
	u, err := url.Parse(gitURL)
	if err != nil {
		t.Fatal(err)
	}
	l := testenv.LoopbackListener(t)
	s := &stallingRemote{addr: l.Addr().String(), target: u.Host}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.track(c)
			if !s.stalled.Load() {
				go s.forward(c)
			}
		}
	}()
	t.Cleanup(func() { s.cut() })
	return s
}

// url is gitURL reached through the front.
func (s *stallingRemote) url(gitURL string) string {
	u, _ := url.Parse(gitURL)
	u.Host = s.addr
	return u.String()
}

func (s *stallingRemote) track(c net.Conn) {
	s.mu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
}

func (s *stallingRemote) forward(c net.Conn) {
	up, err := net.Dial("tcp", s.target)
	if err != nil {
		_ = c.Close()
		return
	}
	s.track(up)
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
}

// stall makes the remote hang from now on.
func (s *stallingRemote) stall() {
	s.stalled.Store(true)
	s.cut()
}

func (s *stallingRemote) cut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
}

// commitRequestReason is the Committed condition of a CommitRequest, nil while it has none.
func commitRequestReason(cl client.Client, ns, name string) (*metav1.Condition, error) {
	var cr mirrorv1alpha1.CommitRequest
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &cr); err != nil {
		return nil, err
	}
	return meta.FindStatusCondition(cr.Status.Conditions, mirrorv1alpha1.ConditionCommitted), nil
}

// TestHangingTenantRemoteHoldsNoOtherTenant: a tenant's GitProvider points at a remote that
// accepts connections and never answers (after its writer opened and took a change), and the
// tenant, with its own identity, submits CommitRequests and edits its provider's Secret in a
// loop. Another tenant's change is mirrored, its CommitRequest is served and an edit of its
// GitTarget is reconciled, each in normal time: the first tenant holds only its share of the
// controllers' workers, and no lock or writer of the other's.
func TestHangingTenantRemoteHoldsNoOtherTenant(t *testing.T) {
	c := testenv.APIServer(t)
	redis := testenv.Redis(t, servers.RedisOptions{})
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{Username: "mirror", Password: "pw"})
	name := testenv.Name(t)
	noisyURL, err := remote.CreateRepo(name+"-noisy", "main")
	must(t, err)
	quietURL, err := remote.CreateRepo(name+"-quiet", "main")
	must(t, err)
	quietRepo := &fixture{bare: remote.RepoDir(name + "-quiet")}
	hanging := newStallingRemote(t, noisyURL)
	eng, _ := runManager(t, c, mirror.Options{RedisAddr: redis.Addr, RedisKeyPrefix: "fair"}, "")
	ctx := context.Background()

	noisy := c.Tenant(t, "noisy", nil)
	quiet := c.Tenant(t, "quiet", nil)
	mirrorSetup(t, noisy.Client, noisy.Namespace, hanging.url(noisyURL), "mirror", "pw", "Noisy", "noisy", time.Hour)
	mirrorSetup(t, quiet.Client, quiet.Namespace, quietURL, "mirror", "pw", "Quiet", "quiet", time.Hour)
	noisyKey := types.NamespacedName{Namespace: noisy.Namespace, Name: "site"}
	quietKey := types.NamespacedName{Namespace: quiet.Namespace, Name: "site"}
	for _, key := range []types.NamespacedName{noisyKey, quietKey} {
		waitStatus(t, eng, key, func(st engine.TargetStatus) error {
			if st.Streams == 0 {
				return fmt.Errorf("no stream yet")
			}
			return nil
		})
	}

	// The noisy tenant's writer opens and pushes while its remote still answers, then takes a
	// change and the remote stops answering.
	must(t, noisy.Client.Create(ctx, &mirrorv1alpha1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Namespace: noisy.Namespace, Name: "first"},
		Spec: mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "site"}, Message: "first"}}))
	testenv.Eventually(t, 30*time.Second, func() error {
		c, err := commitRequestReason(noisy.Client, noisy.Namespace, "first")
		if err != nil {
			return fmt.Errorf("first request: %w", err)
		}
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("first request: %+v", c)
		}
		return nil
	})
	must(t, noisy.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "payload", Namespace: noisy.Namespace}, Data: map[string]string{"x": "1"}}))
	waitStatus(t, eng, noisyKey, func(st engine.TargetStatus) error {
		if st.Writer.Pending == 0 {
			return fmt.Errorf("the change is not pending yet")
		}
		return nil
	})
	hanging.stall()

	deferredBefore := testutil.ToFloat64(fairness.Deferred.WithLabelValues("mirror-commitrequest"))
	const requests = 12
	var created atomic.Int32
	loopCtx, stopLoop := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for i := 0; loopCtx.Err() == nil; i++ {
			if i < requests {
				created.Add(1)
				_ = noisy.Client.Create(loopCtx, &mirrorv1alpha1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Namespace: noisy.Namespace, Name: fmt.Sprintf("noise-%d", i)},
					Spec: mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "site"}, Message: "noise"}})
			}
			_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				var s corev1.Secret
				if err := noisy.Client.Get(loopCtx, types.NamespacedName{Namespace: noisy.Namespace, Name: "git-auth"}, &s); err != nil {
					return err
				}
				s.Data["password"] = []byte(fmt.Sprintf("pw-%d", i))
				return noisy.Client.Update(loopCtx, &s)
			})
			select {
			case <-loopCtx.Done():
			case <-time.After(200 * time.Millisecond): // the loop's pace, not a synchronisation
			}
		}
	}()
	t.Cleanup(func() { stopLoop(); <-loopDone })

	// The noise is on: every noisy request was submitted; each waits on the hanging remote (a
	// push or an open attempt, up to a minute) once it gets a worker.
	testenv.Eventually(t, 60*time.Second, func() error {
		if n := created.Load(); n < requests {
			return fmt.Errorf("%d noisy CommitRequests submitted", n)
		}
		return nil
	})

	// The quiet tenant, meanwhile: a change reaches its writer, its CommitRequest is served and
	// the change is on its branch, and an edit of its GitTarget is reconciled, each in normal
	// time (well under a second on a quiet cluster; a worker held by the noisy tenant would
	// hold it for up to a minute).
	const normal = 15 * time.Second
	start := time.Now()
	must(t, quiet.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: quiet.Namespace}, Data: map[string]string{"color": "green"}}))
	testenv.Eventually(t, normal, func() error {
		if st, _ := eng.Status(quietKey); st.Writer.Pending == 0 {
			return fmt.Errorf("the quiet tenant's change is not pending yet")
		}
		return nil
	})
	pending := time.Since(start)
	must(t, quiet.Client.Create(ctx, &mirrorv1alpha1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Namespace: quiet.Namespace, Name: "release"},
		Spec: mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "site"}, Message: "Quiet release"}}))
	testenv.Eventually(t, normal, func() error {
		c, err := commitRequestReason(quiet.Client, quiet.Namespace, "release")
		// NothingPending when the window's quiet second closed it first: served either way.
		if err != nil {
			return fmt.Errorf("quiet request: %w", err)
		}
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("quiet request Committed = %+v", c)
		}
		if got := quietRepo.file("quiet/" + quiet.Namespace + "/core/configmaps/app.yaml"); !strings.Contains(got, "green") {
			return fmt.Errorf("the quiet tenant's change is not on its branch: %q", got)
		}
		return nil
	})
	committed := time.Since(start)
	var gt mirrorv1alpha1.GitTarget
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := quiet.Client.Get(ctx, quietKey, &gt); err != nil {
			return err
		}
		gt.Spec.CommitWindow = &metav1.Duration{Duration: 30 * time.Minute}
		return quiet.Client.Update(ctx, &gt)
	}))
	testenv.Eventually(t, normal, func() error {
		var got mirrorv1alpha1.GitTarget
		if err := quiet.Client.Get(ctx, quietKey, &got); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, mirrorv1alpha1.ConditionReady)
		if got.Status.ObservedGeneration != got.Generation || ready == nil || ready.Status != metav1.ConditionTrue {
			return fmt.Errorf("quiet target generation %d observed %d, Ready %+v", got.Generation, got.Status.ObservedGeneration, ready)
		}
		return nil
	})
	reconciled := time.Since(start)

	// The noisy tenant removes its GitTarget: its writer's last push to the hanging remote goes
	// on in the background, and the engine answers for the quiet target meanwhile.
	must(t, noisy.Client.Delete(ctx, &mirrorv1alpha1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: noisy.Namespace, Name: "site"}}))
	testenv.Eventually(t, normal, func() error {
		if n := testutil.ToFloat64(mirrormetrics.WritersStopping); n < 1 {
			return fmt.Errorf("no writer stopping yet")
		}
		return nil
	})
	if _, ok := eng.Status(quietKey); !ok {
		t.Fatal("the quiet target is not running")
	}
	if n := testutil.ToFloat64(mirrormetrics.WritersStopping); n < 1 {
		t.Fatal("the engine answered for the quiet target only once the noisy writer's last push had ended")
	}

	// The noisy tenant had more requests than its share of the workers: the rest waited in the queue.
	if d := testutil.ToFloat64(fairness.Deferred.WithLabelValues("mirror-commitrequest")) - deferredBefore; d == 0 {
		t.Error("no noisy CommitRequest was deferred for its namespace's share of the workers")
	}
	t.Logf("quiet tenant beside the noisy one: change pending after %s, CommitRequest pushed after %s, GitTarget edit reconciled after %s",
		pending.Round(10*time.Millisecond), committed.Round(10*time.Millisecond), reconciled.Round(10*time.Millisecond))
}

// handoverManager starts a manager competing for the lease id, with the mirror set up from o;
// stop ends it and returns what its Start returned.
func handoverManager(t *testing.T, c *testenv.Cluster, o mirror.Options, id string, lease time.Duration) (ctrl.Manager, *engine.Engine, func() error) {
	t.Helper()
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme: scheme.New(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		LeaderElection: true, LeaderElectionID: id, LeaderElectionNamespace: "default", LeaderElectionReleaseOnCancel: true,
		LeaseDuration: ptr(lease), RenewDeadline: ptr(lease * 3 / 4), RetryPeriod: ptr(500 * time.Millisecond),
		Controller: config.Controller{SkipNameValidation: ptr(true)},
	})
	must(t, err)
	eng, err := mirror.SetupWithEngine(mgr, localGit(o))
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	var result error
	stop := func() error {
		once.Do(func() { cancel(); result = <-done })
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return mgr, eng, stop
}

// TestLeaderHandoverWithManyWriters: the leader runs 50 writers, each holding a change it
// cannot push because the remote stopped answering. Stepping down, it stops them in parallel,
// each last push bounded by the stop timeout (half the lease, as the manager sets it), ends
// within its grace period and releases the Lease: the standby leads within the lease + 2 s.
func TestLeaderHandoverWithManyWriters(t *testing.T) {
	const writers = 50
	const lease = 4 * time.Second
	c := testenv.APIServer(t)
	redis := testenv.Redis(t, servers.RedisOptions{})
	f := newFixture(t, c)
	hanging := newStallingRemote(t, f.url)
	opts := mirror.Options{RedisAddr: redis.Addr, RedisKeyPrefix: "handover", StopTimeout: lease / 2}
	id := testenv.Name(t)
	mgrA, engA, stopA := handoverManager(t, c, opts, id, lease)
	select {
	case <-mgrA.Elected():
	case <-time.After(30 * time.Second):
		t.Fatal("first manager not elected")
	}
	mgrB, _, _ := handoverManager(t, c, opts, id, lease)

	f.create(t, &mirrorv1alpha1.GitProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "slow", Namespace: f.ns},
		Spec: mirrorv1alpha1.GitProviderSpec{URL: hanging.url(f.url), SecretRef: refPtr("git-auth"), AllowedBranches: []string{"mirror/*"},
			Committer: mirrorv1alpha1.Committer{Name: "Mirror Bot", Email: "mirror@example.com"}},
	})
	var keys []types.NamespacedName
	for i := range writers {
		name := fmt.Sprintf("t%02d", i)
		f.create(t, &mirrorv1alpha1.GitTarget{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
			Spec: mirrorv1alpha1.GitTargetSpec{ProviderRef: ref("slow"), Branch: fmt.Sprintf("mirror/%d", i), Path: "p",
				CommitWindow: &metav1.Duration{Duration: 100 * time.Millisecond}},
		})
		f.watchRule(t, name, name, cmRule())
		keys = append(keys, types.NamespacedName{Namespace: f.ns, Name: name})
	}
	waitAll := func(what string, check func(engine.TargetStatus) error) {
		t.Helper()
		testenv.Eventually(t, 3*time.Minute, func() error {
			for _, k := range keys {
				st, ok := engA.Status(k)
				if !ok {
					return fmt.Errorf("%s: target %s not running", what, k.Name)
				}
				if err := check(st); err != nil {
					return fmt.Errorf("%s: target %s: %w", what, k.Name, err)
				}
			}
			return nil
		})
	}
	// Every writer opened and pushed while the remote answered.
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: f.ns}})
	waitAll("first push", func(st engine.TargetStatus) error {
		if st.Writer.LastPushedCommit == "" || st.Writer.Pending != 0 {
			return fmt.Errorf("not pushed yet (pending %d)", st.Writer.Pending)
		}
		return nil
	})
	// Then the remote hangs, and every writer holds a change it cannot push.
	hanging.stall()
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "two", Namespace: f.ns}})
	waitAll("held change", func(st engine.TargetStatus) error {
		if st.Writer.Pending == 0 {
			return fmt.Errorf("the change is not pending yet")
		}
		return nil
	})

	stepDown := time.Now()
	errA := make(chan error, 1)
	go func() { errA <- stopA() }()
	select {
	case <-mgrB.Elected():
	case <-time.After(lease + 2*time.Second):
		t.Fatalf("the standby did not lead within the lease + 2 s of the leader stepping down with %d writers holding changes", writers)
	}
	t.Logf("handover with %d writers stopping: %s (lease %s)", writers, time.Since(stepDown).Round(10*time.Millisecond), lease)
	if err := <-errA; err != nil {
		t.Fatalf("the old leader did not stop within its grace period: %v", err)
	}
}
