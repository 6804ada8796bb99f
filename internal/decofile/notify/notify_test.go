package notify_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/decofile/notify"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/pkg/siteruntime"
)

const token = "tok-123"

// serve runs h on a fresh loopback address and returns the pod that points to it.
func serve(t testing.TB, name string, h http.Handler) notify.Pod {
	t.Helper()
	l := testenv.LoopbackListener(t)
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := l.Addr().(*net.TCPAddr)
	return notify.Pod{Name: name, IP: addr.IP.String(), Port: int32(addr.Port)}
}

func runtimePod(t *testing.T, name string, o siteruntime.Options) (notify.Pod, *siteruntime.Runtime) {
	t.Helper()
	rt, err := siteruntime.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, name, rt.Handler()), rt
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestPushBodyIsExact(t *testing.T) {
	got := string(notify.PushBody(42, []byte(`{"a":"x & y"}`)))
	if want := `{"timestamp":"42","source":"operator","decofile":{"a":"x & y"}}`; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
}

func TestPushReachesEveryPod(t *testing.T) {
	content := []byte(`{"site":{"title":"hello"},"pages":[1,2,3]}`)
	var pods []notify.Pod
	var rts []*siteruntime.Runtime
	for i := range 12 {
		p, rt := runtimePod(t, fmt.Sprintf("pod-%d", i), siteruntime.Options{Token: token})
		pods, rts = append(pods, p), append(rts, rt)
	}
	n := notify.New(notify.Config{Concurrency: 4})
	res := n.Run(context.Background(), notify.Rollout{ID: "timestamp:7", Timestamp: 7, Token: token,
		Body: notify.PushBody(7, content), Pods: pods})
	if !res.Succeeded() || res.Notified != 12 || res.Total != 12 {
		t.Fatalf("result %+v", res)
	}
	for i, rt := range rts {
		if s := rt.Current(); s.Hash != sha(content) || s.Timestamp != 7 {
			t.Fatalf("pod %d serves %s ts %d", i, s.Decofile, s.Timestamp)
		}
	}
}

func TestConcurrencyIsBounded(t *testing.T) {
	var inFlight, peak atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(40 * time.Millisecond)
		inFlight.Add(-1)
	})
	var pods []notify.Pod
	for i := range 15 {
		pods = append(pods, serve(t, fmt.Sprint("p", i), h))
	}
	res := notify.New(notify.Config{Concurrency: 3}).Run(context.Background(), notify.Rollout{Body: []byte("{}"), Pods: pods})
	if !res.Succeeded() || peak.Load() != 3 {
		t.Fatalf("peak %d, result %+v", peak.Load(), res.Progress)
	}
}

func TestRetryAfterServerError(t *testing.T) {
	var calls atomic.Int64
	pod := serve(t, "flaky", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
		}
	}))
	res := notify.New(notify.Config{Backoff: 10 * time.Millisecond}).Run(context.Background(), notify.Rollout{Body: []byte("{}"), Pods: []notify.Pod{pod}})
	if !res.Succeeded() || res.Pods[0].Attempts != 2 {
		t.Fatalf("result %+v", res.Pods)
	}
	// With one attempt the same pod fails and says why.
	calls.Store(0)
	res = notify.New(notify.Config{Attempts: 1}).Run(context.Background(), notify.Rollout{Body: []byte("{}"), Pods: []notify.Pod{pod}})
	if res.Succeeded() || !strings.Contains(res.Pods[0].Reason, "HTTP 503: warming up") {
		t.Fatalf("result %+v", res.Pods)
	}
}

func TestWrongTokenIsNotRetried(t *testing.T) {
	pod, rt := runtimePod(t, "other-token", siteruntime.Options{Token: "another"})
	res := notify.New(notify.Config{Attempts: 3, Backoff: time.Second}).Run(context.Background(),
		notify.Rollout{Token: token, Timestamp: 1, Body: notify.PushBody(1, []byte(`{"x":1}`)), Pods: []notify.Pod{pod}})
	pr := res.Pods[0]
	if pr.Outcome != notify.Failed || pr.Attempts != 1 || pr.Status != 401 || !strings.Contains(pr.Reason, "rejected the reload token") {
		t.Fatalf("result %+v", pr)
	}
	if rt.Reloads() != 0 {
		t.Fatal("a rejected push changed the pod")
	}
	if res.Duration > 500*time.Millisecond {
		t.Fatalf("a permanent error waited for backoff: %s", res.Duration)
	}
}

func TestUnreachablePodFails(t *testing.T) {
	l := testenv.LoopbackListener(t)
	addr := l.Addr().(*net.TCPAddr)
	_ = l.Close()
	res := notify.New(notify.Config{Backoff: 10 * time.Millisecond}).Run(context.Background(), notify.Rollout{Body: []byte("{}"),
		Pods: []notify.Pod{{Name: "gone", IP: addr.IP.String(), Port: int32(addr.Port)}}})
	if pr := res.Pods[0]; pr.Outcome != notify.Failed || pr.Attempts != 2 || !strings.Contains(pr.Reason, "connection refused") {
		t.Fatalf("result %+v", pr)
	}
}

func TestRefreshSkipsAndFollowsPods(t *testing.T) {
	var hits sync.Map
	h := func(name string) http.Handler {
		return http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Store(name, true) })
	}
	live := serve(t, "live", h("live"))
	moved := serve(t, "moved", h("moved"))
	pods := []notify.Pod{{Name: "live"}, {Name: "moved", IP: "127.0.0.1", Port: 1}, {Name: "pending"}, {Name: "deleted"}, {Name: "no-ip"}}
	refresh := func(_ context.Context, name string) (notify.Pod, error) {
		switch name {
		case "live":
			return live, nil
		case "moved": // the listed IP is stale; the fresh read has the real one
			return moved, nil
		case "pending":
			return notify.Pod{Name: name, SkipReason: "phase Pending"}, nil
		case "deleted":
			return notify.Pod{Name: name, SkipReason: "pod no longer exists"}, nil
		}
		return notify.Pod{Name: name}, nil
	}
	res := notify.New(notify.Config{}).Run(context.Background(), notify.Rollout{Body: []byte("{}"), Pods: pods, Refresh: refresh})
	if res.Notified != 2 || res.Skipped != 3 || res.Failed != 0 || !res.Succeeded() {
		t.Fatalf("result %+v", res)
	}
	if _, ok := hits.Load("moved"); !ok {
		t.Fatal("the refreshed address was not used")
	}
	if res.Pods[4].Reason != "no pod IP" {
		t.Fatalf("no-ip: %+v", res.Pods[4])
	}
}

func TestRolloutTimeout(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	})
	var pods []notify.Pod
	for i := range 4 {
		pods = append(pods, serve(t, fmt.Sprint("stuck-", i), h))
	}
	res := notify.New(notify.Config{Concurrency: 2, Timeout: 300 * time.Millisecond, PodTimeout: time.Minute}).
		Run(context.Background(), notify.Rollout{Body: []byte("{}"), Pods: pods})
	if !res.TimedOut || res.Failed != 4 || res.Duration > 2*time.Second {
		t.Fatalf("result %+v after %s", res.Progress, res.Duration)
	}
	if !strings.Contains(res.Pods[3].Reason, "rollout timeout") {
		t.Fatalf("never-started pod reason %q", res.Pods[3].Reason)
	}
}

func TestProgressIsThrottled(t *testing.T) {
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { time.Sleep(20 * time.Millisecond) })
	var pods []notify.Pod
	for i := range 30 {
		pods = append(pods, serve(t, fmt.Sprint("p", i), h))
	}
	var calls []notify.Progress
	var mu sync.Mutex
	res := notify.New(notify.Config{Concurrency: 2, ProgressInterval: 100 * time.Millisecond}).Run(context.Background(),
		notify.Rollout{Body: []byte("{}"), Pods: pods, Progress: func(p notify.Progress) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, p)
		}})
	mu.Lock()
	defer mu.Unlock()
	maxCalls := int(res.Duration/(100*time.Millisecond)) + 2
	if len(calls) < 2 || len(calls) > maxCalls {
		t.Fatalf("%d progress calls in %s (max %d)", len(calls), res.Duration, maxCalls)
	}
	if last := calls[len(calls)-1]; last != res.Progress || last.Notified != 30 {
		t.Fatalf("last progress %+v, result %+v", last, res.Progress)
	}
}

func TestLongPoll(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("decofile.json", `{"v":1}`)
	write("timestamp.txt", "10")
	pod, rt := runtimePod(t, "lp", siteruntime.Options{Release: "file://" + filepath.Join(dir, "decofile.json"), Token: token,
		PollInterval: 20 * time.Millisecond, PollTimeout: 5 * time.Second})
	pod.MountPath = dir
	go func() {
		time.Sleep(200 * time.Millisecond)
		write("decofile.json", `{"v":2}`)
		write("timestamp.txt", strconv.Itoa(20))
	}()
	res := notify.New(notify.Config{}).Run(context.Background(), notify.Rollout{Protocol: notify.ProtocolLongPoll, Timestamp: 20, Token: token, Pods: []notify.Pod{pod}})
	if !res.Succeeded() || res.Duration < 150*time.Millisecond {
		t.Fatalf("result %+v after %s", res.Pods, res.Duration)
	}
	if s := rt.Current(); string(s.Decofile) != `{"v":2}` || s.Timestamp != 20 {
		t.Fatalf("pod serves %s ts %d", s.Decofile, s.Timestamp)
	}
}

func TestParseProtocol(t *testing.T) {
	for _, ok := range []string{"push", "long-poll"} {
		if _, err := notify.ParseProtocol(ok); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := notify.ParseProtocol("grpc"); err == nil {
		t.Fatal("grpc accepted")
	}
}

// TestLargeBody sends a body far larger than any buffer, through the direct-write path, and
// checks every pod stored it byte for byte.
func TestLargeBody(t *testing.T) {
	content := benchPayload(3 << 20)
	var pods []notify.Pod
	var rts []*siteruntime.Runtime
	for i := range 3 {
		p, rt := runtimePod(t, fmt.Sprint("big-", i), siteruntime.Options{Token: token})
		pods, rts = append(pods, p), append(rts, rt)
	}
	res := notify.New(notify.Config{}).Run(context.Background(), notify.Rollout{Timestamp: 9, Token: token, Body: notify.PushBody(9, content), Pods: pods})
	if !res.Succeeded() {
		t.Fatalf("result %+v", res.Pods)
	}
	for _, rt := range rts {
		if rt.Current().Hash != sha(content) {
			t.Fatal("a pod stored different bytes")
		}
	}
}

// TestRedirectIsNotFollowed: a pod that redirects the reload, to another loopback server, fails
// with the status named; the target never sees a request, with the default client or a given one.
func TestRedirectIsNotFollowed(t *testing.T) {
	var reached atomic.Int64
	target := serve(t, "target", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Add(1) }))
	to := fmt.Sprintf("http://%s/.decofile/reload", net.JoinHostPort(target.IP, strconv.Itoa(int(target.Port))))
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		pod := serve(t, "hop", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, to, code) }))
		for _, cfg := range []notify.Config{{Attempts: 2}, {Attempts: 2, Client: &http.Client{}}} {
			res := notify.New(cfg).Run(context.Background(), notify.Rollout{Token: token, Body: []byte("{}"), Pods: []notify.Pod{pod}})
			pr := res.Pods[0]
			if pr.Outcome != notify.Failed || pr.Status != code || pr.Attempts != 1 || !strings.Contains(pr.Reason, fmt.Sprintf("HTTP %d", code)) || !strings.Contains(pr.Reason, "redirect") {
				t.Errorf("HTTP %d: result %+v", code, pr)
			}
		}
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the redirect target got %d requests", n)
	}
}

func TestExcerpt(t *testing.T) {
	cases := map[string]string{
		"":                             "",
		"\r\n\x00":                     "",
		"warming up\n":                 ": warming up",
		"\x1b[31mred\x1b[0m\r\nnext":   ": [31mred [0m next",
		"caf\xc3\xa9 \t ok":            ": caf ok",
		strings.Repeat("a", 500):       ": " + strings.Repeat("a", notify.MaxExcerptBytes),
		strings.Repeat("é", 100) + "x": "",
	}
	for in, want := range cases {
		if got := notify.Excerpt([]byte(in)); got != want {
			t.Errorf("Excerpt(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMalformedAnswerIsNotEchoed: a pod that answers garbage gets a short, printable reason.
func TestMalformedAnswerIsNotEchoed(t *testing.T) {
	const marker = "MARKER-51c0"
	l := testenv.LoopbackListener(t)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Write([]byte("\x1b[2J\x07BOGUS " + strings.Repeat("z", 300) + marker + "\r\n\r\n"))
				time.Sleep(100 * time.Millisecond)
			}()
		}
	}()
	addr := l.Addr().(*net.TCPAddr)
	pod := notify.Pod{Name: "garbage", IP: addr.IP.String(), Port: int32(addr.Port)}
	res := notify.New(notify.Config{Attempts: 1}).Run(context.Background(), notify.Rollout{Token: token, Body: []byte("{}"), Pods: []notify.Pod{pod}})
	reason := res.Pods[0].Reason
	t.Logf("reason: %q", reason)
	if res.Pods[0].Outcome != notify.Failed || strings.Contains(reason, marker) || len(reason) > 250 {
		t.Fatalf("reason %q", reason)
	}
	for _, r := range reason {
		if r < 0x20 || r > 0x7e {
			t.Fatalf("reason %q has the non-printable %U", reason, r)
		}
	}
}
