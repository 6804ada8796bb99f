package notify_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/decofile/notify"
)

// benchPayload builds a Decofile-like JSON object of about size bytes.
func benchPayload(size int) []byte {
	var b strings.Builder
	b.Grow(size + 256)
	b.WriteString("{")
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"pages/page-%06d":{"__resolveType":"website/pages/Page.tsx","name":"Page %d","path":"/p/%d","sections":[{"__resolveType":"site/sections/Content.tsx","html":"<p>Lorem ipsum dolor sit amet %d, consectetur adipiscing elit.</p>"}]}`, i, i, i, i)
	}
	b.WriteString("}")
	return []byte(b.String())
}

// heapSampler records the largest heap (live and not yet collected objects) seen while it runs.
type heapSampler struct {
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

func startHeapSampler() *heapSampler {
	s := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() {
		metrics.Read(sample)
		if v := sample[0].Value.Uint64(); v > s.peak.Load() {
			s.peak.Store(v)
		}
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			read()
			select {
			case <-s.stop:
				read()
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *heapSampler) Stop() uint64 {
	close(s.stop)
	<-s.done
	return s.peak.Load()
}

// BenchmarkRollout pushes a 4 MB Decofile to N simulated pods, each on its own loopback address,
// each reading the whole body and answering 100 ms after the request arrived. It reports the
// rollout time and the peak heap of the process (pods included) during the rollout.
func BenchmarkRollout(b *testing.B) {
	const payloadSize = 4 << 20
	for _, tc := range []struct{ pods, concurrency int }{
		{150, 30}, {150, 150}, {1000, 30}, {1000, 250}, {1000, 500},
	} {
		b.Run(fmt.Sprintf("pods=%d/concurrency=%d", tc.pods, tc.concurrency), func(b *testing.B) {
			var received atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				deadline := time.Now().Add(100 * time.Millisecond)
				n, _ := io.Copy(io.Discard, r.Body)
				received.Add(n)
				time.Sleep(time.Until(deadline))
			})
			pods := make([]notify.Pod, tc.pods)
			for i := range pods {
				pods[i] = serve(b, fmt.Sprint("pod-", i), h)
			}
			body := notify.PushBody(1731598481, benchPayload(payloadSize))
			n := notify.New(notify.Config{Concurrency: tc.concurrency, Attempts: 1})

			var peak uint64
			var total time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				received.Store(0)
				runtime.GC()
				s := startHeapSampler()
				res := n.Run(context.Background(), notify.Rollout{ID: "bench", Timestamp: 1731598481, Token: "t", Body: body, Pods: pods})
				peak = max(peak, s.Stop())
				total += res.Duration
				if !res.Succeeded() || received.Load() != int64(len(body))*int64(tc.pods) {
					b.Fatalf("rollout failed: %+v, received %d bytes; first failure %+v", res.Progress, received.Load(), res.FailedPods())
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/rollout")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(len(body))/(1<<20), "payload-MiB")
		})
	}
}
