package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/encode"
)

// BenchmarkColdStartFloor is the least any delivery of BenchmarkColdStart's Decofiles costs the
// API server and etcd: no manager, no reads, only the two writes each Decofile needs, its
// ConfigMap holding the content and a Ready status, sent by as many workers as the delivery
// controller has by default, with the content already in hand. The cold start cannot be faster
// than this on the same machine; it reports the time (floor-s), and that of the status writes
// alone (status-floor-s) on a second set of Decofiles.
func BenchmarkColdStartFloor(b *testing.B) {
	cfg, cl := scaleClient(b)
	sw, err := controller.NewStatusWriter(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		createScaleDecofiles(b, cl, fmt.Sprintf("floor%d", i), 0)
		b.StartTimer()
		took, cpu := writeEach(b, cl, sw, fmt.Sprintf("floor%d", i), true)
		b.ReportMetric(took.Seconds(), "floor-s")
		b.ReportMetric(float64(cpu.Milliseconds())/float64(scaleDecofiles), "floor-server-cpu-ms/decofile")

		b.StopTimer()
		createScaleDecofiles(b, cl, fmt.Sprintf("statusfloor%d", i), 0)
		b.StartTimer()
		took, cpu = writeEach(b, cl, sw, fmt.Sprintf("statusfloor%d", i), false)
		b.ReportMetric(took.Seconds(), "status-floor-s")
		b.ReportMetric(float64(cpu.Milliseconds())/float64(scaleDecofiles), "status-floor-server-cpu-ms/decofile")
	}
}

// writeEach writes, for every Decofile in the namespaces createScaleDecofiles made for prefix, its ConfigMap (when
// withConfigMap) and a Ready status, and returns the time it took and the CPU the API server and
// etcd used meanwhile.
func writeEach(b *testing.B, cl client.Client, sw *controller.StatusWriter, prefix string, withConfigMap bool) (time.Duration, time.Duration) {
	b.Helper()
	ctx := context.Background()
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
	work := make(chan *decov1.Decofile)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	start, cpu := time.Now(), childrenCPU()
	for range controller.DefaultMaxConcurrentReconciles {
		wg.Go(func() {
			for df := range work {
				if err := writeOne(ctx, cl, sw, df, withConfigMap); err != nil {
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
	took, used := time.Since(start), childrenCPU()-cpu
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return took, used
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
