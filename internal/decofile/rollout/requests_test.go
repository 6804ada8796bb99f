package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/notify"
	"github.com/siteops/siteops/internal/decofile/rollout"
	"github.com/siteops/siteops/internal/testenv"
)

// wire records the manager's requests for single Decofiles (and their status) as they go out,
// with the size of each answer once the manager has read it.
type wire struct {
	mu   sync.Mutex
	reqs []*wireRequest
}

type wireRequest struct {
	method, path, query string
	answered            bool
	answerBytes         int
}

func (w *wire) wrap(rt http.RoundTripper) http.RoundTripper {
	return promhttp.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		method := req.Method
		if method == http.MethodGet && req.URL.Query().Get("watch") == "true" {
			method = "WATCH"
		}
		r := &wireRequest{method: method, path: req.URL.Path, query: req.URL.RawQuery}
		w.mu.Lock()
		w.reqs = append(w.reqs, r)
		w.mu.Unlock()
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		resp.Body = &countedBody{ReadCloser: resp.Body, w: w, r: r}
		return resp, nil
	})
}

// find returns copies of the requests with method whose path ends with suffix.
func (w *wire) find(method, suffix string) []wireRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []wireRequest
	for _, r := range w.reqs {
		if r.method == method && strings.HasSuffix(r.path, suffix) {
			out = append(out, *r)
		}
	}
	return out
}

type countedBody struct {
	io.ReadCloser
	w *wire
	r *wireRequest
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.w.mu.Lock()
	b.r.answerBytes += n
	if err != nil {
		b.r.answered = true
	}
	b.w.mu.Unlock()
	return n, err
}

func (b *countedBody) Close() error {
	b.w.mu.Lock()
	b.r.answered = true
	b.w.mu.Unlock()
	return b.ReadCloser.Close()
}

// TestRolloutWithoutPodsWritesStatusOnce: the rollout of a Decofile no pod reads (a tenant's 300 KB
// inline Decofile) is recorded, start and result, in one status write, computed from the
// manager's cache: the Decofile is not read from the API server, and the answer to the write
// carries its metadata only, not the content the tenant wrote. The status ends as a start
// followed by a result would leave it.
func TestRolloutWithoutPodsWritesStatusOnce(t *testing.T) {
	var w wire
	e := newEnvsOn(t, 1, w.wrap, rollout.Options{})[0]
	tn := e.c.TenantIn(t, e.ns)
	ctx := context.Background()
	big := strings.Repeat("lorem ipsum dolor sit amet ", 300<<10/27)
	df := &decov1alpha1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: e.ns},
		Spec: decov1alpha1.DecofileSpec{Source: decov1alpha1.SourceInline, Inline: &decov1alpha1.InlineSource{
			Value: map[string]apiextensionsv1.JSON{"pages/home": {Raw: []byte(strconv.Quote(big))}}}},
	}
	if err := tn.Client.Create(ctx, df); err != nil {
		t.Fatalf("tenant creates its Decofile: %v", err)
	}
	if err := tn.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: df.ReloadSecretName(), Namespace: e.ns},
		Data: map[string][]byte{decov1alpha1.ReloadTokenKey: []byte(reloadToken)}}); err != nil {
		t.Fatalf("tenant creates the reload Secret: %v", err)
	}

	self := "/namespaces/" + e.ns + "/decofiles/big"
	for i, commit := range []string{"5151515151515151515151515151515151515151", "6262626262626262626262626262626262626262"} {
		content := []byte(`{"pages/home":"` + big[:1000] + `","version":` + strconv.Itoa(i) + `}`)
		before := time.Now().Truncate(time.Second)
		patched := len(w.find(http.MethodPut, self+"/status"))
		e.store(df, content, commit, 1731800000+int64(i), false)
		got := e.podsNotified(df, metav1.ConditionTrue, "Successfully notified all pods for commit:"+commit, 20*time.Second)

		var patches []wireRequest
		testenv.Eventually(t, 10*time.Second, func() error {
			patches = w.find(http.MethodPut, self+"/status")[patched:]
			for _, p := range patches {
				if !p.answered {
					return errors.New("the answer to the status write is not read yet")
				}
			}
			return nil
		})
		if len(patches) != 1 {
			t.Errorf("rollout %d: %d status writes without pods, want 1", i+1, len(patches))
		}
		for _, p := range patches {
			if p.answerBytes > 8<<10 {
				t.Errorf("rollout %d: the answer to a status write is %d bytes: more than the metadata", i+1, p.answerBytes)
			}
		}
		if n := len(w.find(http.MethodGet, self)); n != 0 {
			t.Errorf("rollout %d: the Decofile was read from the API server %d times; the cache has what a status write needs", i+1, n)
		}
		// No pod needs the content or the token: neither is read.
		for _, name := range []string{"/configmaps/" + df.ConfigMapName(), "/secrets/" + df.ReloadSecretName()} {
			if n := len(w.find(http.MethodGet, name)); n != 0 {
				t.Errorf("rollout %d: %s read %d times for a rollout without pods", i+1, name, n)
			}
		}

		if got.Status.NotifiedHash != encode.Hash(content) {
			t.Errorf("rollout %d: notifiedHash %q, want %q", i+1, got.Status.NotifiedHash, encode.Hash(content))
		}
		ro := got.Status.Rollout
		if ro == nil || ro.ID != "commit:"+commit || ro.Total != 0 || ro.Notified != 0 || ro.StartedAt == nil || ro.FinishedAt == nil {
			t.Fatalf("rollout %d: status.rollout %+v", i+1, ro)
		}
		if ro.StartedAt.Before(&metav1.Time{Time: before}) || ro.FinishedAt.Before(ro.StartedAt) {
			t.Errorf("rollout %d: started %s and finished %s, want both since %s", i+1, ro.StartedAt, ro.FinishedAt, before)
		}
		c := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionPodsNotified)
		if c.Reason != decov1alpha1.ReasonNotificationSucceeded || c.LastTransitionTime.Before(&metav1.Time{Time: before}) {
			t.Errorf("rollout %d: PodsNotified %+v, want %s, changed since %s", i+1, c, decov1alpha1.ReasonNotificationSucceeded, before)
		}
	}
	var d decov1alpha1.Decofile
	if err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(df), &d); err != nil || len(d.Spec.Inline.Value["pages/home"].Raw) < len(big) {
		t.Errorf("the tenant's inline content is not whole in the Decofile (%v)", err)
	}
}

// TestRolloutListsPodsInsteadOfReadingEach: a rollout looks its pods up in a listing at most
// half a second old instead of reading each pod from the API server before it is notified; a pod
// tried again after the backoff is looked at anew, so one deleted after its first attempt is
// skipped, not sent the content again.
func TestRolloutListsPodsInsteadOfReadingEach(t *testing.T) {
	var w wire
	e := newEnvsOn(t, 1, w.wrap, rollout.Options{Notify: notify.Config{Backoff: 1500 * time.Millisecond}})[0]
	df := e.decofile("many", false)
	var pods []*sitePod
	for i := range 20 {
		pods = append(pods, e.sitePod(fmt.Sprintf("many-%02d", i), podOpts{labels: labelled(df)}))
	}
	// The last pod fails its first attempt and is deleted before it answers.
	var answered atomic.Int32
	gone := e.sitePod("many-gone", podOpts{labels: labelled(df), wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
			if answered.Add(1) == 1 {
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "many-gone", Namespace: e.ns}}
				if err := e.c.Client.Delete(req.Context(), pod, client.GracePeriodSeconds(0)); err != nil {
					t.Errorf("delete pod many-gone: %v", err)
				}
				http.Error(rw, "restarting", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(rw, req)
		})
	}})

	commit := "7373737373737373737373737373737373737373"
	content := []byte(`{"pages/home":{"title":"many"}}`)
	e.store(df, content, commit, 1731900000, false)
	got := e.podsNotified(df, metav1.ConditionTrue, "Successfully notified all pods for commit:"+commit, 20*time.Second)

	for _, p := range pods {
		if p.rt.Current().Hash != encode.Hash(content) {
			t.Errorf("%s does not serve the new content", p.pod.Name)
		}
	}
	if n := answered.Load(); n != 1 || gone.rt.Reloads() != 0 {
		t.Errorf("the pod deleted after its first attempt was tried %d times and reloaded %d times; want 1 and 0", n, gone.rt.Reloads())
	}
	if ro := got.Status.Rollout; ro == nil || ro.Total != 21 || ro.Notified != 20 || ro.Skipped != 1 || ro.Failed != 0 {
		t.Errorf("rollout summary %+v, want 21 pods: 20 notified, 1 skipped", ro)
	}
	if n := len(w.find(http.MethodGet, "/pods/many-00")); n != 0 {
		t.Errorf("pod many-00 was read %d times from the API server; the listing has it", n)
	}
	// Two selectors, listed when the rollout starts and once more for the retry.
	if n := len(w.find(http.MethodGet, "/namespaces/"+e.ns+"/pods")); n > 4 {
		t.Errorf("the pods were listed %d times for one rollout, want at most 4", n)
	}
}

// TestDeliveryWritesRolloutWithoutPods: with the delivery controller wired to the rollout's
// Settler (as the manager wires them), a tenant's inline Decofile without pods is delivered and
// its rollout recorded in one status write, for the first content and for an edit; once a pod
// reads the Decofile, the next edit is left to the rollout controller, which sends it to the pod,
// and the edit after that is left to it without the settler's listing of pods.
func TestDeliveryWritesRolloutWithoutPods(t *testing.T) {
	var w wire
	e := newEnvsOn(t, 1, w.wrap, rollout.Options{}, func(mgr ctrl.Manager) error {
		return controller.Setup(mgr, controller.Options{Rollout: rollout.Settler{Reader: mgr.GetAPIReader()}})
	})[0]
	tn := e.c.TenantIn(t, e.ns)
	ctx := context.Background()
	df := &decov1alpha1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "alone", Namespace: e.ns},
		Spec: decov1alpha1.DecofileSpec{Source: decov1alpha1.SourceInline, Inline: &decov1alpha1.InlineSource{
			Value: map[string]apiextensionsv1.JSON{"site": {Raw: []byte(`{"name":"first"}`)}}}},
	}
	self := "/namespaces/" + e.ns + "/decofiles/alone/status"
	// settled waits until the content naming name is stored and confirmed by all (total) pods.
	settled := func(name string, total int32) *decov1alpha1.Decofile {
		t.Helper()
		var got *decov1alpha1.Decofile
		testenv.Eventually(t, 20*time.Second, func() error {
			got = e.get(df)
			c := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionPodsNotified)
			ro := got.Status.Rollout
			// The ConfigMap is written before the status: a status of the edit before may still be here.
			if got.Status.ObservedGeneration != got.Generation {
				return fmt.Errorf("status of generation %d, want %d", got.Status.ObservedGeneration, got.Generation)
			}
			if !meta.IsStatusConditionTrue(got.Status.Conditions, decov1alpha1.ConditionReady) || c == nil || c.Status != metav1.ConditionTrue ||
				got.Status.NotifiedHash != got.Status.ContentHash || ro == nil || ro.ID != decov1alpha1.RolloutID(&got.Status) || ro.FinishedAt == nil {
				return fmt.Errorf("status %+v", got.Status)
			}
			if ro.Total != total || ro.Notified != total {
				return fmt.Errorf("rollout %+v, want %d pods notified", ro, total)
			}
			var cm corev1.ConfigMap
			if err := e.c.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: df.ConfigMapName()}, &cm); err != nil {
				return err
			}
			if !strings.Contains(cm.Data[decov1alpha1.KeyJSON], `"`+name+`"`) {
				return fmt.Errorf("ConfigMap holds %q", cm.Data[decov1alpha1.KeyJSON])
			}
			return nil
		})
		return got
	}
	edit := func(name string) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			var d decov1alpha1.Decofile
			if err := tn.Client.Get(ctx, client.ObjectKeyFromObject(df), &d); err != nil {
				return err
			}
			d.Spec.Inline.Value["site"] = apiextensionsv1.JSON{Raw: []byte(`{"name":"` + name + `"}`)}
			return tn.Client.Update(ctx, &d)
		})
		if err != nil {
			t.Fatalf("tenant edits its Decofile: %v", err)
		}
	}
	// writes is the status writes since n, once every one of them is answered and the
	// controllers are idle (nothing more comes within a second).
	writes := func(n int) int {
		t.Helper()
		time.Sleep(time.Second)
		return len(w.find(http.MethodPut, self)) - n
	}

	if err := tn.Client.Create(ctx, df); err != nil {
		t.Fatalf("tenant creates its Decofile: %v", err)
	}
	settled("first", 0)
	if n := writes(0); n != 1 {
		t.Errorf("first delivery without pods: %d status writes, want 1", n)
	}
	before := len(w.find(http.MethodPut, self))
	edit("second")
	settled("second", 0)
	if n := writes(before); n != 1 {
		t.Errorf("edit without pods: %d status writes, want 1", n)
	}

	var s corev1.Secret
	if err := e.c.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: df.ReloadSecretName()}, &s); err != nil {
		t.Fatal(err)
	}
	pod := e.sitePod("alone-a", podOpts{labels: labelled(df), token: string(s.Data[decov1alpha1.ReloadTokenKey])})
	// settlerLists counts the settler's listings: of pod metadata, at most one pod.
	settlerLists := func() int {
		n := 0
		for _, r := range w.find(http.MethodGet, "/namespaces/"+e.ns+"/pods") {
			if strings.Contains(r.query, "limit=1") {
				n++
			}
		}
		return n
	}
	for _, name := range []string{"third", "fourth"} {
		listed := settlerLists()
		edit(name)
		got := settled(name, 1)
		if cur := pod.rt.Current(); cur.Hash != got.Status.ContentHash || !strings.Contains(string(cur.Decofile), `"`+name+`"`) {
			t.Errorf("the pod serves %s (hash %s), want the %s content (hash %s)", cur.Decofile, cur.Hash, name, got.Status.ContentHash)
		}
		// The third follows a rollout without pods: listed. The fourth follows one with a pod.
		if n := settlerLists() - listed; (name == "third") != (n > 0) {
			t.Errorf("%s edit: the settler listed pods %d times", name, n)
		}
	}
}
