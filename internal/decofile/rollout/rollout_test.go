package rollout_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/follow"
	"github.com/siteops/siteops/internal/decofile/notify"
	"github.com/siteops/siteops/internal/decofile/rollout"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/shard"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/pkg/siteruntime"
)

func TestMain(m *testing.M) { testenv.Main(m, servers.APIServerOptions{}) }

const reloadToken = "reload-token-1"

// env is one test's namespace with a running rollout controller limited to it.
type env struct {
	t  testing.TB
	c  *testenv.Cluster
	ns string
}

func newEnv(t testing.TB, o rollout.Options, also ...func(ctrl.Manager) error) *env {
	t.Helper()
	return newEnvs(t, 1, o, also...)[0]
}

// newEnvs is newEnv for n namespaces served by one manager.
func newEnvs(t testing.TB, n int, o rollout.Options, also ...func(ctrl.Manager) error) []*env {
	t.Helper()
	return newEnvsOn(t, n, nil, o, also...)
}

// newEnvsOn is newEnvs with the manager's transport wrapped by wrap (nil: as it is).
func newEnvsOn(t testing.TB, n int, wrap func(http.RoundTripper) http.RoundTripper, o rollout.Options, also ...func(ctrl.Manager) error) []*env {
	t.Helper()
	c := testenv.APIServer(t)
	cfg := rest.CopyConfig(c.Config)
	if wrap != nil {
		cfg.Wrap(wrap)
	}
	namespaces := map[string]cache.Config{}
	var envs []*env
	for range n {
		ns := c.Namespace(t, "rollout", nil)
		namespaces[ns] = cache.Config{}
		envs = append(envs, &env{t: t, c: c, ns: ns})
	}
	// The cache as the siteops-manager has it: Decofiles without their inline content.
	co := cache.Options{DefaultNamespaces: namespaces, DefaultTransform: cache.TransformStripManagedFields()}
	controller.CacheOptions(&co)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 c.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  co,
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.RetryBase == 0 {
		o.RetryBase = 200 * time.Millisecond
	}
	if o.Notify.Backoff == 0 {
		o.Notify.Backoff = 50 * time.Millisecond
	}
	if o.Notify.ProgressInterval == 0 {
		o.Notify.ProgressInterval = 100 * time.Millisecond
	}
	if err := rollout.Setup(mgr, o); err != nil {
		t.Fatal(err)
	}
	for _, setup := range also {
		if err := setup(mgr); err != nil {
			t.Fatal(err)
		}
	}
	testenv.StartManager(t, mgr)
	return envs
}

// decofile creates a github-sourced Decofile and its reload Secret.
func (e *env) decofile(name string, silent bool) *decov1alpha1.Decofile {
	e.t.Helper()
	df := &decov1alpha1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: decov1alpha1.DecofileSpec{Source: decov1alpha1.SourceGitHub, Silent: silent,
			GitHub: &decov1alpha1.GitHubSource{Org: "acme", Repo: "site", Commit: "main", Path: ".deco/blocks"}},
	}
	e.create(df)
	e.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: df.ReloadSecretName(), Namespace: e.ns},
		Data: map[string][]byte{decov1alpha1.ReloadTokenKey: []byte(reloadToken)}})
	return df
}

func (e *env) create(obj client.Object) {
	e.t.Helper()
	if err := e.c.Client.Create(context.Background(), obj); err != nil {
		e.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// store does what the delivery controller does for a new version: write the ConfigMap, then
// record contentHash, timestamp and commit in status with Ready=True.
// store plays the delivery controller: it writes content to df's ConfigMap, then records it in
// df's status, together with the changes also makes to that status (one write).
func (e *env) store(df *decov1alpha1.Decofile, content []byte, commit string, ts int64, bin bool, also ...func(*decov1alpha1.Decofile)) {
	e.t.Helper()
	ctx := context.Background()
	data := map[string]string{decov1alpha1.KeyTimestamp: strconv.FormatInt(ts, 10)}
	format := decov1alpha1.FormatJSON
	if bin {
		var buf bytes.Buffer
		w := brotli.NewWriter(&buf)
		_, _ = w.Write(content)
		_ = w.Close()
		data[decov1alpha1.KeyBin], format = base64.StdEncoding.EncodeToString(buf.Bytes()), decov1alpha1.FormatBin
	} else {
		data[decov1alpha1.KeyJSON] = string(content)
	}
	stored := data[decov1alpha1.KeyJSON] + data[decov1alpha1.KeyBin]
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: df.ConfigMapName(), Namespace: e.ns}, Data: data}
	if err := e.c.Client.Create(ctx, cm); err != nil {
		if err := e.c.Client.Update(ctx, cm); err != nil {
			e.t.Fatalf("write ConfigMap: %v", err)
		}
	}
	e.updateStatus(df, func(d *decov1alpha1.Decofile) {
		d.Status.SourceType = decov1alpha1.SourceGitHub
		d.Status.GitHubCommit = commit
		d.Status.ContentHash = encode.Hash(content)
		d.Status.StoredHash = encode.Hash([]byte(stored))
		d.Status.RawBytes = int64(len(content))
		d.Status.Timestamp = ts
		d.Status.Format = format
		d.Status.ConfigMapName = df.ConfigMapName()
		d.Status.ObservedGeneration = d.Generation
		meta.SetStatusCondition(&d.Status.Conditions, metav1.Condition{Type: decov1alpha1.ConditionReady,
			Status: metav1.ConditionTrue, Reason: decov1alpha1.ReasonSucceeded, Message: "stored", ObservedGeneration: d.Generation})
		for _, f := range also {
			f(d)
		}
	})
}

func (e *env) updateStatus(df *decov1alpha1.Decofile, mutate func(*decov1alpha1.Decofile)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var d decov1alpha1.Decofile
		if err := e.c.Client.Get(context.Background(), client.ObjectKeyFromObject(df), &d); err != nil {
			return err
		}
		mutate(&d)
		return e.c.Client.Status().Update(context.Background(), &d)
	})
	if err != nil {
		e.t.Fatalf("update Decofile status: %v", err)
	}
}

func (e *env) get(df *decov1alpha1.Decofile) *decov1alpha1.Decofile {
	e.t.Helper()
	var d decov1alpha1.Decofile
	if err := e.c.Client.Get(context.Background(), client.ObjectKeyFromObject(df), &d); err != nil {
		e.t.Fatal(err)
	}
	return &d
}

// sitePod is a Pod object backed by a real site runtime listening on the pod's own loopback IP.
type sitePod struct {
	pod *corev1.Pod
	rt  *siteruntime.Runtime
	srv *http.Server
}

type podOpts struct {
	labels  map[string]string
	token   string
	noToken bool // the runtime has no reload token (it answers every reload with 401)
	phase   corev1.PodPhase
	wrap    func(http.Handler) http.Handler
	runtime siteruntime.Options
	env     []corev1.EnvVar
}

func (e *env) sitePod(name string, o podOpts) *sitePod {
	e.t.Helper()
	if o.token == "" && !o.noToken {
		o.token = reloadToken
	}
	if o.phase == "" {
		o.phase = corev1.PodRunning
	}
	o.runtime.Token = o.token
	rt, err := siteruntime.New(context.Background(), o.runtime)
	if err != nil {
		e.t.Fatal(err)
	}
	l := testenv.LoopbackListener(e.t)
	h := rt.Handler()
	if o.wrap != nil {
		h = o.wrap(h)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(l) }()
	e.t.Cleanup(func() { _ = srv.Close() })
	addr := l.Addr().(*net.TCPAddr)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: o.labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "site:latest", Env: o.env,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(addr.Port)}},
		}}},
	}
	e.create(pod)
	pod.Status = corev1.PodStatus{Phase: o.phase}
	if o.phase == corev1.PodRunning {
		pod.Status.PodIP = addr.IP.String()
		pod.Status.PodIPs = []corev1.PodIP{{IP: addr.IP.String()}}
	}
	if err := e.c.Client.Status().Update(context.Background(), pod); err != nil {
		e.t.Fatalf("set pod status: %v", err)
	}
	return &sitePod{pod: pod, rt: rt, srv: srv}
}

func labelled(df *decov1alpha1.Decofile) map[string]string {
	return map[string]string{decov1alpha1.LabelDecofile: df.Name}
}

// podsNotified waits for PodsNotified with status and a message containing msg.
// reloadToken waits for the reload Secret the delivery controller creates for df and returns
// its token.
func (e *env) reloadToken(df *decov1alpha1.Decofile) string {
	e.t.Helper()
	var token string
	testenv.Eventually(e.t, 20*time.Second, func() error {
		var s corev1.Secret
		if err := e.c.Client.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: df.ReloadSecretName()}, &s); err != nil {
			return err
		}
		token = string(s.Data[decov1alpha1.ReloadTokenKey])
		return nil
	})
	return token
}

func (e *env) podsNotified(df *decov1alpha1.Decofile, status metav1.ConditionStatus, msg string, timeout time.Duration) *decov1alpha1.Decofile {
	e.t.Helper()
	var got *decov1alpha1.Decofile
	testenv.Eventually(e.t, timeout, func() error {
		got = e.get(df)
		c := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionPodsNotified)
		if c == nil || c.Status != status || !strings.Contains(c.Message, msg) {
			return fmt.Errorf("PodsNotified is %+v, want %s with %q", c, status, msg)
		}
		return nil
	})
	return got
}

// waiter runs follow.Wait in the background and records every verdict it saw.
type waiter struct {
	mu       sync.Mutex
	verdicts []follow.Verdict
	final    follow.Verdict
	err      error
	done     chan struct{}
}

func (e *env) startWait(df *decov1alpha1.Decofile, want string, timeout time.Duration) *waiter {
	w := &waiter{done: make(chan struct{})}
	wc, err := client.NewWithWatch(e.c.Config, client.Options{Scheme: e.c.Scheme})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	go func() {
		defer close(w.done)
		defer cancel()
		v, err := follow.Wait(ctx, wc, client.ObjectKeyFromObject(df), want, func(v follow.Verdict) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.verdicts = append(w.verdicts, v)
		})
		w.mu.Lock()
		w.final, w.err = v, err
		w.mu.Unlock()
	}()
	return w
}

func (w *waiter) result(t *testing.T) (follow.Verdict, error) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatal("wait did not return")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.final, w.err
}

func (w *waiter) sawMessage(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.verdicts {
		if strings.Contains(v.Message, s) {
			return true
		}
	}
	return false
}

func TestChangeReachesEveryPod(t *testing.T) {
	e := newEnv(t, rollout.Options{})
	df := e.decofile("shop", false)
	a := e.sitePod("shop-a", podOpts{labels: labelled(df)})
	b := e.sitePod("shop-b", podOpts{labels: labelled(df)})
	legacy := e.sitePod("shop-legacy", podOpts{labels: map[string]string{decov1alpha1.LabelDeploymentID: "shop"}})
	pending := e.sitePod("shop-pending", podOpts{labels: labelled(df), phase: corev1.PodPending})
	other := e.sitePod("other-site", podOpts{labels: map[string]string{decov1alpha1.LabelDecofile: "other"}})

	commit := "0123456789abcdef0123456789abcdef01234567"
	early := e.startWait(df, "commit:"+commit, 30*time.Second)
	content := []byte(`{"site":{"name":"Shop & Co"},"pages/home":{"__resolveType":"website/pages/Page.tsx","path":"/"}}`)
	e.store(df, content, commit, 1731598481, true)

	got := e.podsNotified(df, metav1.ConditionTrue, "Successfully notified all pods for commit:"+commit, 20*time.Second)
	for _, p := range []*sitePod{a, b, legacy} {
		s := p.rt.Current()
		if s.Hash != encode.Hash(content) || s.Timestamp != 1731598481 || s.Source != siteruntime.SourceOperator {
			t.Errorf("%s serves hash %s ts %d from %s", p.pod.Name, s.Hash, s.Timestamp, s.Source)
		}
	}
	if pending.rt.Reloads() != 0 || other.rt.Reloads() != 0 {
		t.Error("a pending pod or another site's pod was notified")
	}
	if got.Status.NotifiedHash != got.Status.ContentHash {
		t.Errorf("notifiedHash %q, contentHash %q", got.Status.NotifiedHash, got.Status.ContentHash)
	}
	ro := got.Status.Rollout
	if ro == nil || ro.ID != "commit:"+commit || ro.Total != 4 || ro.Notified != 3 || ro.Skipped != 1 || ro.Failed != 0 || ro.FinishedAt == nil {
		t.Errorf("rollout summary %+v", ro)
	}

	v, err := early.result(t)
	if err != nil || v.Outcome != follow.Succeeded {
		t.Fatalf("wait started before the change: %+v, %v", v, err)
	}
	if !early.sawMessage("Notifying pods for commit:" + commit) {
		t.Error("the condition never went through Unknown (NotificationInProgress)")
	}
	late := e.startWait(df, "commit:"+commit, 10*time.Second)
	if v2, err := late.result(t); err != nil || v2.Outcome != v.Outcome || v2.Message != v.Message {
		t.Fatalf("wait started after the rollout: %+v, %v; before: %+v", v2, err, v)
	}

	testenv.Eventually(t, 10*time.Second, func() error {
		var evs eventsv1.EventList
		if err := e.c.Client.List(context.Background(), &evs, client.InNamespace(e.ns)); err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if ev.Reason == "RolloutSucceeded" && ev.Regarding.Name == df.Name && strings.Contains(ev.Note, "Notified 3 of 4 pods") {
				return nil
			}
		}
		return fmt.Errorf("no RolloutSucceeded event among %d events", len(evs.Items))
	})

	// A second change resets the condition to Unknown and rolls out again.
	next := []byte(`{"site":{"name":"Shop v2"}}`)
	second := "fedcba9876543210fedcba9876543210fedcba98"
	w2 := e.startWait(df, "commit:"+second, 30*time.Second)
	e.store(df, next, second, 1731598500, false)
	e.podsNotified(df, metav1.ConditionTrue, "commit:"+second, 20*time.Second)
	if v, err := w2.result(t); err != nil || v.Outcome != follow.Succeeded || !w2.sawMessage("Notifying pods for commit:"+second) {
		t.Fatalf("second wait: %+v %v", v, err)
	}
	if s := a.rt.Current(); s.Hash != encode.Hash(next) {
		t.Errorf("pod a did not get the second version")
	}
}

func TestFailingPodIsRetriedUntilItRecovers(t *testing.T) {
	e := newEnv(t, rollout.Options{Notify: notify.Config{Attempts: 1}})
	df := e.decofile("blog", false)
	var broken atomic.Bool
	good := e.sitePod("blog-a", podOpts{labels: labelled(df)})
	bad := e.sitePod("blog-b", podOpts{labels: labelled(df), wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if broken.Load() {
				http.Error(w, "database unavailable", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
		})
	}})
	// Both pods confirm a first version; then blog-b breaks and misses the next one.
	first := []byte(`{"posts":{"count":2}}`)
	e.store(df, first, "0000000000000000000000000000000000000001", 1731599000, false)
	e.podsNotified(df, metav1.ConditionTrue, "Successfully notified all pods", 20*time.Second)
	broken.Store(true)
	content := []byte(`{"posts":{"count":3}}`)
	commit := "1111111111111111111111111111111111111111"
	e.store(df, content, commit, 1731600000, false)

	got := e.podsNotified(df, metav1.ConditionFalse, "Failed to notify pods for commit:"+commit+": 1 of 2 pods failed", 20*time.Second)
	c := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionPodsNotified)
	if c.Reason != decov1alpha1.ReasonNotificationFailed || !strings.Contains(c.Message, "blog-b: HTTP 503") {
		t.Fatalf("condition %+v", c)
	}
	if got.Status.NotifiedHash != encode.Hash(first) {
		t.Fatalf("notifiedHash after a failed rollout: %q, want the first version's", got.Status.NotifiedHash)
	}
	if ro := got.Status.Rollout; ro == nil || ro.Failed != 1 || ro.Notified != 1 {
		t.Fatalf("rollout %+v", ro)
	}
	if h := got.Status.History; len(h) == 0 || h[0].Result != rollout.ResultFailed || h[0].ID != "commit:"+commit || h[0].PodsConfirmed != 1 {
		t.Fatalf("history after the failure %+v", h)
	}
	// The status names the pod behind and why, so nobody has to ask the pods.
	if b := got.Status.Rollout.Behind; len(b) != 1 || b[0].Name != "blog-b" || b[0].HTTPStatus != http.StatusServiceUnavailable ||
		!strings.Contains(b[0].Reason, "HTTP 503") || b[0].Attempts != 1 || b[0].ConfirmedHash != encode.Hash(first) {
		t.Fatalf("pods behind %+v", b)
	}
	// And how many pods hold which content: one the new, one the first.
	if c := got.Status.Rollout.Confirmed; len(c) != 2 || c[0] != (decov1alpha1.ConfirmedContent{ContentHash: encode.Hash(content), Pods: 1}) ||
		c[1] != (decov1alpha1.ConfirmedContent{ContentHash: encode.Hash(first), Pods: 1}) {
		t.Fatalf("pods by confirmed content %+v", c)
	}
	// Waiting now, while failed, answers "failed".
	if v, err := e.startWait(df, "commit:"+commit, 10*time.Second).result(t); err != nil || v.Outcome != follow.Failed {
		t.Fatalf("wait on a failed rollout: %+v %v", v, err)
	}
	if good.rt.Current().Hash != encode.Hash(content) {
		t.Fatal("the healthy pod did not get the content")
	}

	// The pod recovers; nobody touches the Decofile: the controller retries by itself.
	generation := got.Generation
	broken.Store(false)
	got = e.podsNotified(df, metav1.ConditionTrue, "Successfully notified all pods for commit:"+commit, 20*time.Second)
	if got.Generation != generation || got.Status.NotifiedHash != encode.Hash(content) || len(got.Status.Rollout.Behind) != 0 {
		t.Fatalf("generation %d→%d, notifiedHash %q, pods behind %+v", generation, got.Generation, got.Status.NotifiedHash, got.Status.Rollout.Behind)
	}
	if h := got.Status.History; len(h) != 3 || h[0].Result != rollout.ResultSucceeded || h[0].PodsConfirmed != 2 || h[1].Result != rollout.ResultFailed {
		t.Fatalf("history after the recovery %+v", h)
	}
	if c := got.Status.Rollout.Confirmed; len(c) != 1 || c[0] != (decov1alpha1.ConfirmedContent{ContentHash: encode.Hash(content), Pods: 2}) {
		t.Fatalf("pods by confirmed content after the recovery %+v", c)
	}
	if bad.rt.Current().Hash != encode.Hash(content) {
		t.Fatal("the recovered pod did not get the content")
	}
}

// TestSourceDownStillRetriesPods: content is stored, a pod misses it, and then the source goes
// down (Ready=False): the rollout is gated on the stored content, not on Ready, so the pod gets
// it once it recovers.
func TestSourceDownStillRetriesPods(t *testing.T) {
	e := newEnv(t, rollout.Options{Notify: notify.Config{Attempts: 1}})
	df := e.decofile("outage", false)
	var broken atomic.Bool
	broken.Store(true)
	e.sitePod("outage-a", podOpts{labels: labelled(df)})
	bad := e.sitePod("outage-b", podOpts{labels: labelled(df), wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if broken.Load() {
				http.Error(w, "starting", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
		})
	}})
	content := []byte(`{"posts":{"count":4}}`)
	commit := "2222222222222222222222222222222222222222"
	e.store(df, content, commit, 1731600100, false)
	e.podsNotified(df, metav1.ConditionFalse, "Failed to notify pods for commit:"+commit+": 1 of 2 pods failed", 20*time.Second)

	// The source goes down: the delivery says so in Ready, the stored content stays.
	e.updateStatus(df, func(d *decov1alpha1.Decofile) {
		meta.SetStatusCondition(&d.Status.Conditions, metav1.Condition{Type: decov1alpha1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: "SourceUnavailable", Message: "the git host does not answer", ObservedGeneration: d.Generation})
	})
	broken.Store(false)
	got := e.podsNotified(df, metav1.ConditionTrue, "Successfully notified all pods for commit:"+commit, 20*time.Second)
	if got.Status.NotifiedHash != encode.Hash(content) || bad.rt.Current().Hash != encode.Hash(content) {
		t.Fatalf("notifiedHash %q, the recovered pod holds %q; want the stored content", got.Status.NotifiedHash, bad.rt.Current().Hash)
	}
}

func TestPodDeletedMidRolloutAndWrongToken(t *testing.T) {
	t.Run("deleted mid-rollout", func(t *testing.T) {
		e := newEnv(t, rollout.Options{Notify: notify.Config{Concurrency: 1}})
		df := e.decofile("news", false)
		var victim *sitePod
		// The first pod (in name order) deletes the last one while it is being notified.
		e.sitePod("news-a", podOpts{labels: labelled(df), wrap: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := e.c.Client.Delete(context.Background(), victim.pod, client.GracePeriodSeconds(0)); err != nil {
					t.Errorf("delete pod: %v", err)
				}
				_ = victim.srv.Close()
				h.ServeHTTP(w, r)
			})
		}})
		e.sitePod("news-b", podOpts{labels: labelled(df)})
		victim = e.sitePod("news-c", podOpts{labels: labelled(df)})
		e.store(df, []byte(`{"a":1}`), "2222222222222222222222222222222222222222", 1731600100, false)
		got := e.podsNotified(df, metav1.ConditionTrue, "Successfully notified all pods", 20*time.Second)
		if ro := got.Status.Rollout; ro.Total != 3 || ro.Notified != 2 || ro.Skipped != 1 {
			t.Fatalf("rollout %+v", ro)
		}
	})
	t.Run("wrong token", func(t *testing.T) {
		e := newEnv(t, rollout.Options{})
		df := e.decofile("promo", false)
		e.sitePod("promo-a", podOpts{labels: labelled(df)})
		stale := e.sitePod("promo-b", podOpts{labels: labelled(df), token: "a-token-from-an-old-revision", env: tokenEnv(df)})
		e.store(df, []byte(`{"a":1}`), "3333333333333333333333333333333333333333", 1731600200, false)
		got := e.podsNotified(df, metav1.ConditionFalse, "promo-b: HTTP 401: the pod rejected the reload token", 20*time.Second)
		if stale.rt.Reloads() != 0 || got.Status.NotifiedHash != "" {
			t.Fatal("a pod with the wrong token took the content, or the rollout was recorded")
		}
		if b := got.Status.Rollout.Behind; len(b) != 1 || b[0].Name != "promo-b" || b[0].HTTPStatus != http.StatusUnauthorized {
			t.Fatalf("pods behind %+v", b)
		}
	})
}

// TestSilentMode: a silent Decofile's new content reaches no pod, and a PodsNotified condition
// left over from before is removed; leaving silent mode rolls the content out.
func TestSilentMode(t *testing.T) {
	e := newEnv(t, rollout.Options{})
	df := e.decofile("quiet", true)
	p := e.sitePod("quiet-a", podOpts{labels: labelled(df)})
	// The content arrives with a condition left over from before the Decofile went silent, in
	// one status write: the condition's removal is the evidence that a reconcile saw this
	// content and took the silent path (which ends with that removal).
	content := []byte(`{"quiet":true}`)
	e.store(df, content, "4444444444444444444444444444444444444444", 1731600300, false, func(d *decov1alpha1.Decofile) {
		meta.SetStatusCondition(&d.Status.Conditions, metav1.Condition{Type: decov1alpha1.ConditionPodsNotified,
			Status: metav1.ConditionFalse, Reason: decov1alpha1.ReasonNotificationFailed, Message: "old"})
	})
	testenv.Eventually(t, 10*time.Second, func() error {
		if c := meta.FindStatusCondition(e.get(df).Status.Conditions, decov1alpha1.ConditionPodsNotified); c != nil {
			return fmt.Errorf("PodsNotified still present: %+v", c)
		}
		return nil
	})
	got := e.get(df)
	if p.rt.Reloads() != 0 || got.Status.ContentHash != encode.Hash(content) || !meta.IsStatusConditionTrue(got.Status.Conditions, decov1alpha1.ConditionReady) {
		t.Fatalf("silent Decofile: reloads %d, status %+v", p.rt.Reloads(), got.Status)
	}
	if v, err := e.startWait(df, follow.Current, 5*time.Second).result(t); err != nil || v.Outcome != follow.Failed || !strings.Contains(v.Message, "silent") {
		t.Fatalf("wait on a silent Decofile: %+v %v", v, err)
	}

	// Leaving silent mode rolls out the stored, never-confirmed content.
	var d decov1alpha1.Decofile
	if err := e.c.Client.Get(context.Background(), client.ObjectKeyFromObject(df), &d); err != nil {
		t.Fatal(err)
	}
	d.Spec.Silent = false
	if err := e.c.Client.Update(context.Background(), &d); err != nil {
		t.Fatal(err)
	}
	e.podsNotified(df, metav1.ConditionTrue, "Successfully notified all pods", 20*time.Second)
	if p.rt.Current().Hash != encode.Hash(content) || p.rt.Reloads() != 1 {
		t.Fatalf("pod not notified once after leaving silent mode: %d reloads, serves %s", p.rt.Reloads(), p.rt.Current().Hash)
	}
}

func TestLongPoll(t *testing.T) {
	e := newEnv(t, rollout.Options{Protocol: notify.ProtocolLongPoll})
	df := e.decofile("legacy", false)
	// Each pod has its own "mounted" folder, found by the controller from the pod's DECO_RELEASE.
	var dirs []string
	var pods []*sitePod
	for i := range 2 {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, decov1alpha1.KeyJSON), `{"v":1}`)
		writeFile(t, filepath.Join(dir, decov1alpha1.KeyTimestamp), "1731600000")
		release := "file://" + filepath.Join(dir, decov1alpha1.KeyJSON)
		pods = append(pods, e.sitePod(fmt.Sprintf("legacy-%d", i), podOpts{labels: labelled(df),
			env:     []corev1.EnvVar{{Name: decov1alpha1.EnvRelease, Value: release}},
			runtime: siteruntime.Options{Release: release, PollInterval: 100 * time.Millisecond, PollTimeout: 30 * time.Second}}))
		dirs = append(dirs, dir)
	}
	content := []byte(`{"v":2}`)
	commit := "5555555555555555555555555555555555555555"
	start := time.Now()
	e.store(df, content, commit, 1731600400, false)
	e.podsNotified(df, metav1.ConditionUnknown, "Notifying pods for commit:"+commit, 10*time.Second)
	// The kubelet updates the mounted files a few seconds later.
	time.Sleep(2 * time.Second)
	for _, dir := range dirs {
		writeFile(t, filepath.Join(dir, decov1alpha1.KeyJSON), string(content))
		writeFile(t, filepath.Join(dir, decov1alpha1.KeyTimestamp), "1731600400")
	}
	e.podsNotified(df, metav1.ConditionTrue, "Successfully notified all pods for commit:"+commit, 20*time.Second)
	if took := time.Since(start); took < 2*time.Second {
		t.Fatalf("confirmed after %s, before the files changed", took)
	}
	for _, p := range pods {
		if s := p.rt.Current(); s.Hash != encode.Hash(content) || s.Timestamp != 1731600400 || s.Source != siteruntime.SourceLongPoll {
			t.Fatalf("%s serves %s ts %d via %s", p.pod.Name, s.Decofile, s.Timestamp, s.Source)
		}
	}
}

func TestOverallTimeout(t *testing.T) {
	e := newEnv(t, rollout.Options{Notify: notify.Config{Timeout: time.Second, PodTimeout: time.Minute}, RetryBase: time.Minute})
	df := e.decofile("slow", false)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	e.sitePod("slow-a", podOpts{labels: labelled(df), wrap: func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
	}})
	start := time.Now()
	e.store(df, []byte(`{"a":1}`), "6666666666666666666666666666666666666666", 1731600500, false)
	got := e.podsNotified(df, metav1.ConditionFalse, "rollout timeout (1s) reached", 15*time.Second)
	if took := time.Since(start); took > 8*time.Second {
		t.Fatalf("a 1s rollout timeout took %s", took)
	}
	if ro := got.Status.Rollout; ro.Failed != 1 || ro.FinishedAt == nil {
		t.Fatalf("rollout %+v", ro)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	// Write and rename, as the kubelet's atomic writer does, so a reader never sees half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestWithDeliveryController runs the real delivery controller beside the rollout controller: an
// inline Decofile is stored (brotli-compressed, as decofile.bin), its reload Secret created, and
// every edit of the inline content reaches the pods under its timestamp:<ts> id.
func TestWithDeliveryController(t *testing.T) {
	e := newEnv(t, rollout.Options{}, func(mgr ctrl.Manager) error {
		return controller.Setup(mgr, controller.Options{Encode: encode.Options{Threshold: 64}})
	})
	ctx := context.Background()
	df := &decov1alpha1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "inline-site", Namespace: e.ns},
		Spec: decov1alpha1.DecofileSpec{Source: decov1alpha1.SourceInline, Inline: &decov1alpha1.InlineSource{
			Value: map[string]apiextensionsv1.JSON{"site": {Raw: []byte(`{"name":"first","padding":"` + strings.Repeat("deco ", 40) + `"}`)}}}},
	}
	e.create(df)
	token := e.reloadToken(df)
	pods := []*sitePod{
		e.sitePod("inline-site-a", podOpts{labels: labelled(df), token: token}),
		e.sitePod("inline-site-b", podOpts{labels: labelled(df), token: token}),
	}

	edit := func(name string) *decov1alpha1.Decofile {
		t.Helper()
		before := e.get(df).Status.ContentHash
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			var d decov1alpha1.Decofile
			if err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(df), &d); err != nil {
				return err
			}
			d.Spec.Inline.Value["site"] = apiextensionsv1.JSON{Raw: []byte(`{"name":"` + name + `","padding":"` + strings.Repeat("deco ", 40) + `"}`)}
			return e.c.Client.Update(ctx, &d)
		})
		if err != nil {
			t.Fatal(err)
		}
		var got *decov1alpha1.Decofile
		testenv.Eventually(t, 20*time.Second, func() error {
			got = e.get(df)
			id := decov1alpha1.RolloutID(&got.Status)
			c := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionPodsNotified)
			if got.Status.ContentHash == before {
				return errors.New("new content not stored yet")
			}
			if got.Status.Format != decov1alpha1.FormatBin || c == nil || c.Status != metav1.ConditionTrue ||
				c.Message != "Successfully notified all pods for "+id || got.Status.NotifiedHash != got.Status.ContentHash {
				return fmt.Errorf("status %+v", got.Status)
			}
			for _, p := range pods {
				if s := p.rt.Current(); s.Hash != got.Status.ContentHash || s.Timestamp != got.Status.Timestamp {
					return fmt.Errorf("%s serves ts %d, status has %d", p.pod.Name, s.Timestamp, got.Status.Timestamp)
				}
				// The status may still describe an earlier edit (or the first content, stored
				// after before was read): wait for this edit's content itself.
				if s := p.rt.Current(); !strings.Contains(string(s.Decofile), `"`+name+`"`) {
					return fmt.Errorf("%s serves %q's predecessor", p.pod.Name, name)
				}
			}
			return nil
		})
		return got
	}
	first := edit("second")
	if !strings.HasPrefix(decov1alpha1.RolloutID(&first.Status), "timestamp:") {
		t.Fatalf("inline rollout id %q", decov1alpha1.RolloutID(&first.Status))
	}
	second := edit("third")
	if second.Status.Timestamp <= first.Status.Timestamp || !strings.Contains(string(pods[0].rt.Current().Decofile), `"third"`) {
		t.Fatalf("timestamps %d → %d, pod serves ts %d from %s: %s (reloads %d)", first.Status.Timestamp, second.Status.Timestamp, pods[0].rt.Current().Timestamp, pods[0].rt.Current().Source, pods[0].rt.Current().Decofile, pods[0].rt.Reloads())
	}
}

// TestNewerChangeSupersedesRollout: while a rollout waits on a pod that holds the request, newer
// content arrives; the outdated rollout stops and the new one completes without waiting for the
// old one's timeout.
func TestNewerChangeSupersedesRollout(t *testing.T) {
	e := newEnv(t, rollout.Options{Notify: notify.Config{Timeout: time.Minute, PodTimeout: time.Minute}})
	df := e.decofile("busy", false)
	const oldTS, newTS = 1731600600, 1731600700
	var held atomic.Int64
	e.sitePod("busy-a", podOpts{labels: labelled(df)})
	slow := e.sitePod("busy-b", podOpts{labels: labelled(df), wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if bytes.Contains(body, []byte(`"timestamp":"`+strconv.Itoa(oldTS)+`"`)) {
				held.Add(1)
				<-r.Context().Done() // never answers the old version
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			h.ServeHTTP(w, r)
		})
	}})
	e.store(df, []byte(`{"v":"old"}`), "7777777777777777777777777777777777777777", oldTS, false)
	e.podsNotified(df, metav1.ConditionUnknown, "commit:7777777777777777777777777777777777777777", 10*time.Second)
	testenv.Eventually(t, 10*time.Second, func() error {
		if held.Load() == 0 {
			return errors.New("the slow pod has not been reached yet")
		}
		return nil
	})
	start := time.Now()
	newer := []byte(`{"v":"new"}`)
	e.store(df, newer, "8888888888888888888888888888888888888888", newTS, false)
	got := e.podsNotified(df, metav1.ConditionTrue, "Successfully notified all pods for commit:8888888888888888888888888888888888888888", 20*time.Second)
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("the new version waited %s for the outdated rollout", took)
	}
	if slow.rt.Current().Hash != encode.Hash(newer) || got.Status.NotifiedHash != encode.Hash(newer) {
		t.Fatalf("slow pod serves %s; notifiedHash %s", slow.rt.Current().Decofile, got.Status.NotifiedHash)
	}
}

// TestRolloutStopsWhenItsDecofileMovesShard: a rollout waits on a hanging pod when its Decofile
// is moved to another shard. The shard it left stops that rollout (the pod's request is
// cancelled at once, not at the pod timeout) and writes nothing more: the shard it joined
// decides from the status.
func TestRolloutStopsWhenItsDecofileMovesShard(t *testing.T) {
	a, err := shard.Parse(shard.ForShard("a"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, rollout.Options{Shard: a, Notify: notify.Config{Timeout: 5 * time.Minute, PodTimeout: 5 * time.Minute}, RetryBase: time.Minute})
	df := e.decofile("moving", false)
	cur := e.get(df)
	cur.Labels = map[string]string{shard.Key: "a"}
	if err := e.c.Client.Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	reached, cancelled := make(chan struct{}, 1), make(chan struct{}, 1)
	e.sitePod("moving-a", podOpts{labels: labelled(df), wrap: func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Read to the end: only then does the server see the connection close.
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case reached <- struct{}{}:
			default:
			}
			<-r.Context().Done()
			select {
			case cancelled <- struct{}{}:
			default:
			}
		})
	}})
	e.store(df, []byte(`{"a":1}`), "7777777777777777777777777777777777777777", 1731600600, false)
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the rollout never reached the pod")
	}

	cur = e.get(df)
	cur.Labels[shard.Key] = "b"
	if err := e.c.Client.Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	case <-time.After(20 * time.Second):
		t.Fatal("the shard the Decofile left kept its rollout running")
	}
	before := e.get(df).ResourceVersion
	time.Sleep(2 * time.Second)
	if after := e.get(df); after.ResourceVersion != before {
		t.Errorf("the Decofile was written after it left the shard: %+v", after.Status.Rollout)
	}
}
