package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/scheme"
)

// BenchmarkColdStartFloor is the least any delivery of BenchmarkColdStart's Decofiles costs the
// API server and etcd: no manager, no reads, only the two writes each Decofile needs, its
// ConfigMap holding the content and a Ready status, sent by as many workers as the delivery
// controller has by default, with the content already in hand. The cold start cannot be faster
// than this on the same machine; it reports the time (floor-s), and that of the status writes
// alone (status-floor-s) on a second set of Decofiles.
//
// A controller also watches what it writes. On a third set it sends the same two writes with a
// cache of Decofiles as the manager's (its transform included) started at the same moment,
// and stops once that cache has seen every Decofile Ready (watched-floor-s): the API server
// sends each Decofile to the cache when it fills and again after its status write, and this
// process decodes both; it reports this process's CPU too.
func BenchmarkColdStartFloor(b *testing.B) {
	cfg, cl := scaleClient(b)
	sw, err := controller.NewStatusWriter(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		for _, run := range []struct {
			prefix, metric string
			how            floorRun
		}{
			{"floor", "floor", floorRun{configMap: true}},
			{"statusfloor", "status-floor", floorRun{}},
			{"watchedfloor", "watched-floor", floorRun{configMap: true, watched: cfg}},
		} {
			b.StopTimer()
			prefix := fmt.Sprintf("%s%d", run.prefix, i)
			createScaleDecofiles(b, cl, prefix, 0)
			b.StartTimer()
			took, server, self := writeEach(b, cl, sw, prefix, run.how)
			b.ReportMetric(took.Seconds(), run.metric+"-s")
			b.ReportMetric(float64(server.Milliseconds())/float64(scaleDecofiles), run.metric+"-server-cpu-ms/decofile")
			if run.how.watched != nil {
				b.ReportMetric(float64(self.Milliseconds())/float64(scaleDecofiles), run.metric+"-process-cpu-ms/decofile")
			}
		}
	}
}

// floorRun is what writeEach does besides the status writes.
type floorRun struct {
	// configMap writes each Decofile's ConfigMap first.
	configMap bool
	// watched, when set, fills a cache of Decofiles from this API server as the writes start
	// and waits until it has seen them all Ready.
	watched *rest.Config
}

// writeEach writes, for every Decofile in the namespaces createScaleDecofiles made for prefix,
// its ConfigMap (when how says so) and a Ready status, and returns the time it took and the CPU
// the API server with etcd, and this process, used meanwhile.
func writeEach(b *testing.B, cl client.Client, sw *controller.StatusWriter, prefix string, how floorRun) (took, server, self time.Duration) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mine []decov1.Decofile
	for i := range scaleNamespaces {
		var list decov1.DecofileList
		if err := cl.List(ctx, &list, client.InNamespace(fmt.Sprintf("%s-%d", prefix, i))); err != nil {
			b.Fatal(err)
		}
		mine = append(mine, list.Items...)
	}
	if len(mine) != scaleDecofiles {
		b.Fatalf("found %d Decofiles under %s, want %d", len(mine), prefix, scaleDecofiles)
	}
	runtime.GC()
	start, serverBefore, selfBefore := time.Now(), childrenCPU(), processCPU("self")
	var ready func() int
	if how.watched != nil {
		ready = startDecofileCache(ctx, b, how.watched, prefix)
	}
	work := make(chan *decov1.Decofile)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range controller.DefaultMaxConcurrentReconciles {
		wg.Go(func() {
			for df := range work {
				if err := writeOne(ctx, cl, sw, df, how.configMap); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range mine {
		work <- &mine[i]
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	if ready != nil {
		waitAllReady(b, ready)
	}
	return time.Since(start), childrenCPU() - serverBefore, processCPU("self") - selfBefore
}

// startDecofileCache starts a cache of the Decofiles of set prefix as siteops-manager's holds
// them, waits until it has listed them all, and returns how many it has seen Ready at their
// generation so far, counted as its events arrive.
func startDecofileCache(ctx context.Context, b *testing.B, cfg *rest.Config, prefix string) (ready func() int) {
	b.Helper()
	co := manager.CacheOptions(manager.Options{Controllers: []string{manager.PartDecofile}})
	co.Scheme = scheme.New()
	// This set only: the API server also holds the cold start's and the other floors' Decofiles,
	// which a manager starting on this set alone would not be sent.
	for obj, bo := range co.ByObject {
		if _, ok := obj.(*decov1.Decofile); ok {
			bo.Label = labels.SelectorFromSet(labels.Set{scaleSetLabel: prefix})
			co.ByObject[obj] = bo
		}
	}
	c, err := cache.New(cfg, co)
	if err != nil {
		b.Fatal(err)
	}
	inf, err := c.GetInformer(ctx, &decov1.Decofile{})
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	note := func(obj any) {
		df, ok := obj.(*decov1.Decofile)
		if !ok {
			return
		}
		cond := meta.FindStatusCondition(df.Status.Conditions, decov1.ConditionReady)
		mu.Lock()
		seen[df.Namespace+"/"+df.Name] = cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == df.Generation
		mu.Unlock()
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: note, UpdateFunc: func(_, obj any) { note(obj) }}); err != nil {
		b.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("the cache of Decofiles did not fill")
	}
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range seen {
			if r {
				n++
			}
		}
		return n
	}
}

// waitAllReady waits until ready counts every Decofile.
func waitAllReady(b *testing.B, ready func() int) {
	b.Helper()
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		n := ready()
		if n == scaleDecofiles {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the cache saw %d of %d Decofiles Ready", n, scaleDecofiles)
		}
	}
}

// writeOne stores df's content in a ConfigMap, when withConfigMap, and marks it Ready.
func writeOne(ctx context.Context, cl client.Client, sw *controller.StatusWriter, df *decov1.Decofile, withConfigMap bool) error {
	next := df.Status.DeepCopy()
	if withConfigMap {
		blocks := map[string]json.RawMessage{}
		for k, v := range df.Spec.Inline.Value {
			blocks[k] = v.Raw
		}
		merged, err := encode.Merge(blocks)
		if err != nil {
			return err
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: df.Namespace, Name: df.ConfigMapName()},
			Data: map[string]string{decov1.KeyJSON: string(merged), decov1.KeyTimestamp: strconv.FormatInt(time.Now().Unix(), 10)}}
		if err := cl.Create(ctx, cm); err != nil {
			return err
		}
		next.ContentHash = encode.Hash(merged)
	}
	next.ObservedGeneration = df.Generation
	meta.SetStatusCondition(&next.Conditions, metav1.Condition{Type: decov1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: decov1.ReasonSucceeded, Message: "stored", ObservedGeneration: df.Generation})
	_, err := sw.Write(ctx, df, &df.Status, next)
	return err
}
