package notify_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/testenv"

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

// simPodsEnv makes the test binary serve simulated pods instead of running tests (see TestMain).
const simPodsEnv = "SITEOPS_NOTIFY_SIM_PODS"

func TestMain(m *testing.M) {
	if n, err := strconv.Atoi(os.Getenv(simPodsEnv)); err == nil {
		serveSimPods(n)
		return
	}
	os.Exit(m.Run())
}

// serveSimPods listens on n loopback addresses, prints each "ip:port" on stdout, then "ready",
// and serves until stdin closes. Each pod reads the whole body and answers 100 ms after the
// request arrived: 200 when it got Content-Length bytes, 400 otherwise.
func serveSimPods(n int) {
	bufs := sync.Pool{New: func() any { return new([64 << 10]byte) }}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deadline := time.Now().Add(100 * time.Millisecond)
		buf := bufs.Get().(*[64 << 10]byte)
		var got int64
		for {
			k, err := r.Body.Read(buf[:])
			got += int64(k)
			if err != nil {
				break
			}
		}
		bufs.Put(buf)
		time.Sleep(time.Until(deadline))
		if got != r.ContentLength {
			http.Error(w, fmt.Sprintf("got %d of %d bytes", got, r.ContentLength), http.StatusBadRequest)
		}
	})
	out := bufio.NewWriter(os.Stdout)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(testenv.LoopbackIP(), "0"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go func() { _ = (&http.Server{Handler: h}).Serve(l) }()
		fmt.Fprintln(out, l.Addr().String())
	}
	fmt.Fprintln(out, "ready")
	_ = out.Flush()
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// startSimPods runs n simulated pods in a child process, so the heap measured here is the
// notifier's alone, as it would be in the manager.
func startSimPods(b *testing.B, n int) []notify.Pod {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", simPodsEnv, n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	var pods []notify.Pod
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready" {
		addr, err := net.ResolveTCPAddr("tcp", sc.Text())
		if err != nil {
			b.Fatalf("simulated pod address %q: %v", sc.Text(), err)
		}
		pods = append(pods, notify.Pod{Name: fmt.Sprint("pod-", len(pods)), IP: addr.IP.String(), Port: int32(addr.Port)})
	}
	if len(pods) != n {
		b.Fatalf("started %d of %d simulated pods", len(pods), n)
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
			pods := startSimPods(b, tc.pods)
			body := notify.PushBody(1731598481, benchPayload(payloadSize))
			n := notify.New(notify.Config{Concurrency: tc.concurrency, Attempts: 1})

			var peak uint64
			var total time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				runtime.GC()
				s := startHeapSampler()
				res := n.Run(context.Background(), notify.Rollout{ID: "bench", Timestamp: 1731598481, Token: "t", Body: body, Pods: pods})
				peak = max(peak, s.Stop())
				total += res.Duration
				if !res.Succeeded() {
					b.Fatalf("rollout failed: %+v; first failures %+v", res.Progress, res.FailedPods()[:min(3, len(res.FailedPods()))])
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/rollout")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(len(body))/(1<<20), "payload-MiB")
		})
	}
}
