package controller_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/shard"
	"github.com/siteops/siteops/internal/testenv"
)

// Scale of BenchmarkColdStart: Decofiles, namespaces, and the inline content of each.
// SITEOPS_SCALE_DECOFILES lowers the count (namespaces follow at one per ten Decofiles) to
// iterate on a change quickly; the goals are for the full scale. SITEOPS_SCALE_CONCURRENCY
// sets --decofile-concurrency (default: the flag's).
var (
	scaleDecofiles  = scaleFromEnv("SITEOPS_SCALE_DECOFILES", 5000)
	scaleNamespaces = max(1, scaleDecofiles/10)
)

// scaleBytes is the inline content of each Decofile; SITEOPS_SCALE_BYTES changes it to tell the
// costs that grow with the content from those that do not.
var scaleBytes = scaleFromEnv("SITEOPS_SCALE_BYTES", 50<<10)

func scaleFromEnv(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkColdStart creates 5 000 inline Decofiles of 50 KB each in 500 namespaces on the local
// API server, then starts the manager as the siteops-manager command builds it (the decofile
// part, injection off) and reports the time until every Decofile is Ready, and the manager's
// heap and resident memory at rest afterwards (goals: 60 s, 300 MiB). Heap is what the
// process holds live after a GC; RSS is the whole test process, an upper bound. It also reports
// the CPU time per Decofile of the API server with etcd and of the manager, which unlike the
// cold start hardly depend on what else the machine runs. It gives up after 10 minutes and
// reports how many were Ready by then. Then it starts a second manager, as an upgrade or a
// failover does, and reports the time until it has looked at every Decofile once (restart-s)
// and the requests it sent for that.
func BenchmarkColdStart(b *testing.B) { coldStart(b, 0) }

// BenchmarkColdStartShards is BenchmarkColdStart with the Decofiles labelled for two shards
// and two managers (one per shard, with its --watch-label-selector) started at once in this
// process against the same API server; the requests and CPU reported are both managers'.
func BenchmarkColdStartShards(b *testing.B) { coldStart(b, 2) }

// coldStart runs the cold start with one manager, or with one per shard when shards > 0.
func coldStart(b *testing.B, shards int) {
	cfg, cl := scaleClient(b)
	for i := 0; i < b.N; i++ {
		prefix := fmt.Sprintf("scale%d", i)
		if shards > 0 {
			prefix = fmt.Sprintf("shards%d", i)
		}
		created := time.Now()
		createScaleDecofiles(b, cl, prefix, shards)
		b.Logf("created %d Decofiles of %d bytes in %d namespaces in %s", scaleDecofiles, scaleBytes, scaleNamespaces, time.Since(created).Round(time.Second))
		runtime.GC()
		debug.FreeOSMemory()

		o := manager.DefaultOptions()
		o.Controllers = []string{manager.PartDecofile}
		o.MetricsAddr, o.ProbeAddr, o.LeaderElect = "0", "0", false
		o.Decofile.DisableInjection = true
		o.SecondInProcess = shards > 0
		if n := scaleFromEnv("SITEOPS_SCALE_CONCURRENCY", 0); n > 0 {
			o.Decofile.Delivery.Concurrency = n // to measure --decofile-concurrency
		}
		// The manager's requests are counted on the wire (by verb and resource) without
		// changing its setup: only the transport is wrapped.
		counted := rest.CopyConfig(cfg)
		reqs := &requestCounter{counts: map[string]int{}}
		counted.Wrap(reqs.wrap)
		var mgrs []ctrl.Manager
		for s := range max(shards, 1) {
			so := o
			if shards > 0 {
				so.WatchLabelSelector, so.ShardName = shard.ForShard(fmt.Sprintf("s%d", s)), fmt.Sprintf("s%d", s)
			}
			mgr, err := manager.New(counted, so)
			if err != nil {
				b.Fatal(err)
			}
			mgrs = append(mgrs, mgr)
		}
		watchCtx, stopWatch := context.WithCancel(context.Background())
		watch, err := watchReady(watchCtx, cfg, prefix)
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		serverCPU, selfCPU, byName := childrenCPU(), processCPU("self"), childrenCPUByName()
		var stops []func()
		for _, mgr := range mgrs {
			stops = append(stops, testenv.StartManager(b, mgr))
		}
		stopProfiles := profileColdStart(b, cfg)
		ready, firstReady := 0, time.Duration(0)
		for ready < scaleDecofiles {
			if time.Since(start) > 10*time.Minute {
				// Far past the goal: report how far it got rather than fail the other benchmarks.
				b.Logf("%d of %d Decofiles Ready after %s", ready, scaleDecofiles, time.Since(start))
				break
			}
			time.Sleep(100 * time.Millisecond)
			if ready, err = watch.count(); err != nil {
				b.Fatal(err)
			}
			if ready > 0 && firstReady == 0 {
				firstReady = time.Since(start)
			}
		}
		// Before the first, the manager's cache was filled (every Decofile read once).
		b.Logf("first Decofile Ready after %s", firstReady.Round(100*time.Millisecond))
		coldStart := time.Since(start)
		stopWatch()
		serverCPU, selfCPU = childrenCPU()-serverCPU, processCPU("self")-selfCPU
		for name, d := range childrenCPUByName() {
			b.Logf("CPU of %s during the cold start: %s (%.1f ms per Decofile)", name, d-byName[name], float64((d-byName[name]).Milliseconds())/float64(scaleDecofiles))
		}
		stopProfiles()
		b.StopTimer()

		// At rest: the queue drained (nothing changes for a few seconds), then a full GC.
		time.Sleep(10 * time.Second)
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(coldStart.Seconds(), "cold-start-s")
		b.ReportMetric(float64(ready), "ready")
		b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-live-MiB")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-inuse-MiB")
		b.ReportMetric(float64(rssBytes())/(1<<20), "rss-MiB")
		b.ReportMetric(deliveryReconciles()/float64(scaleDecofiles), "reconciles/decofile")
		// CPU time per Decofile until all were Ready: the API server and etcd, and this process
		// (the manager). Unlike cold-start-s they hardly depend on what else the machine runs.
		b.ReportMetric(float64(serverCPU.Milliseconds())/float64(scaleDecofiles), "server-cpu-ms/decofile")
		b.ReportMetric(float64(selfCPU.Milliseconds())/float64(scaleDecofiles), "manager-cpu-ms/decofile")
		total, byKind := reqs.snapshot()
		b.ReportMetric(float64(total)/float64(scaleDecofiles), "requests/decofile")
		b.Logf("API requests of the manager by verb and resource: %s", byKind)
		for _, stop := range stops {
			stop()
		}

		if shards == 0 {
			restart, restartReqs, restartByKind := restartManager(b, cfg, o)
			b.ReportMetric(restart.Seconds(), "restart-s")
			b.ReportMetric(float64(restartReqs)/float64(scaleDecofiles), "restart-requests/decofile")
			b.Logf("API requests of the restarted manager by verb and resource: %s", restartByKind)
		}
		b.StartTimer()
	}
}

// scaleClient is the scale benchmarks' admin config and client on the shared local API server,
// with no client-side rate limit, as ctrl.GetConfig gives the siteops-manager command (the API
// server's priority and fairness applies).
func scaleClient(b *testing.B) (*rest.Config, client.Client) {
	b.Helper()
	if testing.Short() {
		b.Skip("needs the local API server")
	}
	// The managers' logs would bury the figures; a Decofile not delivered fails the benchmark.
	ctrl.SetLogger(logr.Discard())
	c := testenv.APIServer(b)
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS = -1
	cl, err := client.New(cfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	return cfg, cl
}

// restartManager starts a second manager like the first, as after an upgrade or a failover,
// when every Decofile is already delivered, and returns the time until its delivery controller
// has run as many reconciles as there are Decofiles (each once: inline Decofiles are not
// requeued), with the requests it sent meanwhile.
func restartManager(b *testing.B, cfg *rest.Config, o manager.Options) (time.Duration, int, string) {
	b.Helper()
	counted := rest.CopyConfig(cfg)
	reqs := &requestCounter{counts: map[string]int{}}
	counted.Wrap(reqs.wrap)
	o.SecondInProcess = true
	mgr, err := manager.New(counted, o)
	if err != nil {
		b.Fatal(err)
	}
	before := deliveryReconciles()
	start := time.Now()
	stop := testenv.StartManager(b, mgr)
	defer stop()
	for deliveryReconciles()-before < float64(scaleDecofiles) {
		if time.Since(start) > 10*time.Minute {
			b.Logf("%.0f of %d Decofiles looked at after %s", deliveryReconciles()-before, scaleDecofiles, time.Since(start))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	total, byKind := reqs.snapshot()
	return took, total, byKind
}

// profileColdStart writes CPU profiles of the cold start when SITEOPS_SCALE_PROFILE names a
// folder: the API server's (its /debug/pprof, the first 30 s) and this process's, the manager's,
// until the returned stop is called. Read them with `go tool pprof -top <file>`.
func profileColdStart(b *testing.B, cfg *rest.Config) (stop func()) {
	dir := os.Getenv("SITEOPS_SCALE_PROFILE")
	if dir == "" {
		return func() {}
	}
	self, err := os.Create(filepath.Join(dir, "manager.pprof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(self); err != nil {
		b.Fatal(err)
	}
	server := make(chan error, 1)
	go func() {
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			server <- err
			return
		}
		resp, err := hc.Get(strings.TrimSuffix(cfg.Host, "/") + "/debug/pprof/profile?seconds=30")
		if err != nil {
			server <- err
			return
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("API server profile: HTTP %d", resp.StatusCode)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "apiserver.pprof"), raw, 0o644)
		}
		server <- err
	}()
	return func() {
		pprof.StopCPUProfile()
		_ = self.Close()
		if err := <-server; err != nil {
			b.Logf("API server profile: %v", err)
		}
	}
}

// scaleSetLabel names, on each Decofile createScaleDecofiles makes, the set (prefix) it belongs to.
const scaleSetLabel = "bench.siteops.dev/set"

// createScaleDecofiles creates the namespaces and Decofiles of BenchmarkColdStart, 16 at a time.
func createScaleDecofiles(b *testing.B, cl client.Client, prefix string, shards int) {
	b.Helper()
	ctx := context.Background()
	namespaces := make([]string, scaleNamespaces)
	for i := range namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i)}}
		if err := cl.Create(ctx, ns); err != nil {
			b.Fatalf("create namespace: %v", err)
		}
		b.Cleanup(func() { _ = cl.Delete(context.Background(), ns) })
		namespaces[i] = ns.Name
	}
	// Blocks of about 5 KB of distinct text each: ten make one Decofile.
	block := func(d, k int) string {
		var sb strings.Builder
		fmt.Fprintf(&sb, `{"__resolveType":"site/sections/Content.tsx","id":%d,"html":"`, d*100+k)
		for sb.Len() < scaleBytes/10-8 {
			fmt.Fprintf(&sb, "<p>Decofile %d block %d: lorem ipsum dolor sit amet.</p>", d, k)
		}
		sb.WriteString(`"}`)
		return sb.String()
	}
	work := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for d := range work {
				values := map[string]string{}
				for k := range 10 {
					values[fmt.Sprintf("pages-%d", k)] = block(d, k)
				}
				df := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("site-%d", d), Namespace: namespaces[d%scaleNamespaces],
					Labels: map[string]string{scaleSetLabel: prefix}},
					Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(values)}}
				if shards > 0 {
					df.Labels[shard.Key] = fmt.Sprintf("s%d", d%shards)
				}
				if err := cl.Create(ctx, df); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for d := range scaleDecofiles {
		work <- d
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatalf("create Decofiles: %v", err)
	}
}
