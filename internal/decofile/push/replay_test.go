package push_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/siteops/siteops/internal/decofile/push"
	"github.com/siteops/siteops/internal/testenv"
)

// clock is the time every replica of a test reads.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_800_000_000, 0)} }

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

// replica is one manager replica's push receiver: its own listener and memory, the replay
// cache in the test's namespace of the shared API server.
type replica struct {
	url string
	rcv *push.Receiver
	rec *recorder
}

func startReplica(t *testing.T, cl client.Client, ns string, now *clock, cfg push.Config) *replica {
	t.Helper()
	l := testenv.LoopbackListener(t)
	rec := &recorder{}
	if cfg.Trigger == nil {
		cfg.Trigger = rec
	}
	cfg.Listener, cfg.Secret, cfg.Client, cfg.Namespace, cfg.Now = l, []byte(secret), cl, ns, now.Now
	cfg.Rate, cfg.Burst = 1000, 1000
	if cfg.ReplayWindow == 0 {
		cfg.ReplayWindow = time.Minute
	}
	return &replica{url: "http://" + l.Addr().String() + push.Path, rcv: run(t, cfg), rec: rec}
}

// signed is a GitHub push delivery: headers and body.
type signed struct {
	hdr  map[string]string
	body []byte
}

func delivery(id, after string) signed {
	body := githubPush("acme/shop", "refs/heads/main", after)
	h := map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sign(body, secret)}
	if id != "" {
		h["X-GitHub-Delivery"] = id
	}
	return signed{hdr: h, body: body}
}

func (d signed) to(t *testing.T, r *replica) int {
	t.Helper()
	code, _ := post(t, r.url, d.hdr, d.body)
	return code
}

func replayLeases(t *testing.T, cl client.Client, ns string) []coordinationv1.Lease {
	t.Helper()
	var l coordinationv1.LeaseList
	if err := cl.List(context.Background(), &l, client.InNamespace(ns), client.HasLabels{push.LabelReplay}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// TestReplayToEitherReplicaDoesNothing: two replicas share the replay cache. A delivery acted on
// by one is a replay for the other, by its bytes, by its body under a new delivery ID and by its
// delivery ID over another signed body; after the window it acts again, once.
func TestReplayToEitherReplicaDoesNothing(t *testing.T) {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "push-replay", nil)
	now := newClock()
	a := startReplica(t, c.Client, ns, now, push.Config{})
	b := startReplica(t, c.Client, ns, now, push.Config{})

	first := delivery("delivery-1", "1111")
	if code := first.to(t, a); code != http.StatusAccepted {
		t.Fatalf("first delivery to A: HTTP %d, want 202", code)
	}
	if code := first.to(t, b); code != http.StatusOK {
		t.Fatalf("the same bytes to B: HTTP %d, want 200 (already handled)", code)
	}
	newID := delivery("delivery-2", "1111")
	if code := newID.to(t, b); code != http.StatusOK {
		t.Fatalf("the same signed body under a new delivery ID to B: HTTP %d, want 200", code)
	}
	otherBody := delivery("delivery-1", "2222")
	if code := otherBody.to(t, b); code != http.StatusOK {
		t.Fatalf("the same delivery ID over another signed body to B: HTTP %d, want 200", code)
	}
	if code := first.to(t, a); code != http.StatusOK {
		t.Fatalf("the same bytes to A again: HTTP %d, want 200", code)
	}
	if a.rec.count() != 1 || b.rec.count() != 0 {
		t.Fatalf("triggers: A %d, B %d; want 1 and 0", a.rec.count(), b.rec.count())
	}
	// The body of the delivery B refused was not left behind: it is a new delivery for A.
	if code := delivery("", "2222").to(t, a); code != http.StatusAccepted {
		t.Fatalf("the refused replay's body under no ID: HTTP %d, want 202", code)
	}

	now.Add(2 * time.Minute)
	if code := first.to(t, b); code != http.StatusAccepted {
		t.Fatalf("after the window, to B: HTTP %d, want 202", code)
	}
	if code := first.to(t, a); code != http.StatusOK {
		t.Fatalf("after the window, to A once B acted: HTTP %d, want 200", code)
	}
	if a.rec.count() != 2 || b.rec.count() != 1 {
		t.Fatalf("triggers: A %d, B %d; want 2 and 1", a.rec.count(), b.rec.count())
	}
}

// TestConcurrentDeliveriesTriggerOnce: the same delivery sent to both replicas at once acts
// exactly once, when it is new (both create its Lease) and after the window (both take the
// expired Lease over).
func TestConcurrentDeliveriesTriggerOnce(t *testing.T) {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "push-replay", nil)
	now := newClock()
	a := startReplica(t, c.Client, ns, now, push.Config{})
	b := startReplica(t, c.Client, ns, now, push.Config{})
	const rounds = 20
	var ds []signed
	for i := range rounds {
		ds = append(ds, delivery(fmt.Sprintf("race-%d", i), fmt.Sprintf("race-%d", i)))
	}
	race := func(phase string) {
		for i, d := range ds {
			var wg sync.WaitGroup
			codes := make([]int, 2)
			start := make(chan struct{})
			for j, r := range []*replica{a, b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					codes[j], _ = post(t, r.url, d.hdr, d.body)
				}()
			}
			close(start)
			wg.Wait()
			accepted := 0
			for _, code := range codes {
				switch code {
				case http.StatusAccepted:
					accepted++
				case http.StatusOK:
				default:
					t.Errorf("%s round %d: HTTP %d", phase, i, code)
				}
			}
			if accepted != 1 {
				t.Errorf("%s round %d: answers %v, want exactly one 202", phase, i, codes)
			}
		}
	}
	race("new")
	if got := a.rec.count() + b.rec.count(); got != rounds {
		t.Fatalf("new deliveries: %d triggers, want %d", got, rounds)
	}
	now.Add(2 * time.Minute)
	race("after the window")
	if got := a.rec.count() + b.rec.count(); got != 2*rounds {
		t.Fatalf("after the window: %d triggers in all, want %d", got, 2*rounds)
	}
}

// TestReplayLeaseNamesCarryNoDeliveryID: the Leases are named by a digest and carry nothing the
// sender chose: not the delivery ID, not the body.
func TestReplayLeaseNamesCarryNoDeliveryID(t *testing.T) {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "push-replay", nil)
	a := startReplica(t, c.Client, ns, newClock(), push.Config{})
	const id = "Delivery-Marker-7f3a"
	if code := delivery(id, "body-marker-5c1e").to(t, a); code != http.StatusAccepted {
		t.Fatalf("HTTP %d", code)
	}
	leases := replayLeases(t, c.Client, ns)
	if len(leases) != 2 {
		t.Fatalf("%d Leases, want 2 (body digest and delivery ID)", len(leases))
	}
	name := regexp.MustCompile(`^push-replay-[0-9a-f]{64}$`)
	for _, l := range leases {
		if !name.MatchString(l.Name) {
			t.Errorf("Lease name %q is not push-replay-<sha256>", l.Name)
		}
		raw, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{id, strings.ToLower(id), "body-marker", "acme"} {
			if strings.Contains(string(raw), s) {
				t.Errorf("Lease %s carries %q: %s", l.Name, s, raw)
			}
		}
		if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 60 || l.Spec.AcquireTime == nil {
			t.Errorf("Lease %s: spec %+v, want the window of 60s from the acquire time", l.Name, l.Spec)
		}
	}
}

// TestReplaySweepBound: the sweep keeps at most MaxReplayLeases Leases, removing the oldest first
// (a replay of those acts again), and removes every Lease past the window.
func TestReplaySweepBound(t *testing.T) {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "push-replay", nil)
	now := newClock()
	a := startReplica(t, c.Client, ns, now, push.Config{MaxReplayLeases: 5})
	var ds []signed
	for i := range 8 {
		d := delivery("", fmt.Sprintf("bound-%d", i)) // one Lease each: no delivery ID
		if code := d.to(t, a); code != http.StatusAccepted {
			t.Fatalf("delivery %d: HTTP %d", i, code)
		}
		ds = append(ds, d)
		now.Add(time.Second)
	}
	left, err := a.rcv.Sweeper().Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(replayLeases(t, c.Client, ns)); left != 5 || n != 5 {
		t.Fatalf("after the sweep: %d Leases (reported %d), want 5", n, left)
	}
	// A replica that has not seen them: the three oldest act again, the newest do not.
	b := startReplica(t, c.Client, ns, now, push.Config{MaxReplayLeases: 5})
	for i, d := range ds {
		want := http.StatusOK
		if i < 3 {
			want = http.StatusAccepted
		}
		if code := d.to(t, b); code != want {
			t.Errorf("delivery %d to B after the sweep: HTTP %d, want %d", i, code, want)
		}
	}
	now.Add(2 * time.Minute)
	if left, err := b.rcv.Sweeper().Sweep(context.Background()); err != nil || left != 0 {
		t.Fatalf("after the window: %d Leases left, %v", left, err)
	}
	if n := len(replayLeases(t, c.Client, ns)); n != 0 {
		t.Fatalf("%d Leases past the window", n)
	}
}

// failing is a Trigger that fails.
type failing struct{}

func (failing) Trigger(context.Context, []string) (int, error) {
	return 0, errors.New("the leader is away")
}

// TestReplayCacheFailsClosed: a replica that cannot reach the API server answers 503, counts it
// and acts on nothing; a delivery that was not acted on (503) is not remembered, so the sender's
// retry to any replica acts.
func TestReplayCacheFailsClosed(t *testing.T) {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "push-replay", nil)
	now := newClock()
	gone, err := client.New(&rest.Config{Host: "http://" + testenv.FreeLoopbackAddr(t)}, client.Options{Scheme: c.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	cut := startReplica(t, gone, ns, now, push.Config{})
	d := delivery("unchecked", "unchecked")
	before := counter("siteops_decofile_push_replay_errors_total", "op", "check")
	if code := d.to(t, cut); code != http.StatusServiceUnavailable {
		t.Fatalf("API server unreachable: HTTP %d, want 503", code)
	}
	if cut.rec.count() != 0 {
		t.Fatal("a delivery that could not be checked was acted on")
	}
	if got := counter("siteops_decofile_push_replay_errors_total", "op", "check") - before; got != 1 {
		t.Fatalf("check errors rose by %v, want 1", got)
	}

	broken := startReplica(t, c.Client, ns, now, push.Config{Trigger: failing{}})
	a := startReplica(t, c.Client, ns, now, push.Config{})
	if code := d.to(t, broken); code != http.StatusServiceUnavailable {
		t.Fatalf("trigger failing: HTTP %d, want 503", code)
	}
	if n := len(replayLeases(t, c.Client, ns)); n != 0 {
		t.Fatalf("%d Leases left by a delivery not acted on", n)
	}
	if code := d.to(t, a); code != http.StatusAccepted || a.rec.count() != 1 {
		t.Fatalf("the retry to another replica: HTTP %d, %d triggers; want 202 and 1", code, a.rec.count())
	}
}

// counter reads one series of a counter vector from the manager's registry.
func counter(name, label, value string) float64 {
	mfs, err := crmetrics.Registry.(prometheus.Gatherer).Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
