package cli

import (
	"context"
	"errors"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/testenv"
)

// recordEvent writes an Event as a controller named reporter would.
func recordEvent(t *testing.T, c *testenv.Cluster, ns, reporter, typ, reason, kind, name, note string, at time.Time) {
	t.Helper()
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: ns, GenerateName: "ev-"},
		EventTime:           metav1.NewMicroTime(at),
		ReportingController: reporter, ReportingInstance: reporter + "-0", Action: "Reconcile",
		Type: typ, Reason: reason, Note: note,
		Regarding: corev1.ObjectReference{Kind: kind, Namespace: ns, Name: name},
	}
	must(t, c.Client.Create(context.Background(), ev))
}

func TestEvents(t *testing.T) {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "events", nil)
	kc := kubeconfigFor(t, c.Config, ns)
	now := time.Now()
	recordEvent(t, c, ns, "siteops-rollout", "Warning", "RolledBack", "Decofile", "shop", "step 1 failed its check; rolled back to commit 1234567", now.Add(-time.Minute))
	recordEvent(t, c, ns, "siteops-decofile", "Normal", "Delivered", "Decofile", "shop", "stored commit 89abcde", now.Add(-2*time.Minute))
	recordEvent(t, c, ns, "siteops-tenant", "Normal", "ValkeyACLProvisioned", "Namespace", ns, "user provisioned on 3 nodes", now.Add(-30*time.Second))
	recordEvent(t, c, ns, "kubelet", "Warning", "BackOff", "Pod", "shop-1", "not siteops'", now)

	out, _, err := runCLI(context.Background(), "events", "--kubeconfig", kc)
	must(t, err)
	golden(t, "events.golden", out, ns)
	if strings.Contains(out, "BackOff") {
		t.Errorf("another controller's Event is shown:\n%s", out)
	}
	// Read a page of one Event at a time, the same Events in the same order.
	defer func(n int64) { eventsPageSize = n }(eventsPageSize)
	eventsPageSize = 1
	paged, _, err := runCLI(context.Background(), "events", "--kubeconfig", kc)
	must(t, err)
	golden(t, "events.golden", paged, ns)
	out, _, err = runCLI(context.Background(), "events", "--types", "warning", "--for", "Decofile/shop", "--kubeconfig", kc)
	must(t, err)
	if !strings.Contains(out, "RolledBack") || strings.Contains(out, "Delivered") || strings.Contains(out, "ValkeyACL") {
		t.Errorf("--types warning --for Decofile/shop:\n%s", out)
	}
	if _, _, err := runCLI(context.Background(), "events", "--types", "Error", "--kubeconfig", kc); err == nil {
		t.Error("an unknown Event type is accepted")
	}

	// -w prints an Event recorded while it watches.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	live, done := startCLI(ctx, "events", "-w", "--kubeconfig", kc)
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(live.String(), "RolledBack") {
			return errors.New("no list yet: " + live.String())
		}
		return nil
	})
	recordEvent(t, c, ns, "siteops-mirror", "Warning", "PushFailed", "GitTarget", "prod", "git host refused the push", time.Now())
	testenv.Eventually(t, 10*time.Second, func() error {
		if !regexp.MustCompile(`Warning\s+PushFailed\s+gittarget/prod\s+git host refused the push`).MatchString(live.String()) {
			return errors.New("no line for the new Event: " + live.String())
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("events -w ended with %v", err)
	}
	if n := strings.Count(live.String(), "RolledBack"); n != 1 {
		t.Errorf("an Event printed %d times:\n%s", n, live.String())
	}
}

// scriptedEvents is a client whose lists and watches of Events follow a script: each list
// answers at the next version of lists, each watch delivers the next events of watches and
// ends. It records the version each watch started from and, with a clock, when; the watch
// whose index is in lasts moves the clock on by that much before it ends.
type scriptedEvents struct {
	client.WithWatch
	lists   []eventsv1.EventList
	watches [][]watch.Event
	from    []string
	clock   *jumpingClock
	lasts   map[int]time.Duration
	at      []time.Time
}

func (s *scriptedEvents) List(_ context.Context, l client.ObjectList, _ ...client.ListOption) error {
	if len(s.lists) == 0 {
		return errors.New("no list left in the script")
	}
	*l.(*eventsv1.EventList), s.lists = s.lists[0], s.lists[1:]
	return nil
}

func (s *scriptedEvents) Watch(_ context.Context, _ client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	o := &client.ListOptions{}
	o.ApplyOptions(opts)
	s.from = append(s.from, o.Raw.ResourceVersion)
	if s.clock != nil {
		s.at = append(s.at, s.clock.Now())
		s.clock.Step(s.lasts[len(s.at)-1])
	}
	if len(s.watches) == 0 {
		return nil, errors.New("no watch left in the script")
	}
	w := watch.NewFakeWithChanSize(len(s.watches[0]), false)
	for _, ev := range s.watches[0] {
		w.Action(ev.Type, ev.Object)
	}
	w.Stop() // the API server ends the watch once it delivered them
	s.watches = s.watches[1:]
	return w, nil
}

// jumpingClock is a fake clock that moves on at once by each wait asked of it, so that waits
// take no time; the wait numbered cancelAt (from 1) ends ctx through cancel instead. It counts
// the waits.
type jumpingClock struct {
	*clocktesting.FakeClock
	waits    int
	cancelAt int
	cancel   context.CancelFunc
}

func newJumpingClock() *jumpingClock {
	return &jumpingClock{FakeClock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
}

func (c *jumpingClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.waits++
	if c.waits == c.cancelAt {
		c.cancel()
		return t
	}
	c.Step(d)
	return t
}

func scriptedEvent(name, rv, reporter string) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name), ResourceVersion: rv},
		EventTime:  metav1.NewMicroTime(time.Now()), ReportingController: reporter, Type: "Normal", Reason: "Delivered",
		Note: name, Regarding: corev1.ObjectReference{Kind: "Decofile", Namespace: "ns", Name: "shop"},
	}
}

// TestEventsWatchResumes: -w resumes a watch the API server closed from the last version it
// delivered, without listing again; lists again only when that version expired; and ends with
// any other error a watch reports instead of dropping it.
func TestEventsWatchResumes(t *testing.T) {
	expired := apierrors.NewResourceExpired("too old resource version: 12 (15)").ErrStatus
	internal := apierrors.NewInternalError(errors.New("etcd is unavailable")).ErrStatus
	s := &scriptedEvents{
		lists: []eventsv1.EventList{
			{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []eventsv1.Event{*scriptedEvent("listed", "9", "siteops-decofile")}},
			{ListMeta: metav1.ListMeta{ResourceVersion: "20"}, Items: []eventsv1.Event{*scriptedEvent("missed", "18", "siteops-decofile")}},
		},
		watches: [][]watch.Event{
			{{Type: watch.Added, Object: scriptedEvent("watched", "11", "siteops-decofile")}, {Type: watch.Added, Object: scriptedEvent("kubelet", "12", "kubelet")}},
			{{Type: watch.Error, Object: &expired}},
			{{Type: watch.Error, Object: &internal}},
		},
	}
	var out strings.Builder
	clk := newJumpingClock()
	e := eventLister{c: s, scope: scope{namespace: "ns"}, out: &out, errOut: io.Discard, clock: clk}
	err := e.run(context.Background(), true)
	if err == nil || !strings.Contains(err.Error(), "etcd is unavailable") {
		t.Errorf("run after a watch reported an internal error = %v, want that error", err)
	}
	if clk.waits != 1 {
		t.Errorf("%d waits before a watch or list, want 1: after the expired watch, which delivered nothing", clk.waits)
	}
	if want := []string{"10", "12", "20"}; !slices.Equal(s.from, want) {
		t.Errorf("watches started from versions %q, want %q", s.from, want)
	}
	if len(s.lists) != 0 {
		t.Errorf("%d lists left unread: the expired version was not listed again", len(s.lists))
	}
	for _, note := range []string{"listed", "watched", "missed"} {
		if n := strings.Count(out.String(), note); n != 1 {
			t.Errorf("Event %q printed %d times:\n%s", note, n, out.String())
		}
	}
	if strings.Contains(out.String(), "kubelet") {
		t.Errorf("another controller's Event is shown:\n%s", out.String())
	}
}

// TestEventsWatchBacksOff: -w restarts a watch the API server closed at once, having delivered
// nothing, only after a wait that doubles with each such watch in a row, up to 30 s; a watch
// that delivered an Event, or lasted 10 s, lets the next start at once and the waits start over.
func TestEventsWatchBacksOff(t *testing.T) {
	const s = time.Second
	watches := make([][]watch.Event, 17)
	watches[3] = []watch.Event{{Type: watch.Added, Object: scriptedEvent("watched", "11", "siteops-decofile")}}
	sc := &scriptedEvents{
		lists:   []eventsv1.EventList{{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}},
		watches: watches,
		clock:   newJumpingClock(),
		lasts:   map[int]time.Duration{6: watchSteadyAfter},
	}
	e := eventLister{c: sc, scope: scope{namespace: "ns"}, out: io.Discard, errOut: io.Discard, clock: sc.clock}
	if err := e.run(context.Background(), true); err == nil || !strings.Contains(err.Error(), "no watch left") {
		t.Fatalf("run to the end of the script = %v, want the script's end", err)
	}
	if len(sc.at) != len(watches)+1 {
		t.Fatalf("%d watches started, want %d", len(sc.at), len(watches)+1)
	}
	var gaps []time.Duration
	for i := 1; i < len(sc.at); i++ {
		gaps = append(gaps, sc.at[i].Sub(sc.at[i-1]))
	}
	want := []time.Duration{
		s / 2, s, 2 * s, // closed at once: the waits double
		0,        // delivered an Event: the next starts at once
		s / 2, s, // the waits start over
		watchSteadyAfter,                                                      // lasted: the next starts at once
		s / 2, s, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s, 30 * s, 30 * s, // up to 30 s, no further
	}
	if !slices.Equal(gaps, want) {
		t.Errorf("watches started %v apart, want %v", gaps, want)
	}
	if sc.clock.waits != 15 {
		t.Errorf("%d waits between watches, want 15", sc.clock.waits)
	}
}

// TestEventsWatchBackoffEndsWithContext: -w waiting to restart a watch ends without error once
// its context ends, without starting another watch.
func TestEventsWatchBackoffEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := newJumpingClock()
	clk.cancelAt, clk.cancel = 2, cancel
	sc := &scriptedEvents{
		lists:   []eventsv1.EventList{{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}},
		watches: make([][]watch.Event, 3),
		clock:   clk,
	}
	e := eventLister{c: sc, scope: scope{namespace: "ns"}, out: io.Discard, errOut: io.Discard, clock: clk}
	done := make(chan error, 1)
	go func() { done <- e.run(ctx, true) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run whose context ended while it waited = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run still waits after its context ended")
	}
	if len(sc.at) != 2 {
		t.Errorf("%d watches started, want 2: none after the context ended", len(sc.at))
	}
}

// failingWriter refuses every write of a line that holds failOn.
type failingWriter struct {
	failOn string
	w      strings.Builder
}

func (f *failingWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), f.failOn) {
		return 0, errors.New("disk full")
	}
	return f.w.Write(p)
}

// TestEventsWriteFailure: an Event that -w cannot write ends the command with the reason.
func TestEventsWriteFailure(t *testing.T) {
	s := &scriptedEvents{
		lists:   []eventsv1.EventList{{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []eventsv1.Event{*scriptedEvent("listed", "9", "siteops-decofile")}}},
		watches: [][]watch.Event{{{Type: watch.Added, Object: scriptedEvent("watched", "11", "siteops-decofile")}}},
	}
	out := &failingWriter{failOn: "watched"}
	e := eventLister{c: s, scope: scope{namespace: "ns"}, out: out, errOut: io.Discard}
	if err := e.run(context.Background(), true); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("run writing to a full disk = %v, want its error", err)
	}
	if !strings.Contains(out.w.String(), "listed") {
		t.Errorf("the listed Event was not written before:\n%s", out.w.String())
	}
}
