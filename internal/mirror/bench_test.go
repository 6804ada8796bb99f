package mirror_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// BenchmarkMirrorSustainedConfigMapChanges streams ConfigMap updates through the real API server
// into a real git remote over HTTP, with a 1s commit window, and reports the sustained rate
// (changes/s, from the first update to the push of the last), the latency from each update's
// response to the push holding it (p50, p99), and the heap in use. Each run makes at least
// 2000 changes (or b.N, if larger) over 200 ConfigMaps from 16 concurrent clients.
func BenchmarkMirrorSustainedConfigMapChanges(b *testing.B) {
	const (
		objects = 200
		workers = 16
		window  = time.Second
	)
	changes := max(b.N, 2000)
	b.StopTimer()
	c := testenv.APIServer(b)
	srv := testenv.Redis(b, servers.RedisOptions{})
	f := newFixture(b, c)
	ctx := context.Background()

	// One client without client-side rate limits, so the API server is the limit.
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = -1, 0
	kc, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		b.Fatal(err)
	}

	var (
		mu      sync.Mutex
		updated = map[string]time.Time{} // resourceVersion → update response time
		pushed  = map[string]time.Time{}
		done    = make(chan struct{})
		want    atomic.Int64
	)
	want.Store(-1)
	observe := func(ps []gitwriter.Pushed) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range ps {
			if p.Cursor.RV != "" {
				pushed[p.Cursor.RV] = p.PushedAt
			}
		}
		if w := want.Load(); w >= 0 && countPushed(updated, pushed) >= int(w) {
			select {
			case <-done:
			default:
				close(done)
			}
		}
	}
	_, stop := runManagerWith(b, c, mirror.Options{RedisAddr: srv.Addr, RedisKeyPrefix: "bench"}, "", func(e *engine.Engine) {
		setEgress := e.WriterHook
		e.WriterHook = func(cfg *gitwriter.Config) { setEgress(cfg); cfg.OnPushed = observe }
	})
	defer stop()
	f.target(b, "bench", "", window, "")
	f.watchRule(b, "cms", "bench", cmRule())
	cms := make([]*corev1.ConfigMap, objects)
	for i := range cms {
		cms[i] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i), Namespace: f.ns}, Data: map[string]string{"v": "0"}}
		if err := kc.Create(ctx, cms[i]); err != nil {
			b.Fatal(err)
		}
	}
	f.waitFile(b, fmt.Sprintf("%s/core/configmaps/cm-%03d.yaml", f.ns, objects-1), `v: "0"`)
	runtime.GC()

	b.StartTimer()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each worker owns a slice of the objects, so updates never conflict.
			mine := cms[w*objects/workers : (w+1)*objects/workers]
			for i := 0; ; i++ {
				n := next.Add(1)
				if n > int64(changes) {
					return
				}
				cm := mine[i%len(mine)]
				cm.Data["v"] = fmt.Sprint(n)
				if err := kc.Update(ctx, cm); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				updated[cm.ResourceVersion] = time.Now()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	issued := time.Since(start)
	mu.Lock()
	want.Store(int64(changes))
	if countPushed(updated, pushed) >= changes {
		close(done)
	}
	mu.Unlock()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		mu.Lock()
		n := countPushed(updated, pushed)
		mu.Unlock()
		b.Fatalf("only %d of %d changes pushed after 2 minutes", n, changes)
	}
	b.StopTimer()

	mu.Lock()
	defer mu.Unlock()
	var lat []time.Duration
	var last time.Time
	for rv, at := range updated {
		p := pushed[rv]
		lat = append(lat, p.Sub(at))
		if p.After(last) {
			last = p
		}
	}
	slices.Sort(lat)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	elapsed := last.Sub(start)
	b.ReportMetric(float64(changes)/elapsed.Seconds(), "changes/s")
	b.ReportMetric(float64(changes)/issued.Seconds(), "updates/s")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	b.Logf("%d changes in %s (updates issued in %s), commits: %s", changes, elapsed.Round(time.Millisecond), issued.Round(time.Millisecond), f.git(b, "rev-list", "--count", "main"))
}

func countPushed(updated, pushed map[string]time.Time) int {
	n := 0
	for rv := range updated {
		if _, ok := pushed[rv]; ok {
			n++
		}
	}
	return n
}
