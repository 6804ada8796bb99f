package rollout_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/notify"
	"github.com/siteops/siteops/internal/decofile/rollout"
	"github.com/siteops/siteops/internal/testenv"
)

// Reasons the rollout records; spelled out so the tests read as the user sees them.
const (
	reasonMissingReloadToken   = "MissingReloadToken"
	reasonContentTooLarge      = "ContentTooLarge"
	reasonInvalidStoredContent = "InvalidStoredContent"
)

// maxExcerpt is how much of a pod's answer may be reported.
const maxExcerpt = 128

// bombGiB is the decompressed size of the brotli bomb the tests plant.
const bombGiB = 1

// brotliBomb compresses bombGiB GiB of zeros, streaming, into a decofile.bin value that fits in
// a ConfigMap (about 260 KB of base64).
func brotliBomb(t testing.TB) string {
	t.Helper()
	var buf bytes.Buffer
	b64 := base64.NewEncoder(base64.StdEncoding, &buf)
	w := brotli.NewWriterOptions(b64, brotli.WriterOptions{Quality: 1, LGWin: 24})
	zeros := make([]byte, 1<<20)
	for range bombGiB << 10 {
		if _, err := w.Write(zeros); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b64.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func brotliBase64(t testing.TB, content []byte) string {
	t.Helper()
	var buf bytes.Buffer
	w := brotli.NewWriter(&buf)
	_, _ = w.Write(content)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

// heapWatch samples the process's HeapInuse until stopped and reports the largest growth over
// the level right after a garbage collection at its start.
type heapWatch struct {
	base, peak atomic.Uint64
	stop       chan struct{}
	done       sync.WaitGroup
}

func watchHeap() *heapWatch {
	h := &heapWatch{stop: make(chan struct{})}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	h.base.Store(m.HeapInuse)
	h.peak.Store(m.HeapInuse)
	h.done.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapInuse > h.peak.Load() {
					h.peak.Store(m.HeapInuse)
				}
			}
		}
	})
	return h
}

// growth stops the sampling and returns the peak growth in bytes.
func (h *heapWatch) growth() uint64 {
	close(h.stop)
	h.done.Wait()
	return h.peak.Load() - h.base.Load()
}

// maxBombHeapGrowth is the stated bound: a rollout of planted content grows the manager's heap by
// less than this (the bounded loader needs at most the brotli window, about 32 MiB; the unbounded
// one grew it past 256 MiB).
const maxBombHeapGrowth = 64 << 20

// TestTenantPlantedContentNeverReachesPods: a tenant (edit in its namespace) replaces its
// Decofile's decofile.bin in the ConfigMap, keeping the timestamp, while the Decofile is silent,
// then turns it loud. A brotli bomb or defaced content is refused with a clear PodsNotified
// reason, the manager's heap stays bounded, and no pod receives anything.
func TestTenantPlantedContentNeverReachesPods(t *testing.T) {
	bomb := brotliBomb(t)
	cases := []struct {
		name, value, reason, msg string
		// oldStatus drops status.storedHash, as a status written before it was recorded.
		oldStatus bool
	}{
		{"brotli bomb", bomb, reasonInvalidStoredContent, "differs from status.storedHash", false},
		{"brotli bomb, status without storedHash", bomb, reasonContentTooLarge, "decodes to more than", true},
		{"defaced content", brotliBase64(t, []byte(`{"site":{"name":"defaced"}}`)), reasonInvalidStoredContent, "differs from status.storedHash", false},
		{"defaced content, status without storedHash", brotliBase64(t, []byte(`{"site":{"name":"defaced"}}`)), reasonInvalidStoredContent, "differs from the recorded", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, rollout.Options{RetryBase: time.Minute})
			tenant := e.c.TenantIn(t, e.ns)
			df := e.decofile("shop", true)
			pod := e.sitePod("shop-a", podOpts{labels: labelled(df), env: tokenEnv(df)})
			content := []byte(`{"site":{"name":"Shop"},"pages/home":{"path":"/"}}`)
			e.store(df, content, "9999999999999999999999999999999999999999", 1731700000, true)
			if tc.oldStatus {
				e.updateStatus(df, func(d *decov1alpha1.Decofile) { d.Status.StoredHash = "" })
			}
			ctx := context.Background()

			// The tenant plants the value, keeping timestamp.txt, and turns the Decofile loud. (Right
			// after the API server started, its bootstrap may still reset the aggregated edit role:
			// aggregate again, as the cluster's aggregation controller would.)
			testenv.Eventually(t, 20*time.Second, func() error {
				var cm corev1.ConfigMap
				if err := tenant.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: df.ConfigMapName()}, &cm); err != nil {
					if apierrors.IsForbidden(err) {
						_ = e.c.InstallTenantRoles(ctx)
					}
					return fmt.Errorf("tenant reads its ConfigMap: %w", err)
				}
				cm.Data[decov1alpha1.KeyBin] = tc.value
				if err := tenant.Client.Update(ctx, &cm); err != nil {
					return fmt.Errorf("tenant updates its ConfigMap: %w", err)
				}
				return nil
			})
			heap := watchHeap()
			err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
				var d decov1alpha1.Decofile
				if err := tenant.Client.Get(ctx, client.ObjectKeyFromObject(df), &d); err != nil {
					return err
				}
				d.Spec.Silent = false
				return tenant.Client.Update(ctx, &d)
			})
			if err != nil {
				t.Fatalf("tenant turns its Decofile loud: %v", err)
			}
			got := e.podsNotified(df, metav1.ConditionFalse, "Failed to notify pods for commit:9999999999999999999999999999999999999999", 30*time.Second)
			growth := heap.growth()
			t.Logf("heap grew by %d MiB at most", growth>>20)
			if growth >= maxBombHeapGrowth {
				t.Errorf("the manager's heap grew by %d MiB, want less than %d MiB", growth>>20, maxBombHeapGrowth>>20)
			}
			c := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionPodsNotified)
			t.Logf("PodsNotified: %s: %s", c.Reason, c.Message)
			if c.Reason != tc.reason || !strings.Contains(c.Message, tc.msg) {
				t.Errorf("PodsNotified %s %q, want reason %s with %q", c.Reason, c.Message, tc.reason, tc.msg)
			}
			if pod.rt.Reloads() != 0 || pod.rt.Current().Hash != encode.Hash([]byte("{}")) || got.Status.NotifiedHash != "" {
				t.Fatalf("the pod was notified: %d reloads, serves %.60s", pod.rt.Reloads(), pod.rt.Current().Decofile)
			}
		})
	}
}

// TestRolloutClientDefences: a pod that redirects is not followed (the redirect target sees no
// request); what a failing pod answers appears only as a short printable excerpt; a pod without
// a reload token is told apart from one with a wrong token.
func TestRolloutClientDefences(t *testing.T) {
	t.Run("redirect not followed", func(t *testing.T) {
		e := newEnv(t, rollout.Options{Notify: notify.Config{Attempts: 1}, RetryBase: time.Minute})
		df := e.decofile("hop", false)
		var reached atomic.Int64
		target := testenv.LoopbackListener(t)
		go func() {
			_ = http.Serve(target, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reached.Add(1)
				_, _ = io.Copy(io.Discard, r.Body)
			}))
		}()
		to := "http://" + target.Addr().String() + decov1alpha1.ReloadPath
		pod := e.sitePod("hop-a", podOpts{labels: labelled(df), env: tokenEnv(df), wrap: func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, to, http.StatusTemporaryRedirect)
			})
		}})
		e.store(df, []byte(`{"a":1}`), "abcabcabcabcabcabcabcabcabcabcabcabcabca", 1731700200, false)
		got := e.podsNotified(df, metav1.ConditionFalse, "hop-a: HTTP 307", 20*time.Second)
		c := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionPodsNotified)
		if !strings.Contains(c.Message, "redirect") || strings.Contains(c.Message, target.Addr().String()) {
			t.Errorf("message %q: want the redirect named, not its target", c.Message)
		}
		if n := reached.Load(); n != 0 || pod.rt.Reloads() != 0 {
			t.Fatalf("the redirect target got %d requests", n)
		}
	})

	t.Run("answer excerpt bounded and printable", func(t *testing.T) {
		e := newEnv(t, rollout.Options{Notify: notify.Config{Attempts: 1}, RetryBase: time.Minute})
		df := e.decofile("loud", false)
		const marker = "MARKER-7f3a9c"
		body := "\x1b[2J\x1b[31mboom\r\n\x00\tinjected: line\n" + strings.Repeat("é", 30) + strings.Repeat("x", 100) + marker + strings.Repeat("y", 10<<10)
		e.sitePod("loud-a", podOpts{labels: labelled(df), env: tokenEnv(df), wrap: func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, body)
			})
		}})
		e.store(df, []byte(`{"a":1}`), "bcdbcdbcdbcdbcdbcdbcdbcdbcdbcdbcdbcdbcdb", 1731700300, false)
		got := e.podsNotified(df, metav1.ConditionFalse, "loud-a: HTTP 503", 20*time.Second)
		msg := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionPodsNotified).Message
		t.Logf("message: %q", msg)
		excerpt := msg[strings.Index(msg, "loud-a: HTTP 503")+len("loud-a: HTTP 503"):]
		if strings.Contains(msg, marker) || len(excerpt) > 2+maxExcerpt || !strings.Contains(excerpt, "boom") {
			t.Errorf("excerpt %q: want at most %d bytes of the answer, with its start and not the marker", excerpt, maxExcerpt)
		}
		for _, r := range msg {
			if r < 0x20 || r > 0x7e {
				t.Fatalf("message %q has the non-printable %U", msg, r)
			}
		}
		testenv.Eventually(t, 10*time.Second, func() error {
			var evs eventsv1.EventList
			if err := e.c.Client.List(context.Background(), &evs, client.InNamespace(e.ns)); err != nil {
				return err
			}
			for _, ev := range evs.Items {
				if ev.Reason == "RolloutFailed" {
					if strings.Contains(ev.Note, marker) || strings.ContainsAny(ev.Note, "\x1b\r\n\x00") {
						return fmt.Errorf("event note %q carries the answer", ev.Note)
					}
					return nil
				}
			}
			return fmt.Errorf("no RolloutFailed event")
		})
	})

	t.Run("missing reload token", func(t *testing.T) {
		e := newEnv(t, rollout.Options{RetryBase: time.Minute})
		df := e.decofile("old", false)
		e.sitePod("old-a", podOpts{labels: labelled(df), env: tokenEnv(df)})
		// Started before injection: no DECO_RELEASE_RELOAD_TOKEN in its spec, so its runtime has no token.
		bare := e.sitePod("old-b", podOpts{labels: labelled(df), noToken: true})
		e.store(df, []byte(`{"a":1}`), "cdecdecdecdecdecdecdecdecdecdecdecdecdec", 1731700400, false)
		got := e.podsNotified(df, metav1.ConditionFalse, "old-b", 20*time.Second)
		c := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionPodsNotified)
		t.Logf("PodsNotified: %s: %s", c.Reason, c.Message)
		if c.Reason != reasonMissingReloadToken || !strings.Contains(c.Message, "redeploy") || !strings.Contains(c.Message, decov1alpha1.EnvReloadToken) {
			t.Fatalf("PodsNotified %s %q, want %s telling to redeploy", c.Reason, c.Message, reasonMissingReloadToken)
		}
		if bare.rt.Reloads() != 0 {
			t.Fatal("the pod without a token took the content")
		}
	})
}

// tokenEnv is the reload token reference the injection webhook gives a site container.
func tokenEnv(df *decov1alpha1.Decofile) []corev1.EnvVar {
	return []corev1.EnvVar{{Name: decov1alpha1.EnvReloadToken, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: df.ReloadSecretName()}, Key: decov1alpha1.ReloadTokenKey}}}}
}

// hangingPod is a Pod object whose address accepts connections and never answers them.
func (e *env) hangingPod(name string, labels map[string]string) *atomic.Int64 {
	e.t.Helper()
	l := testenv.LoopbackListener(e.t)
	var accepted atomic.Int64
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c) // held open, never read or answered
			mu.Unlock()
		}
	}()
	e.t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	addr := l.Addr().(*net.TCPAddr)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "site:latest",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(addr.Port)}}}}},
	}
	e.create(pod)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: addr.IP.String(), PodIPs: []corev1.PodIP{{IP: addr.IP.String()}}}
	if err := e.c.Client.Status().Update(context.Background(), pod); err != nil {
		e.t.Fatalf("set pod status: %v", err)
	}
	return &accepted
}

// TestHangingPodsDoNotDelayOtherRollouts: four Decofiles whose pods accept connections and never
// answer are being rolled out (their pods hold the requests for a minute); a fifth Decofile's
// rollout confirms while all four are still in progress.
func TestHangingPodsDoNotDelayOtherRollouts(t *testing.T) {
	e := newEnv(t, rollout.Options{Notify: notify.Config{PodTimeout: time.Minute, Timeout: 2 * time.Minute}})
	var hanging []*decov1alpha1.Decofile
	var accepted []*atomic.Int64
	for i := range 4 {
		df := e.decofile(fmt.Sprintf("tarpit-%d", i), false)
		for j := range 3 {
			accepted = append(accepted, e.hangingPod(fmt.Sprintf("tarpit-%d-%d", i, j), labelled(df)))
		}
		e.store(df, []byte(fmt.Sprintf(`{"tarpit":%d}`, i)), fmt.Sprintf("%040d", i+1), 1731700500, false)
		hanging = append(hanging, df)
	}
	for _, df := range hanging {
		e.podsNotified(df, metav1.ConditionUnknown, "Notifying pods for", 20*time.Second)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		for i, a := range accepted {
			if a.Load() == 0 {
				return fmt.Errorf("hanging pod %d has not been reached yet", i)
			}
		}
		return nil
	})

	df := e.decofile("shop", false)
	pods := []*sitePod{e.sitePod("shop-a", podOpts{labels: labelled(df)}), e.sitePod("shop-b", podOpts{labels: labelled(df)})}
	content := []byte(`{"site":{"name":"Shop"}}`)
	e.store(df, content, "dddddddddddddddddddddddddddddddddddddddd", 1731700600, false)
	// Well within the hanging pods' minute: only a rollout that did not wait for them gets here.
	e.podsNotified(df, metav1.ConditionTrue, "Successfully notified all pods", 30*time.Second)
	for _, p := range pods {
		if p.rt.Current().Hash != encode.Hash(content) {
			t.Fatalf("%s did not get the content", p.pod.Name)
		}
	}
	for _, h := range hanging {
		c := meta.FindStatusCondition(e.get(h).Status.Conditions, decov1alpha1.ConditionPodsNotified)
		if c == nil || c.Status != metav1.ConditionUnknown {
			t.Fatalf("%s: PodsNotified %+v, want the rollout still in progress (Unknown)", h.Name, c)
		}
	}
}

// BenchmarkRolloutBesideHangingDecofiles: four Decofiles whose three pods each accept connections
// and never answer are being rolled out; each iteration stores new content for a fifth Decofile
// with two site pods and measures until both serve it.
func BenchmarkRolloutBesideHangingDecofiles(b *testing.B) {
	e := newEnv(b, rollout.Options{Notify: notify.Config{PodTimeout: 10 * time.Minute, Timeout: 10 * time.Minute}})
	for i := range 4 {
		df := e.decofile(fmt.Sprintf("tarpit-%d", i), false)
		for j := range 3 {
			e.hangingPod(fmt.Sprintf("tarpit-%d-%d", i, j), labelled(df))
		}
		e.store(df, []byte(fmt.Sprintf(`{"tarpit":%d}`, i)), fmt.Sprintf("%040d", i+1), 1731700500, false)
	}
	df := e.decofile("shop", false)
	pods := []*sitePod{e.sitePod("shop-a", podOpts{labels: labelled(df)}), e.sitePod("shop-b", podOpts{labels: labelled(df)})}
	ts := int64(1731800000)
	b.ResetTimer()
	for b.Loop() {
		ts++
		content := []byte(fmt.Sprintf(`{"site":{"version":%d}}`, ts))
		e.store(df, content, fmt.Sprintf("%040x", ts), ts, false)
		deadline := time.Now().Add(time.Minute)
		for _, p := range pods {
			for p.rt.Current().Hash != encode.Hash(content) {
				if time.Now().After(deadline) {
					b.Fatalf("%s did not get version %d within a minute", p.pod.Name, ts)
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
}

// TestRolloutMemoryIsSharedPerNamespace: running push rollouts hold their content against
// --notify-memory-bytes, one namespace at most a third of it (or one content larger than that,
// alone). A namespace whose large Decofile hangs makes its own next rollout wait (and say so),
// not another namespace's.
func TestRolloutMemoryIsSharedPerNamespace(t *testing.T) {
	const share = 1000
	envs := newEnvs(t, 2, rollout.Options{MaxContentBytes: share, MemoryBytes: 1500,
		Notify: notify.Config{PodTimeout: time.Minute, Timeout: 2 * time.Minute}})
	a, b := envs[0], envs[1]
	big := a.decofile("big", false)
	reached := a.hangingPod("big-a", labelled(big))
	a.store(big, sized(800), strings.Repeat("1", 40), 1731900000, false)
	testenv.Eventually(t, 20*time.Second, func() error {
		if reached.Load() == 0 {
			return fmt.Errorf("the hanging pod has not been reached yet")
		}
		return nil
	})

	next := a.decofile("next", false)
	a.sitePod("next-a", podOpts{labels: labelled(next)})
	a.store(next, sized(300), strings.Repeat("2", 40), 1731900001, false)
	a.podsNotified(next, metav1.ConditionUnknown, "Waiting for rollout memory (--notify-memory-bytes) before notifying pods for commit:"+strings.Repeat("2", 40), 20*time.Second)

	other := b.decofile("other", false)
	p := b.sitePod("other-a", podOpts{labels: labelled(other)})
	content := sized(600)
	b.store(other, content, strings.Repeat("3", 40), 1731900002, false)
	b.podsNotified(other, metav1.ConditionTrue, "Successfully notified all pods", 20*time.Second)
	if p.rt.Current().Hash != encode.Hash(content) {
		t.Fatal("the other namespace's pod did not get its content")
	}
	if c := meta.FindStatusCondition(a.get(next).Status.Conditions, decov1alpha1.ConditionPodsNotified); c == nil || !strings.HasPrefix(c.Message, "Waiting for rollout memory") {
		t.Fatalf("the second rollout of the full namespace: %+v, want it still waiting", c)
	}
}
