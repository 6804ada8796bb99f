package notify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/andybalholm/brotli"

	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/encode/sample"
	"github.com/siteops/siteops/internal/decofile/notify"
	"github.com/siteops/siteops/internal/testenv/peakmem"
	"github.com/siteops/siteops/internal/testenv/simpods"
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

func TestMain(m *testing.M) {
	simpods.Main()
	os.Exit(m.Run())
}

// startSimPods runs n simulated pods (see simpods) advertising accept, as the notifier's targets.
func startSimPods(b *testing.B, n int, accept string) []notify.Pod {
	b.Helper()
	var pods []notify.Pod
	for i, p := range simpods.Start(b, n, accept) {
		name := fmt.Sprint("pod-", i)
		pods = append(pods, notify.Pod{Name: name, UID: "uid-" + name, IP: p.IP, Port: p.Port})
	}
	return pods
}

// BenchmarkRollout pushes a 4 MB Decofile to N simulated pods, each on its own loopback address
// (in a child process), each reading the whole body and answering 100 ms after the request
// arrived. It reports the rollout time and the notifier process's peak heap during the rollout.
func BenchmarkRollout(b *testing.B) {
	const payloadSize = 4 << 20
	for _, tc := range []struct{ pods, concurrency int }{
		{150, 30}, {150, 150}, {1000, 30}, {1000, 100}, {1000, 250},
	} {
		b.Run(fmt.Sprintf("pods=%d/concurrency=%d", tc.pods, tc.concurrency), func(b *testing.B) {
			pods := startSimPods(b, tc.pods, "")
			body := notify.PushBody(1731598481, benchPayload(payloadSize))
			n := notify.New(notify.Config{Concurrency: tc.concurrency, Attempts: 1})

			var peak uint64
			var total time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s := peakmem.Start()
				res := n.Run(context.Background(), notify.Rollout{ID: "bench", Timestamp: 1731598481, Token: "t", Body: body, Pods: pods})
				peak = max(peak, s.Stop().Heap)
				total += res.Duration
				if !res.Succeeded() {
					b.Fatalf("rollout failed: %+v; first failures %+v", res.Progress, res.FailedPods()[:min(3, len(res.FailedPods()))])
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/rollout")
			b.ReportMetric(peakmem.MiB(peak), "peak-heap-MiB")
			b.ReportMetric(float64(len(body))/(1<<20), "payload-MiB")
		})
	}
}

// standardSite is the merged JSON of the standard 4.2 MB sample site.
func standardSite(b *testing.B) []byte {
	b.Helper()
	files := sample.Generate(sample.Standard)
	blocks := make(map[string]json.RawMessage, len(files))
	for n, v := range files {
		blocks[strings.TrimSuffix(n, ".json")] = v
	}
	merged, err := encode.Merge(blocks)
	if err != nil {
		b.Fatal(err)
	}
	return merged
}

// countingClient is a notifier client like NewClient's that counts every byte written to pods.
func countingClient(written *atomic.Int64) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	return &http.Client{Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countingConn{Conn: c, n: written}, nil
		},
		DisableKeepAlives:  true,
		DisableCompression: true,
	}}
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	k, err := c.Conn.Write(p)
	c.n.Add(int64(k))
	return k, err
}

// BenchmarkBytesPerPublish publishes the standard 4.2 MB site to 1000 simulated pods and counts
// the bytes written to them (request lines, headers and bodies). Pods that advertise
// Accept-Encoding: br get the brotli body from the second publish on (the first one, which
// teaches the notifier what they accept, is not counted); pods that advertise nothing get JSON.
// Reported: bytes per publish, the compressed body's size, and bytes per publish ÷ (compressed
// size × pods), whose goal is ≤ 1.2.
func BenchmarkBytesPerPublish(b *testing.B) {
	const pods = 1000
	site := standardSite(b)
	for _, accept := range []string{"br, gzip", ""} {
		name := "accepting"
		if accept == "" {
			name = "plain"
		}
		b.Run(name, func(b *testing.B) {
			targets := startSimPods(b, pods, accept)
			var written atomic.Int64
			n := notify.New(notify.Config{Attempts: 1, Client: countingClient(&written)})
			publish := func(ts int64) notify.Result {
				res := n.Run(context.Background(), notify.Rollout{ID: "bench", Timestamp: ts, Token: "t", Body: notify.PushBody(ts, site), Pods: targets})
				if !res.Succeeded() {
					b.Fatalf("rollout failed: %+v; first failures %+v", res.Progress, res.FailedPods()[:min(3, len(res.FailedPods()))])
				}
				return res
			}
			publish(1)
			written.Store(0)
			var res notify.Result
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res = publish(int64(2 + i))
			}
			b.StopTimer()
			perPublish := float64(written.Load()) / float64(b.N)
			bodyBytes := float64(res.BodyBytes) / pods
			b.ReportMetric(perPublish/(1<<20), "MiB/publish")
			b.ReportMetric(bodyBytes, "body-bytes/pod")
			b.ReportMetric(float64(len(site)), "site-bytes")
			b.ReportMetric(perPublish/(bodyBytes*pods), "ratio-vs-body×pods")
			if accept != "" {
				br, err := brotliSize(notify.PushBody(2, site))
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(perPublish/(float64(br)*pods), "ratio-vs-br×pods")
			}
		})
	}
}

// brotliSize is the size of body compressed at the notifier's wire setting.
func brotliSize(body []byte) (int, error) {
	var buf bytes.Buffer
	w := brotli.NewWriterOptions(&buf, notify.WireBrotli)
	if _, err := w.Write(body); err != nil {
		return 0, err
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	return buf.Len(), nil
}

// BenchmarkPublishLatency is the time from a new version (its push body built) to all 1000 pods
// confirmed, each pod answering 100 ms after its request arrived, at the default settings: 20
// publishes of the standard 4.2 MB site, each with new content (so each is compressed anew),
// reported as p50 and p99 (goal p99 ≤ 3 s). "accepting" pods take br; "plain" pods (the
// published Deno runtime) take JSON. The accepting pods are also measured at concurrency 30
// (the earlier default) and 100, which is how the default was chosen.
func BenchmarkPublishLatency(b *testing.B) {
	const pods, publishes = 1000, 20
	site := standardSite(b)
	for _, tc := range []struct {
		accept      string
		concurrency int
	}{{"br, gzip", 0}, {"", 0}, {"br, gzip", 30}, {"br, gzip", 100}} {
		name := "accepting"
		if tc.accept == "" {
			name = "plain"
		}
		if tc.concurrency != 0 {
			name += fmt.Sprintf("/concurrency=%d", tc.concurrency)
		}
		b.Run(name, func(b *testing.B) {
			targets := startSimPods(b, pods, tc.accept)
			n := notify.New(notify.Config{Concurrency: tc.concurrency})
			publish := func(ts int64) time.Duration {
				start := time.Now()
				content := append(bytes.Clone(site[:len(site)-1]), fmt.Sprintf(`,"version":%d}`, ts)...)
				res := n.Run(context.Background(), notify.Rollout{ID: "bench", Timestamp: ts, Token: "t", Body: notify.PushBody(ts, content), Pods: targets})
				if !res.Succeeded() {
					b.Fatalf("rollout failed: %+v; first failures %+v", res.Progress, res.FailedPods()[:min(3, len(res.FailedPods()))])
				}
				return time.Since(start)
			}
			publish(1) // pods answer with what they accept
			var all []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for k := range publishes {
					all = append(all, publish(int64(2+i*publishes+k)))
				}
			}
			b.StopTimer()
			slices.Sort(all)
			b.ReportMetric(all[len(all)/2].Seconds(), "p50-s")
			b.ReportMetric(all[(len(all)*99+99)/100-1].Seconds(), "p99-s")
			b.ReportMetric(float64(n.Config().Concurrency), "concurrency")
		})
	}
}
