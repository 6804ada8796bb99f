package mirror_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/attribution"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/verify"
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

// BenchmarkMirrorAttributedChanges runs the whole mirror with author attribution: a real API
// server posts its audit webhook over mTLS to the manager's receiver and also writes its audit
// log to a file; 5 users update 40 ConfigMaps at about 200 changes/s (at least 1000 changes, or
// b.N) and each then deletes one of its ConfigMaps. It reports the rate, the latency from each
// watch event to the push holding it (p50, p99), the Redis commands per change (from the
// server's INFO commandstats: fact writes, announcements, lookups) and the result of replaying
// the audit log against the pushed history (siteops mirror verify): the share of changes whose
// commit names the user the log names, and the mismatches, which fail the benchmark.
func BenchmarkMirrorAttributedChanges(b *testing.B) {
	const (
		perUser = 8
		rate    = 200
	)
	users := []string{"u1", "u2", "u3", "u4", "u5"}
	changes := max(b.N, 1000)
	b.StopTimer()
	rcv := newAuditReceiver(b, "prod")
	auditLog := filepath.Join(b.TempDir(), "audit.log")
	c := testenv.NewAPIServer(b, servers.APIServerOptions{Configure: rcv.webhook.Configure, AuditLogPath: auditLog})
	rds := testenv.Redis(b, servers.RedisOptions{})
	f := newFixture(b, c)
	var (
		mu      sync.Mutex
		latency []time.Duration
		last    time.Time
	)
	_, stop := runManagerWith(b, c, mirror.Options{RedisAddr: rds.Addr, RedisKeyPrefix: "bench", Attribution: rcv.options(attribution.DefaultGrace)}, "", func(e *engine.Engine) {
		setEgress := e.WriterHook
		e.WriterHook = func(cfg *gitwriter.Config) {
			setEgress(cfg)
			cfg.OnPushed = func(ps []gitwriter.Pushed) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range ps {
					if !p.Received.IsZero() {
						latency = append(latency, p.PushedAt.Sub(p.Received))
					}
					last = p.PushedAt
				}
			}
		}
	})
	defer stop()
	f.target(b, "bench", "clusters/prod", time.Second, "")
	f.watchRule(b, "cms", "bench", cmRule())
	base := "clusters/prod/" + f.ns + "/core/configmaps/"
	ctx := context.Background()
	clients := make([]client.Client, len(users))
	for i, u := range users {
		cfg := c.UserConfig(b, u, "system:masters")
		cfg.QPS, cfg.Burst = -1, 0
		var err error
		if clients[i], err = client.New(cfg, client.Options{Scheme: scheme.New()}); err != nil {
			b.Fatal(err)
		}
		for j := range perUser {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", u, j), Namespace: f.ns}, Data: map[string]string{"v": "0"}}
			if err := clients[i].Create(ctx, cm); err != nil {
				b.Fatal(err)
			}
		}
	}
	f.waitFile(b, base+fmt.Sprintf("%s-%d.yaml", users[len(users)-1], perUser-1), `v: "0"`)
	before := testenv.RedisCommands(b, rds.Addr)
	mu.Lock()
	latency = nil
	mu.Unlock()

	b.StartTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per := changes / len(users)
	for i, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second * time.Duration(len(users)) / rate)
			defer tick.Stop()
			for k := range per {
				<-tick.C
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", u, k%perUser), Namespace: f.ns}}
				patch := fmt.Appendf(nil, `{"data":{"v":"%d"}}`, k+1)
				if err := clients[i].Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch)); err != nil {
					b.Error(err)
					return
				}
			}
			gone := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: u + "-0", Namespace: f.ns}}
			if err := clients[i].Delete(ctx, gone); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, u := range users {
		f.waitNoFile(b, base+u+"-0.yaml")
		for j := 1; j < perUser; j++ {
			// The user's last patch of ConfigMap j was its largest k with k%perUser == j.
			k := (per-1-j)/perUser*perUser + j
			f.waitFile(b, base+fmt.Sprintf("%s-%d.yaml", u, j), fmt.Sprintf(`v: "%d"`, k+1))
		}
	}
	b.StopTimer()
	made := per*len(users) + len(users)
	after := testenv.RedisCommands(b, rds.Addr)

	fh, err := os.Open(auditLog)
	if err != nil {
		b.Fatal(err)
	}
	defer fh.Close()
	log, err := verify.ReadAuditLog(fh, start)
	if err != nil {
		b.Fatal(err)
	}
	repo, err := verify.OpenRepository(f.bare)
	if err != nil {
		b.Fatal(err)
	}
	rep, err := verify.Verify(repo, log, verify.Options{Since: start, Ref: "main", Identity: attribution.Identity{}})
	if err != nil {
		b.Fatal(err)
	}
	var out strings.Builder
	_ = rep.Print(&out)
	b.Log("audit log replayed against the history:\n" + out.String())
	if len(rep.Mismatches) > 0 {
		b.Errorf("%d changes name another author than the audit log", len(rep.Mismatches))
	}
	correct := 0
	for _, s := range rep.Classes {
		correct += s.Correct
	}

	mu.Lock()
	defer mu.Unlock()
	slices.Sort(latency)
	elapsed := last.Sub(start)
	cmds := 0
	for name, n := range after {
		cmds += int(n - before[name])
	}
	b.ReportMetric(float64(made)/elapsed.Seconds(), "changes/s")
	if len(latency) > 0 {
		b.ReportMetric(float64(latency[len(latency)/2].Milliseconds()), "p50-ms")
		b.ReportMetric(float64(latency[len(latency)*99/100].Milliseconds()), "p99-ms")
	}
	b.ReportMetric(float64(cmds)/float64(made), "redis-cmds/change")
	b.ReportMetric(100*float64(correct)/float64(max(1, rep.Changes-rep.Unverifiable)), "%verified")
	b.Logf("%d changes in %s, %d commits checked, redis commands by name: %v", made, elapsed.Round(time.Millisecond), rep.Commits, servers.CommandsSince(before, after))
}
