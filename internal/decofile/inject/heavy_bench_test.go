package inject_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode/sample"
	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/internal/testenv/peakmem"
)

// Scale of BenchmarkAdmissionBesideHeavyTenant: the heavy tenant's inline Decofiles and the
// size of each one's content. SITEOPS_INJECT_HEAVY_DECOFILES and SITEOPS_INJECT_HEAVY_BYTES
// lower them to iterate quickly; the goals are for the full scale.
var (
	heavyDecofiles = envInt("SITEOPS_INJECT_HEAVY_DECOFILES", 300)
	// heavyBytes is the inline content of each: 1.5 MiB less what etcd needs besides the
	// content, so the object fits etcd's request limit (--max-request-bytes, 1.5 MiB).
	heavyBytes = envInt("SITEOPS_INJECT_HEAVY_BYTES", 3<<19-32<<10)
)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkAdmissionBesideHeavyTenant: a tenant holds 300 inline Decofiles of 1.5 MiB and, as
// itself, re-applies two workloads asking for injection by deploymentId in a loop — one whose
// Decofile exists (with a 1 MiB ConfigMap of its own making under the Decofile's ConfigMap name)
// and one whose deploymentId no Decofile has. Meanwhile another tenant re-applies its own
// workload; one op is one such admission (a merge patch through the API server and the
// webhook), timed from the client. It reports the growth of this process's heap (the webhook
// server and its manager run in it) over the run, peak and left after a GC, and the other
// tenant's admission latency, and that latency before the heavy tenant started (what the machine
// gives alone); goals: heap growth ≤ 64 MiB, other tenant's p99 ≤ 100 ms. Run it with a fixed
// count for stable percentiles, e.g. -benchtime 200x.
func BenchmarkAdmissionBesideHeavyTenant(b *testing.B) {
	c := cluster(b)
	ctx := context.Background()

	heavy := c.Tenant(b, "heavy", nil)
	// Its workloads first: with the Decofiles there, creating them may already time out.
	heavyFound := benchWorkload(b, heavy, "found", heavyName(0))
	heavyGhost := benchWorkload(b, heavy, "ghost", "no-such-deployment-id")
	createHeavyDecofiles(b, heavy)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: (&decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: heavyName(0)}}).ConfigMapName(), Namespace: heavy.Namespace},
		Data:       map[string]string{decov1.KeyJSON: strings.Repeat("x", 1<<20-4<<10)},
	}
	if err := heavy.Client.Create(ctx, cm); err != nil {
		b.Fatalf("heavy tenant: create ConfigMap: %v", err)
	}

	other := c.Tenant(b, "other", nil)
	d := &decov1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: other.Namespace},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, DeploymentID: "shop",
			Inline: &decov1.InlineSource{Value: map[string]apiextensionsv1.JSON{"home": {Raw: []byte(`{"title":"Home"}`)}}}},
	}
	if err := other.Client.Create(ctx, d); err != nil {
		b.Fatal(err)
	}
	// The delivery controller's part, which this package's tests do not run: status and Secret.
	d.Status.Format = decov1.FormatJSON
	if err := c.Client.Status().Update(ctx, d); err != nil {
		b.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: d.ReloadSecretName(), Namespace: other.Namespace},
		StringData: map[string]string{decov1.ReloadTokenKey: "s3cr3t"}}
	if err := c.Client.Create(ctx, sec); err != nil {
		b.Fatal(err)
	}
	quiet := benchWorkload(b, other, "site", "shop")
	if err := reapply(ctx, other.Client, quiet, 0); err != nil {
		b.Fatalf("other tenant's first admission: %v", err)
	}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(quiet), quiet); err != nil || quiet.GetLabels()[decov1.LabelDecofile] != "shop" {
		b.Fatalf("other tenant's workload not injected (%v): labels %v", err, quiet.GetLabels())
	}

	// The other tenant alone first: what this machine gives without the heavy tenant.
	var alone []time.Duration
	for i := range 50 {
		t0 := time.Now()
		if err := reapply(ctx, other.Client, quiet, -i); err != nil {
			b.Fatalf("other tenant alone: %v", err)
		}
		alone = append(alone, time.Since(t0))
	}

	var base runtime.MemStats
	sampler := peakmem.Start() // collects first
	runtime.ReadMemStats(&base)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var heavyOK, heavyFailed atomic.Int64
	started := make(chan struct{}, 2)
	for _, w := range []client.Object{heavyFound, heavyGhost} {
		wg.Go(func() {
			for i := 1; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := reapply(ctx, heavy.Client, w, i); err != nil {
					heavyFailed.Add(1)
				} else {
					heavyOK.Add(1)
				}
				if i == 1 {
					started <- struct{}{}
				}
			}
		})
	}
	<-started
	<-started

	var latencies []time.Duration
	failed := 0
	i := 0
	for b.Loop() {
		i++
		t0 := time.Now()
		err := reapply(ctx, other.Client, quiet, i)
		latencies = append(latencies, time.Since(t0))
		if err != nil {
			failed++
			if failed == 1 {
				b.Logf("other tenant's admission failed: %v", err)
			}
		}
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	peak := sampler.Stop()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	pct := func(ds []time.Duration, p int) float64 {
		slices.Sort(ds)
		return float64(ds[(len(ds)*p+99)/100-1].Microseconds()) / 1000
	}
	retained := int64(after.HeapAlloc) - int64(base.HeapAlloc)
	b.ReportMetric(peakmem.MiB(peak.HeapGrowth()), "heap-growth-MiB")
	b.ReportMetric(float64(retained)/(1<<20), "heap-retained-MiB")
	b.ReportMetric(peakmem.MiB(peak.RSS), "peak-rss-MiB")
	b.ReportMetric(pct(latencies, 50), "other-p50-ms")
	b.ReportMetric(pct(latencies, 99), "other-p99-ms")
	b.ReportMetric(pct(alone, 99), "alone-p99-ms")
	b.ReportMetric(float64(failed), "other-failed")
	b.ReportMetric(float64(heavyOK.Load()), "heavy-admitted")
	b.ReportMetric(float64(heavyFailed.Load()), "heavy-failed")
	fmt.Fprintf(b.Output(), "%d Decofiles of %.2f MiB: heap +%.0f MiB peak, %+.0f MiB after GC; other tenant p50 %.1f ms, p99 %.1f ms over %d admissions (%d failed; alone p50 %.1f ms, p99 %.1f ms); heavy tenant %d admitted, %d failed\n",
		heavyDecofiles, float64(heavyBytes)/(1<<20), peakmem.MiB(peak.HeapGrowth()), float64(retained)/(1<<20),
		pct(latencies, 50), pct(latencies, 99), len(latencies), failed, pct(alone, 50), pct(alone, 99), heavyOK.Load(), heavyFailed.Load())
}

func heavyName(i int) string { return "heavy-" + strconv.Itoa(i) }

// createHeavyDecofiles creates heavyDecofiles inline Decofiles of heavyBytes each as the tenant,
// four at a time, each with its name as deploymentId.
func createHeavyDecofiles(b *testing.B, tn *testenv.Tenant) {
	b.Helper()
	// sample.Generate only comes near a size, and the stored form escapes HTML: generate a bit
	// less than heavyBytes encoded, then a block of padding makes it heavyBytes.
	var value map[string]apiextensionsv1.JSON
	var encoded []byte
	for target := heavyBytes * 3 / 4; ; target = target * 9 / 10 {
		value = map[string]apiextensionsv1.JSON{}
		for name, v := range sample.Generate(sample.Options{Seed: 11, Blocks: 60, TargetBytes: target}) {
			value[strings.TrimSuffix(name, ".json")] = apiextensionsv1.JSON{Raw: v}
		}
		var err error
		if encoded, err = json.Marshal(value); err != nil {
			b.Fatal(err)
		}
		if len(encoded) <= heavyBytes {
			break
		}
	}
	if pad := heavyBytes - len(encoded) - len(`,"padding":""`); pad > 0 {
		value["padding"] = apiextensionsv1.JSON{Raw: json.RawMessage(strconv.Quote(strings.Repeat("p", pad)))}
	}
	encoded, err := json.Marshal(value)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("heavy tenant: %d Decofiles of %d bytes of inline content", heavyDecofiles, len(encoded))
	var wg sync.WaitGroup
	errs := make(chan error, heavyDecofiles)
	next := atomic.Int64{}
	for range 4 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= heavyDecofiles {
					return
				}
				d := &decov1.Decofile{
					ObjectMeta: metav1.ObjectMeta{Name: heavyName(i), Namespace: tn.Namespace},
					Spec:       decov1.DecofileSpec{Source: decov1.SourceInline, Inline: &decov1.InlineSource{Value: value}},
				}
				if err := tn.Client.Create(context.Background(), d); err != nil {
					errs <- fmt.Errorf("create Decofile %s: %w", d.Name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatalf("heavy tenant: %v", err)
	}
}

// benchWorkload creates, as the tenant, a Deployment asking for the Decofile of deploymentID.
func benchWorkload(b *testing.B, tn *testenv.Tenant, name, deploymentID string) client.Object {
	b.Helper()
	dep := deployment(tn.Namespace, name, map[string]string{decov1.AnnotationInject: inject.InjectByDeploymentID},
		map[string]string{decov1.LabelDeploymentID: deploymentID}, "app")
	if err := tn.Client.Create(context.Background(), dep); err != nil {
		b.Fatalf("create Deployment %s/%s: %v", tn.Namespace, name, err)
	}
	return dep
}

// reapply changes an annotation of the workload, as a re-apply does: one admission.
func reapply(ctx context.Context, cl client.Client, obj client.Object, i int) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"bench.siteops/apply":%q}}}`, strconv.Itoa(i))
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return cl.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
}
