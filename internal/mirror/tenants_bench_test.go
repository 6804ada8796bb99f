package mirror_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

const (
	// tenantConfigMaps is how many ConfigMaps each tenant namespace holds.
	tenantConfigMaps = 10
	// tenantWindow is every GitTarget's commit window.
	tenantWindow = time.Second
	// tenantRate is the steady rate of ConfigMap updates, all tenants together, per second
	// (SITEOPS_MIRROR_RATE changes it).
	tenantRate = 100
	// tenantSetupWorkers create the tenants' objects concurrently.
	tenantSetupWorkers = 16
	// tenantSettle is waited, once the mirror's controllers are idle, before measuring at rest.
	tenantSettle = time.Second
)

// BenchmarkMirrorTenants shows what the cluster→git mirror costs as tenants grow. Each tenant is
// a namespace with its own GitProvider and GitTarget (its own repository on one local git remote
// over HTTP, so one git writer per tenant) with a 1s commit window, a WatchRule on ConfigMaps to
// that target and 10 ConfigMaps. Every sub-benchmark starts its own API server, git remote,
// Redis and manager, so no run sees another's objects.
//
// namespaces=10 and namespaces=N (N is 1000, or SITEOPS_MIRROR_NAMESPACES) set the tenants up,
// wait until every tenant's last ConfigMap was pushed and the mirror's controllers have no work
// left, and then measure at rest: the heap in use after a GC (heap-MiB, the whole test process's,
// the in-process git remote's included; per-target-KiB is its growth since before the manager
// started, per tenant), the goroutines the manager added (those serving the in-process git
// remote left out) and the ConfigMap watches open on the API server, from its own /metrics
// (apiserver_longrunning_requests for WATCH on configmaps: configmap-watches in all,
// mirror-configmap-watches since before the manager started). Then, for 30s (or
// SITEOPS_MIRROR_SECONDS), ConfigMap updates are issued at a steady 100 per second (or
// SITEOPS_MIRROR_RATE), spread uniformly at random over every tenant's ConfigMaps, and each
// update's latency runs from its response to the push holding its resourceVersion: p50-ms,
// p99-ms, max-ms, the update rate held (changes/s) and the commit window (window-ms); where the
// time went is the CPU spent per change meanwhile by the API server (apiserver-cpu-ms/change),
// this process (process-cpu-ms/change: the manager, the clients and the git remote's HTTP side)
// and the git remote's git processes (git-cpu-ms/change). The sub-benchmarks run in the order
// namespaces=10, targets-only=10, targets-only=N, namespaces=N.
//
// targets-only=10 and targets-only=N set up the same GitProviders and GitTargets without
// WatchRules or ConfigMaps and measure the heap at rest once every target is Ready and its
// writer has opened its repository: the writers' own state, which grows with the targets
// whatever the watch side does.
//
// SITEOPS_MIRROR_PROFILE, a directory, makes each sub-benchmark write its heap profiles there,
// before the manager starts and at rest (<sub-benchmark>.before.heap, .rest.heap), to find what
// a tenant costs.
//
// The goals it shows progress against (logged, not enforced):
//   - one watch per resource type for the whole mirror, whatever the number of tenants;
//   - heap(namespaces=N) ≤ 1.5 × heap(namespaces=10) + (heap(targets-only=N) −
//     heap(targets-only=10)), i.e. the watch side's memory does not grow with the tenants;
//   - p99 update→push ≤ the commit window + 1s at 100 changes/s.
//
// Each sub-benchmark measures once, whatever b.N: b.N is not used, and when the testing package
// calls a sub-benchmark again with a larger b.N it reports the figures of its one measurement
// again. ns/op and the -benchmem figures cover a whole sub-benchmark, setup included, and are
// not results.
func BenchmarkMirrorTenants(b *testing.B) {
	large := tenantEnvInt(b, "SITEOPS_MIRROR_NAMESPACES", 1000)
	if os.Getenv("SITEOPS_MIRROR_PROFILE") != "" {
		runtime.MemProfileRate = 4096 // fine enough to tell a tenant's few KiB apart
	}
	load := tenantLoad{steady: tenantEnvSeconds(b, "SITEOPS_MIRROR_SECONDS", 30*time.Second), rate: tenantEnvInt(b, "SITEOPS_MIRROR_RATE", tenantRate)}
	runs := map[string]*tenantRun{}
	for _, sc := range []struct {
		kind string
		n    int
	}{{"namespaces", 10}, {"targets-only", 10}, {"targets-only", large}, {"namespaces", large}} {
		// namespaces=N last: the runtime keeps the descriptors of every goroutine a run started
		// (its 5 000 streams' and writers' included), so a run after it would carry them.
		name := fmt.Sprintf("%s=%d", sc.kind, sc.n)
		b.Run(name, func(b *testing.B) {
			if r := runs[name]; r != nil {
				for _, f := range r.figures {
					b.ReportMetric(f.value, f.unit)
				}
				return
			}
			runs[name] = measureTenants(b, sc.n, sc.kind == "namespaces", load)
			// The parent's own log is shown with -v only: the last of the four logs it.
			logTenantMemoryGoal(b, runs, large)
		})
	}
}

// tenantFigure is one reported metric, kept so that a sub-benchmark called again reports it again.
type tenantFigure struct {
	value float64
	unit  string
}

// tenantRun is what one sub-benchmark measured, for the comparison across sub-benchmarks.
type tenantRun struct {
	// heapMiB is the heap in use at rest.
	heapMiB float64
	figures []tenantFigure
}

// report reports a metric and keeps it for a repeated call of the sub-benchmark.
func (r *tenantRun) report(b *testing.B, value float64, unit string) {
	r.figures = append(r.figures, tenantFigure{value, unit})
	b.ReportMetric(value, unit)
}

// measureTenants sets n tenants up on fresh servers, with ConfigMaps and WatchRules when cms,
// measures them at rest and, when cms, under the steady load of updates.
func measureTenants(b *testing.B, n int, cms bool, load tenantLoad) *tenantRun {
	began := time.Now()
	ctx := context.Background()
	c := testenv.NewAPIServer(b, servers.APIServerOptions{})
	remote := testenv.GitRemote(b, servers.GitRemoteOptions{Username: "mirror", Password: "pw"})
	rds := testenv.Redis(b, servers.RedisOptions{})
	// One client without client-side rate limits, so the API server is the limit.
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = -1, 0
	kc, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		b.Fatal(err)
	}
	pushes := newTenantPushes(n, cms)
	watchesBefore := configMapWatches(b, c)
	busyBefore := mirrorControllersBusy()
	heapBefore := heapInUseMiB()
	writeTenantHeapProfile(b, "before")
	goroutinesBefore := goroutinesOutsideRemote()
	e, stop := runManagerWith(b, c, mirror.Options{RedisAddr: rds.Addr, RedisKeyPrefix: "tenants"}, "", func(e *engine.Engine) {
		setEgress := e.WriterHook
		e.WriterHook = func(cfg *gitwriter.Config) { setEgress(cfg); cfg.OnPushed = pushes.observe }
	})
	defer stop()

	setup := time.Now()
	if err := createTenants(ctx, kc, remote, n, cms); err != nil {
		b.Fatal(err)
	}
	created := time.Since(setup)
	if cms {
		if missing := pushes.waitSetup(tenantSetupBound(n)); len(missing) > 0 {
			b.Fatalf("the last ConfigMap of %d of %d tenants was not seen pushed within %s: %s", len(missing), n, tenantSetupBound(n),
				describeTenants(kc, remote, missing[:min(len(missing), 5)]))
		}
		for _, i := range []int{0, n - 1} {
			f := &fixture{bare: remote.RepoDir(tenantNamespace(i))}
			if path := tenantFile(i, tenantConfigMaps-1); !strings.Contains(f.file(path), `v: "0"`) {
				b.Fatalf("the push of %s was observed but it is not on main", path)
			}
		}
	} else {
		waitTenantTargetsReady(b, kc, n, tenantSetupBound(n))
		openTenantWriters(b, e, n)
	}
	reached := time.Since(setup)
	idle := waitMirrorControllersIdle(b, busyBefore, tenantSetupBound(n))
	time.Sleep(tenantSettle)
	r := &tenantRun{heapMiB: heapInUseMiB()}
	writeTenantHeapProfile(b, "rest")
	goroutines := goroutinesOutsideRemote() - goroutinesBefore
	watches := configMapWatches(b, c)
	r.report(b, r.heapMiB, "heap-MiB")
	r.report(b, (r.heapMiB-heapBefore)*1024/float64(n), "per-target-KiB")
	r.report(b, float64(goroutines), "goroutines")
	r.report(b, watches.longrunning, "configmap-watches")
	r.report(b, watches.longrunning-watchesBefore.longrunning, "mirror-configmap-watches")
	what := "every target Ready with its repository open"
	if cms {
		what = "every ConfigMap pushed"
	}
	// Benchmarks show 10 lines of log each: these take at most 9.
	b.Logf("%d tenants: objects created in %s, %s after %s, the mirror's controllers idle %s later; at rest the heap in use is %.1f MiB (%.1f MiB before the manager started) and the manager added %d goroutines",
		n, created.Round(time.Millisecond), what, reached.Round(time.Millisecond), idle.Round(time.Millisecond), r.heapMiB, heapBefore, goroutines)
	b.Logf("ConfigMap watches before the manager started: %s", strings.Join(watchesBefore.lines, "; "))
	b.Logf("ConfigMap watches at rest (goal: one per resource type for the whole mirror):\n\t%s", strings.Join(watches.lines, "\n\t"))

	after := ""
	if cms {
		measureTenantUpdates(b, c, kc, pushes, n, load, r)
		idle := waitMirrorControllersIdle(b, busyBefore, 2*time.Minute)
		after = fmt.Sprintf("; after the updates the mirror's controllers were idle in %s, then ConfigMap watches: %s",
			idle.Round(time.Millisecond), strings.Join(configMapWatches(b, c).lines, "; "))
	}
	b.Logf("sub-benchmark took %s%s", time.Since(began).Round(time.Second), after)
	return r
}

// tenantLoad is the steady part of BenchmarkMirrorTenants: updates per second, for how long.
type tenantLoad struct {
	steady time.Duration
	rate   int
}

// measureTenantUpdates issues updates at the load's rate for its steady duration, waits until
// every one was pushed and reports their latencies; the issuer only paces, so a slow update
// response does not lower the rate.
func measureTenantUpdates(b *testing.B, c *testenv.Cluster, kc client.Client, pushes *tenantPushes, n int, load tenantLoad, r *tenantRun) {
	type update struct {
		k, seq int
		due    time.Time
	}
	total := max(1, int(load.steady.Seconds()*float64(load.rate)))
	interval := time.Second / time.Duration(load.rate)
	jobs := make(chan update, total)
	var wg sync.WaitGroup
	pushes.startRecording()
	cpuBefore := readCPU(b, c)
	start := time.Now()
	// A second's worth of issuers, so that slow responses do not lower the rate until the API
	// server itself falls a second behind.
	for range load.rate {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range jobs {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNamespace(u.k / tenantConfigMaps), Name: tenantConfigMap(u.k % tenantConfigMaps)}}
				// A merge patch names no resourceVersion, so updates of one ConfigMap never
				// conflict; each sets a new value, so each makes a new resourceVersion.
				patch := fmt.Appendf(nil, `{"data":{"v":"%d"}}`, u.seq)
				err := kc.Patch(context.Background(), cm, client.RawPatch(types.MergePatchType, patch))
				pushes.updated(cm.ResourceVersion, u.due, time.Now(), err)
			}
		}()
	}
	for i := range total {
		due := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(due))
		jobs <- update{k: rand.IntN(n * tenantConfigMaps), seq: i + 1, due: due}
	}
	close(jobs)
	wg.Wait()
	pushes.waitAll(b, 2*time.Minute)
	cpu := readCPU(b, c)

	lat, responses, last, lastPush, count := pushes.latencies()
	slices.Sort(lat)
	slices.Sort(responses)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	p99 := lat[len(lat)*99/100]
	r.report(b, ms(lat[len(lat)/2]), "p50-ms")
	r.report(b, ms(p99), "p99-ms")
	r.report(b, ms(lat[len(lat)-1]), "max-ms")
	r.report(b, float64(len(lat))/last.Sub(start).Seconds(), "changes/s")
	r.report(b, ms(tenantWindow), "window-ms")
	perChange := func(after, before float64) float64 { return (after - before) * 1000 / float64(len(lat)) }
	r.report(b, perChange(cpu.apiServer, cpuBefore.apiServer), "apiserver-cpu-ms/change")
	r.report(b, perChange(cpu.self, cpuBefore.self), "process-cpu-ms/change")
	r.report(b, perChange(cpu.gitChildren, cpuBefore.gitChildren), "git-cpu-ms/change")
	b.Logf("%d updates (%d/s asked) answered in %s (from when due: p50 %.0f ms, p99 %.0f ms), all pushed %s after the first, in %d pushes; p99 update→push %.0f ms against the goal of %.0f ms (window + 1s): %t; heap in use afterwards %.1f MiB",
		len(lat), load.rate, last.Sub(start).Round(time.Millisecond), ms(responses[len(responses)/2]), ms(responses[len(responses)*99/100]),
		lastPush.Sub(start).Round(time.Millisecond), count, ms(p99), ms(tenantWindow+time.Second), p99 <= tenantWindow+time.Second, heapInUseMiB())
}

// tenantPushes follows every writer's pushes: during setup, which tenants' last ConfigMap
// reached git; while recording, when each resourceVersion was pushed, matched against the
// update responses, so the wait ends when the last update is in git.
type tenantPushes struct {
	mu      sync.Mutex
	tenants int
	// landed holds the tenants whose last ConfigMap was pushed, until all did (then nil).
	landed    map[string]bool
	setupDone chan struct{}

	recording  bool
	updatedAt  map[string]time.Time // resourceVersion → update response
	responses  []time.Duration      // each update's response time, from when it was due
	pushedAt   map[string]time.Time // resourceVersion → push
	matched    int
	want       int
	done       chan struct{}
	closed     bool
	pushes     int
	failures   int
	firstError error
}

// newTenantPushes returns a recorder for n tenants, following their setup pushes when cms.
func newTenantPushes(n int, cms bool) *tenantPushes {
	p := &tenantPushes{tenants: n, setupDone: make(chan struct{}), done: make(chan struct{}), want: -1}
	if cms {
		p.landed = make(map[string]bool, n)
	}
	return p
}

// observe is every writer's OnPushed hook.
func (p *tenantPushes) observe(ps []gitwriter.Pushed) {
	last := tenantFileInNamespace(tenantConfigMaps - 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.recording && len(ps) > 0 {
		p.pushes++
	}
	for _, x := range ps {
		if p.landed != nil && strings.HasSuffix(x.Path, last) {
			ns, _, _ := strings.Cut(x.Path, "/")
			p.landed[ns] = true
			if len(p.landed) == p.tenants {
				p.landed = nil
				close(p.setupDone)
			}
		}
		if !p.recording || x.Cursor.RV == "" {
			continue
		}
		if _, seen := p.pushedAt[x.Cursor.RV]; seen {
			continue
		}
		p.pushedAt[x.Cursor.RV] = x.PushedAt
		if _, ok := p.updatedAt[x.Cursor.RV]; ok {
			p.matched++
		}
	}
	p.check()
}

// waitSetup waits until every tenant's last ConfigMap was pushed, at most bound, and returns
// the tenants (namespaces) whose last ConfigMap was not.
func (p *tenantPushes) waitSetup(bound time.Duration) []string {
	select {
	case <-p.setupDone:
		return nil
	case <-time.After(bound):
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var missing []string
	for i := range p.tenants {
		if ns := tenantNamespace(i); p.landed != nil && !p.landed[ns] {
			missing = append(missing, ns)
		}
	}
	return missing
}

// describeTenants says, for a failure message, whether each tenant's last ConfigMap is on main
// after all and what its GitTarget reports.
func describeTenants(kc client.Client, remote *servers.GitRemote, namespaces []string) string {
	var out []string
	for _, ns := range namespaces {
		f := &fixture{bare: remote.RepoDir(ns)}
		onMain := f.file(ns+tenantFileInNamespace(tenantConfigMaps-1)) != ""
		var gt mirrorv1alpha1.GitTarget
		status := "GitTarget unreadable"
		if err := kc.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "target"}, &gt); err == nil {
			c := meta.FindStatusCondition(gt.Status.Conditions, mirrorv1alpha1.ConditionReady)
			status = fmt.Sprintf("GitTarget Ready %+v, %d watched streams, %d pending writes, %d commits", c, gt.Status.WatchedStreams, gt.Status.PendingWrites, f.commits())
		}
		out = append(out, fmt.Sprintf("%s (its last ConfigMap on main: %t; %s)", ns, onMain, status))
	}
	return strings.Join(out, "; ")
}

// startRecording starts matching update responses with pushes.
func (p *tenantPushes) startRecording() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.recording = true
	p.updatedAt, p.pushedAt = map[string]time.Time{}, map[string]time.Time{}
}

// updated records an update's response (or its failure) and how long after due it came.
func (p *tenantPushes) updated(rv string, due, at time.Time, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.failures++
		if p.firstError == nil {
			p.firstError = err
		}
		return
	}
	p.updatedAt[rv] = at
	p.responses = append(p.responses, at.Sub(due))
	if _, ok := p.pushedAt[rv]; ok {
		p.matched++
	}
	p.check()
}

// check ends the wait once every update awaited was pushed. p.mu is held.
func (p *tenantPushes) check() {
	if p.want >= 0 && p.matched >= p.want && !p.closed {
		p.closed = true
		close(p.done)
	}
}

// waitAll waits until every recorded update was pushed, failing after bound.
func (p *tenantPushes) waitAll(b *testing.B, bound time.Duration) {
	p.mu.Lock()
	if p.failures > 0 {
		p.mu.Unlock()
		b.Fatalf("%d updates failed, the first with: %v", p.failures, p.firstError)
	}
	p.want = len(p.updatedAt)
	p.check()
	p.mu.Unlock()
	select {
	case <-p.done:
	case <-time.After(bound):
		p.mu.Lock()
		defer p.mu.Unlock()
		b.Fatalf("only %d of %d updates reached git within %s of the last one (%d pushes seen)", p.matched, p.want, bound, p.pushes)
	}
}

// latencies returns each update's latency to its push, the update response times, the last
// update response, the last push and how many pushes there were.
func (p *tenantPushes) latencies() (lat, responses []time.Duration, lastUpdate, lastPush time.Time, pushes int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for rv, at := range p.updatedAt {
		pushed := p.pushedAt[rv]
		lat = append(lat, pushed.Sub(at))
		if at.After(lastUpdate) {
			lastUpdate = at
		}
		if pushed.After(lastPush) {
			lastPush = pushed
		}
	}
	return lat, slices.Clone(p.responses), lastUpdate, lastPush, p.pushes
}

// logTenantMemoryGoal logs the memory goal's inequality with the figures of the four
// sub-benchmarks, when all four ran.
func logTenantMemoryGoal(b *testing.B, runs map[string]*tenantRun, large int) {
	ns10, nsN := runs["namespaces=10"], runs[fmt.Sprintf("namespaces=%d", large)]
	t10, tN := runs["targets-only=10"], runs[fmt.Sprintf("targets-only=%d", large)]
	if ns10 == nil || nsN == nil || t10 == nil || tN == nil {
		return
	}
	// The heap at rest, not its growth since the sub-benchmark started: the runtime keeps every
	// goroutine's descriptor for reuse, so what a sub-benchmark's goroutines take shows in the
	// heap of the next one before it starts, and its growth hides it.
	bound := 1.5*ns10.heapMiB + (tN.heapMiB - t10.heapMiB)
	b.Logf("memory goal, heap in use at rest: namespaces=%d %.1f MiB <= 1.5 × namespaces=10 %.1f MiB + (targets-only=%d %.1f MiB - targets-only=10 %.1f MiB) = %.1f MiB: %t",
		large, nsN.heapMiB, ns10.heapMiB, large, tN.heapMiB, t10.heapMiB, bound, nsN.heapMiB <= bound)
}

// tenantSetupBound bounds the setup of n tenants, generously for 2 cores.
func tenantSetupBound(n int) time.Duration {
	return 2*time.Minute + time.Duration(n)*150*time.Millisecond
}

// tenantNamespace names tenant i's namespace, which also names its repository.
func tenantNamespace(i int) string { return fmt.Sprintf("tenant-%04d", i) }

// tenantConfigMap names a tenant's ConfigMap j.
func tenantConfigMap(j int) string { return fmt.Sprintf("cm-%02d", j) }

// tenantFile is where tenant i's ConfigMap j is mirrored in the tenant's repository.
func tenantFile(i, j int) string { return tenantNamespace(i) + tenantFileInNamespace(j) }

// tenantFileInNamespace is tenantFile after the namespace, the same for every tenant.
func tenantFileInNamespace(j int) string { return "/core/configmaps/" + tenantConfigMap(j) + ".yaml" }

// tenantEnvInt reads a positive count from the environment, so a run can be made smaller.
func tenantEnvInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		b.Fatalf("%s=%q: want a positive whole number", name, s)
	}
	return v
}

// writeTenantHeapProfile writes the heap profile to SITEOPS_MIRROR_PROFILE/<sub-benchmark>.<when>.heap
// when that directory is set, so two heaps can be compared (go tool pprof -base).
func writeTenantHeapProfile(b *testing.B, when string) {
	dir := os.Getenv("SITEOPS_MIRROR_PROFILE")
	if dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(dir, strings.ReplaceAll(b.Name(), "/", "_")+"."+when+".heap"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// tenantEnvSeconds reads a positive number of seconds from the environment, so a run can be
// made shorter.
func tenantEnvSeconds(b *testing.B, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		b.Fatalf("%s=%q: want a positive number of seconds", name, s)
	}
	return time.Duration(v * float64(time.Second))
}
