package rollout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/rollout"
	"github.com/siteops/siteops/internal/testenv"
)

// arrivals records, per pod, when each reload arrived.
type arrivals struct {
	mu  sync.Mutex
	log []arrival
}

type arrival struct {
	pod string
	at  time.Time
}

func (a *arrivals) wrap(pod string) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				a.mu.Lock()
				a.log = append(a.log, arrival{pod, time.Now()})
				a.mu.Unlock()
			}
			h.ServeHTTP(w, r)
		})
	}
}

func (e *env) setRollout(df *decov1alpha1.Decofile, ro *decov1alpha1.RolloutSpec) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var d decov1alpha1.Decofile
		if err := e.c.Client.Get(context.Background(), client.ObjectKeyFromObject(df), &d); err != nil {
			return err
		}
		d.Spec.Rollout = ro
		return e.c.Client.Update(context.Background(), &d)
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// TestProgressiveRolloutNotifiesStepByStep: steps [1, 50%, 100%] over six pods reach one pod,
// then three, then all six, in name order, with the pause between steps, and the confirmed
// content is kept for a rollback.
func TestProgressiveRolloutNotifiesStepByStep(t *testing.T) {
	e := newEnv(t, rollout.Options{})
	df := e.decofile("shop", false)
	const pause = 400 * time.Millisecond
	e.setRollout(df, &decov1alpha1.RolloutSpec{Steps: steps(1, "50%", "100%"), Pause: &metav1.Duration{Duration: pause}})
	var got arrivals
	var names []string
	for i := range 6 {
		name := fmt.Sprintf("shop-%d", i)
		names = append(names, name)
		e.sitePod(name, podOpts{labels: labelled(df), wrap: got.wrap(name)})
	}
	commit := "abababababababababababababababababababab"
	content := []byte(`{"site":{"name":"Shop"}}`)
	w := e.startWait(df, "commit:"+commit, 60*time.Second)
	e.store(df, content, commit, 1731700000, false)
	done := e.podsNotified(df, metav1.ConditionTrue, "Successfully notified all pods for commit:"+commit, 30*time.Second)

	got.mu.Lock()
	log := slices.Clone(got.log)
	got.mu.Unlock()
	if len(log) != 6 {
		t.Fatalf("%d reloads, want 6: %+v", len(log), log)
	}
	steps := [][]string{names[:1], names[1:3], names[3:]}
	var stepEnd, stepStart []time.Time
	i := 0
	for _, want := range steps {
		var pods []string
		first, last := log[i].at, log[i].at
		for range want {
			pods = append(pods, log[i].pod)
			first, last = minTime(first, log[i].at), maxTime(last, log[i].at)
			i++
		}
		slices.Sort(pods)
		if !slices.Equal(pods, want) {
			t.Fatalf("step reached %v, want %v (arrivals %+v)", pods, want, log)
		}
		stepStart, stepEnd = append(stepStart, first), append(stepEnd, last)
	}
	for s := 1; s < len(steps); s++ {
		if gap := stepStart[s].Sub(stepEnd[s-1]); gap < pause {
			t.Errorf("step %d began %s after step %d, before the %s pause", s+1, gap, s, pause)
		}
	}
	ro := done.Status.Rollout
	if ro.Steps != 3 || ro.Step != 3 || ro.Phase != rollout.PhaseSucceeded || ro.Notified != 6 || ro.Updated != 6 {
		t.Errorf("rollout status %+v", ro)
	}
	if lg := done.Status.LastGood; lg == nil || lg.ContentHash != encode.Hash(content) || lg.GitHubCommit != commit {
		t.Errorf("last good content not kept: %+v", lg)
	}
	var kept corev1.ConfigMap
	if err := e.c.Client.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: rollout.LastGoodConfigMapName(df)}, &kept); err != nil || kept.Data[decov1alpha1.KeyJSON] != string(content) {
		t.Errorf("last-good ConfigMap: %v %v", kept.Data, err)
	}
	if v, err := w.result(t); err != nil || !w.sawStep("step 2/3") {
		t.Errorf("wait: %+v %v; the steps were not visible to it", v, err)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (w *waiter) sawStep(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.verdicts {
		if ro := v.Rollout; ro != nil && fmt.Sprintf("step %d/%d", ro.Step, ro.Steps) == s {
			return true
		}
	}
	return false
}

// shopPod is a site pod that refuses to serve a product page when its content has a negative
// price, and counts the reloads that carried such content.
type shopPod struct {
	*sitePod
	sawBad atomic.Int64
}

// TestBadPublishIsRolledBack: with the real delivery controller, a publish the pods cannot serve
// is caught at the first step and rolled back: the bad content reached at most that step's pod,
// every pod ends on the good content, the ConfigMap holds it again, PodsNotified=False reason
// RolledBack names the step and the pod, a Warning Event says so, and the bad version is not
// stored again until the source changes; the next good change then rolls out.
func TestBadPublishIsRolledBack(t *testing.T) {
	e := newEnv(t, rollout.Options{}, func(mgr ctrl.Manager) error {
		return controller.Setup(mgr, controller.Options{})
	})
	ctx := context.Background()
	block := func(v string) map[string]apiextensionsv1.JSON {
		return map[string]apiextensionsv1.JSON{"products": {Raw: []byte(v)}}
	}
	df := &decov1alpha1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "store", Namespace: e.ns},
		Spec: decov1alpha1.DecofileSpec{Source: decov1alpha1.SourceInline,
			Inline: &decov1alpha1.InlineSource{Value: block(`{"shoe":{"price":9}}`)},
			Rollout: &decov1alpha1.RolloutSpec{Steps: steps(1, "50%", "100%"), Pause: &metav1.Duration{Duration: 200 * time.Millisecond},
				Check: &decov1alpha1.RolloutCheck{Path: "/products/shoe"}}},
	}
	e.create(df)
	var token string
	testenv.Eventually(t, 20*time.Second, func() error {
		var s corev1.Secret
		if err := e.c.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: df.ReloadSecretName()}, &s); err != nil {
			return err
		}
		token = string(s.Data[decov1alpha1.ReloadTokenKey])
		return nil
	})
	var pods []*shopPod
	for i := range 6 {
		p := &shopPod{}
		p.sitePod = e.sitePod(fmt.Sprintf("store-%d", i), podOpts{labels: labelled(df), token: token, wrap: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == http.MethodPost:
					// What the pod loaded or refused, not the request bytes: the body may be compressed.
					rec := &statusRecorder{ResponseWriter: w}
					h.ServeHTTP(rec, r)
					if rec.status == http.StatusUnprocessableEntity || bytes.Contains(p.rt.Current().Decofile, []byte(`"price":-1`)) {
						p.sawBad.Add(1)
					}
				case r.URL.Path == "/products/shoe":
					if bytes.Contains(p.rt.Current().Decofile, []byte(`"price":-1`)) {
						http.Error(w, "negative price", http.StatusInternalServerError)
						return
					}
					_, _ = io.WriteString(w, "shoe")
				default:
					h.ServeHTTP(w, r)
				}
			})
		}})
		pods = append(pods, p)
	}
	edit := func(v string) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			var d decov1alpha1.Decofile
			if err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(df), &d); err != nil {
				return err
			}
			d.Spec.Inline.Value = block(v)
			return e.c.Client.Update(ctx, &d)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// A first change, made once the pods run, reaches every pod and is kept as the last good one.
	edit(`{"shoe":{"price":10}}`)
	goodHash := mergedHash(t, map[string]string{"products": `{"shoe":{"price":10}}`})
	testenv.Eventually(t, 30*time.Second, func() error {
		good := e.get(df)
		if lg := good.Status.LastGood; lg == nil || good.Status.NotifiedHash != goodHash || lg.ContentHash != goodHash {
			return fmt.Errorf("first change not confirmed and kept yet: %+v", good.Status)
		}
		return nil
	})
	for _, p := range pods {
		if p.rt.Current().Hash != goodHash {
			t.Fatalf("%s does not serve the first change", p.pod.Name)
		}
	}
	rolledBack := func(badHash, msg string) *decov1alpha1.Decofile {
		t.Helper()
		var got *decov1alpha1.Decofile
		testenv.Eventually(t, 30*time.Second, func() error {
			got = e.get(df)
			c := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionPodsNotified)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != rollout.ReasonRolledBack || !strings.Contains(c.Message, msg) {
				return fmt.Errorf("PodsNotified %+v", c)
			}
			return nil
		})
		if ro := got.Status.Rollout; ro == nil || ro.FailedHash != badHash || ro.Phase != rollout.PhaseRolledBack || ro.Step != 1 {
			t.Fatalf("rollout status %+v", ro)
		}
		if h := got.Status.History; len(h) == 0 || h[0].Result != rollout.ResultRolledBack || h[0].ContentHash != badHash {
			t.Fatalf("history after the rollback %+v", h)
		}
		// Ready=False and Stalled=True: kstatus reads the rolled-back version as Failed.
		ready := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != rollout.ReasonRolledBack {
			t.Fatalf("Ready after the rollback %+v", ready)
		}
		if res := testenv.Kstatus(t, got, decov1alpha1.GroupVersion.WithKind("Decofile")); res.Status != status.FailedStatus {
			t.Fatalf("kstatus after the rollback %s (%s), want Failed", res.Status, res.Message)
		}
		if got.Status.ContentHash != goodHash || got.Status.NotifiedHash != goodHash {
			t.Fatalf("status names content %s (notified %s), want the good %s", got.Status.ContentHash, got.Status.NotifiedHash, goodHash)
		}
		// The store holds the good content again, under a newer timestamp, as the loader reads it.
		e.holdEverywhere(got, pods, goodHash, "after the rollback")
		return got
	}
	reachedBad := func() []string {
		var out []string
		for _, p := range pods {
			if p.sawBad.Load() > 0 {
				out = append(out, p.pod.Name)
			}
		}
		return out
	}

	// A negative price: the pods load it but cannot serve the product page. Step 1 (store-0)
	// fails its check and is rolled back.
	edit(`{"shoe":{"price":-1}}`)
	badHash := mergedHash(t, map[string]string{"products": `{"shoe":{"price":-1}}`})
	got := rolledBack(badHash, "step 1/3 failed its health check: store-0: check /products/shoe: HTTP 500, want 200")
	if r := reachedBad(); !slices.Equal(r, []string{"store-0"}) {
		t.Fatalf("the bad content reached %v, want only the first step's pod", r)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		var evs eventsv1.EventList
		if err := e.c.Client.List(ctx, &evs, client.InNamespace(e.ns)); err != nil {
			return err
		}
		// One Event per rollback (an alert each, with --events-addr), from the controller
		// that knows its whole story: the step, the pods, and the pods given the content back.
		var notes []string
		for _, ev := range evs.Items {
			if ev.Reason == rollout.ReasonRolledBack && ev.Type == corev1.EventTypeWarning && ev.Regarding.Name == df.Name {
				notes = append(notes, ev.Note)
			}
		}
		if len(notes) != 1 || !strings.Contains(notes[0], "store-0") {
			return fmt.Errorf("RolledBack Warning events %q, want one naming store-0", notes)
		}
		return nil
	})

	// Not retried while the source still holds it: a forced delivery reconcile leaves it out.
	requested := time.Now().Format(time.RFC3339Nano)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var d decov1alpha1.Decofile
		if err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(df), &d); err != nil {
			return err
		}
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[decov1alpha1.AnnotationReconcileRequestedAt] = requested
		return e.c.Client.Update(ctx, &d)
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		if h := e.get(df).Status.LastHandledReconcileAt; h != requested {
			return fmt.Errorf("reconcile request not handled yet (%q)", h)
		}
		return nil
	})
	if now := e.get(df); now.Status.ContentHash != goodHash || now.Status.Timestamp != got.Status.Timestamp || pods[1].sawBad.Load() != 0 {
		t.Fatalf("the rolled-back content was stored or sent again: %+v", now.Status)
	}

	// Content the runtime refuses to load (422) is caught by the reload answer itself.
	edit(`{"shoe":{"__resolveType":""}}`)
	rolledBack(mergedHash(t, map[string]string{"products": `{"shoe":{"__resolveType":""}}`}), "step 1/3 failed: store-0: HTTP 422")
	if r := reachedBad(); !slices.Equal(r, []string{"store-0"}) {
		t.Fatalf("the bad content reached %v, want only the first step's pod", r)
	}

	// The source changes to good content: it rolls out to every pod.
	edit(`{"shoe":{"price":12}}`)
	next := mergedHash(t, map[string]string{"products": `{"shoe":{"price":12}}`})
	testenv.Eventually(t, 30*time.Second, func() error {
		got := e.get(df)
		c := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionPodsNotified)
		if got.Status.ContentHash != next || c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("next change: %+v", got.Status)
		}
		if ro := got.Status.Rollout; ro.FailedHash != "" || ro.Phase != rollout.PhaseSucceeded {
			return fmt.Errorf("rollout %+v", ro)
		}
		return nil
	})
	for _, p := range pods {
		if p.rt.Current().Hash != next {
			t.Fatalf("%s serves %s", p.pod.Name, p.rt.Current().Decofile)
		}
	}

	// A delivery racing a rollback: new good content is published the moment the rollback of a
	// bad one is asked for, so it reaches the delivery controller before or after the last good
	// content is stored again. Either way the status, the ConfigMap and every pod end on it.
	edit(`{"shoe":{"price":-1,"sale":true}}`)
	raceBad := mergedHash(t, map[string]string{"products": `{"shoe":{"price":-1,"sale":true}}`})
	testenv.Eventually(t, 30*time.Second, func() error {
		if ro := e.get(df).Status.Rollout; ro == nil || ro.FailedHash != raceBad {
			return fmt.Errorf("rollback of the bad content not asked for yet: %+v", ro)
		}
		return nil
	})
	edit(`{"shoe":{"price":14}}`)
	final := mergedHash(t, map[string]string{"products": `{"shoe":{"price":14}}`})
	testenv.Eventually(t, 30*time.Second, func() error {
		got := e.get(df)
		c := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionPodsNotified)
		ready := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionReady)
		if got.Status.ContentHash != final || got.Status.NotifiedHash != final || c == nil || c.Status != metav1.ConditionTrue || ready == nil || ready.Status != metav1.ConditionTrue {
			return fmt.Errorf("after the race: %+v", got.Status)
		}
		return nil
	})
	e.holdEverywhere(e.get(df), pods, final, "after the race")
}

// holdEverywhere checks that df's ConfigMap holds the content hash under the timestamp its
// status (got) names, and that every pod serves it; when says at which point of the test.
func (e *env) holdEverywhere(got *decov1alpha1.Decofile, pods []*shopPod, hash, when string) {
	e.t.Helper()
	var cm corev1.ConfigMap
	if err := e.c.Client.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: got.ConfigMapName()}, &cm); err != nil {
		e.t.Fatal(err)
	}
	stored, err := encode.Decode(got.Status.Format, cm.Data[keyFor(got.Status.Format)], 1<<20)
	if err != nil || encode.Hash(stored) != hash || cm.Data[decov1alpha1.KeyTimestamp] != fmt.Sprint(got.Status.Timestamp) {
		e.t.Fatalf("%s the ConfigMap holds %s (ts %s, status %d), %v", when, stored, cm.Data[decov1alpha1.KeyTimestamp], got.Status.Timestamp, err)
	}
	for _, p := range pods {
		if p.rt.Current().Hash != hash {
			e.t.Fatalf("%s %s serves %s", when, p.pod.Name, p.rt.Current().Decofile)
		}
	}
}

// statusRecorder remembers the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// mergedHash is the contentHash the delivery controller records for inline blocks.
func mergedHash(t *testing.T, blocks map[string]string) string {
	t.Helper()
	raw := map[string]json.RawMessage{}
	for k, v := range blocks {
		raw[k] = json.RawMessage(v)
	}
	merged, err := encode.Merge(raw)
	if err != nil {
		t.Fatal(err)
	}
	return encode.Hash(merged)
}

func keyFor(f decov1alpha1.Format) string {
	if f == decov1alpha1.FormatBin {
		return decov1alpha1.KeyBin
	}
	return decov1alpha1.KeyJSON
}

// TestTamperedLastGoodIsNeverSent: the last-good ConfigMap is in the tenant's namespace; what a
// tenant plants there is refused (its hash is not status.lastGood's), the failed step ends with
// RollbackFailed, and the planted content reaches no pod.
func TestTamperedLastGoodIsNeverSent(t *testing.T) {
	e := newEnv(t, rollout.Options{})
	tenant := e.c.TenantIn(t, e.ns)
	df := e.decofile("cafe", false)
	e.setRollout(df, &decov1alpha1.RolloutSpec{Steps: steps(1, "100%"), Pause: &metav1.Duration{}})
	var planted atomic.Int64
	var pods []*sitePod
	for i := range 3 {
		var self atomic.Pointer[sitePod]
		p := e.sitePod(fmt.Sprintf("cafe-%d", i), podOpts{labels: labelled(df), wrap: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(w, r)
				// What the pod took, not the request bytes: the body may be compressed.
				if sp := self.Load(); r.Method == http.MethodPost && sp != nil && bytes.Contains(sp.rt.Current().Decofile, []byte("planted")) {
					planted.Add(1)
				}
			})
		}})
		self.Store(p)
		pods = append(pods, p)
	}
	good := []byte(`{"menu":{"coffee":3}}`)
	e.store(df, good, "1212121212121212121212121212121212121212", 1731800000, false)
	testenv.Eventually(t, 30*time.Second, func() error {
		if lg := e.get(df).Status.LastGood; lg == nil || lg.ContentHash != encode.Hash(good) {
			return errors.New("last good content not kept yet")
		}
		return nil
	})
	ctx := context.Background()
	testenv.Eventually(t, 20*time.Second, func() error {
		var cm corev1.ConfigMap
		if err := tenant.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: rollout.LastGoodConfigMapName(df)}, &cm); err != nil {
			if apierrors.IsForbidden(err) {
				// Right after the API server started, its bootstrap may still reset the
				// aggregated edit role: aggregate again, as the aggregation controller would.
				_ = e.c.InstallTenantRoles(ctx)
			}
			return err
		}
		cm.Data[decov1alpha1.KeyJSON] = `{"menu":"planted"}`
		return tenant.Client.Update(ctx, &cm)
	})
	// Content the runtime refuses: step 1 fails and wants to roll back.
	e.store(df, []byte(`{"menu":{"__resolveType":""}}`), "3434343434343434343434343434343434343434", 1731800100, false)
	got := e.podsNotified(df, metav1.ConditionFalse, "Failed to roll back commit:3434343434343434343434343434343434343434: step 1/2 failed: cafe-0: HTTP 422", 30*time.Second)
	if c := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionPodsNotified); c.Reason != rollout.ReasonRollbackFailed {
		t.Fatalf("condition %+v", c)
	}
	if planted.Load() != 0 {
		t.Fatal("the planted content was sent to a pod")
	}
	for _, p := range pods {
		if p.rt.Current().Hash != encode.Hash(good) {
			t.Fatalf("%s serves %s", p.pod.Name, p.rt.Current().Decofile)
		}
	}
}
