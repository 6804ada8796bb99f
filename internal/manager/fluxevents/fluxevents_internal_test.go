package fluxevents

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/siteops/siteops/internal/scheme"
)

// TestQueueNeverWaits: when notification-controller does not keep up, events beyond the queue
// are dropped and counted, and the caller never waits.
func TestQueueNeverWaits(t *testing.T) {
	f, dropped := undrained(t, 1)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	for range 3 {
		f.enqueue("c", pod, nil, corev1.EventTypeNormal, "R", "A", "note")
	}
	if d := dropped(); d != 2 {
		t.Fatalf("dropped %v events, want 2", d)
	}
}

// TestEventsNameOnlyTheObject: what is sent names the object and carries none of its
// annotations; a Namespace is named in itself.
func TestEventsNameOnlyTheObject(t *testing.T) {
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-a", UID: "u1", Annotations: map[string]string{"event.toolkit.fluxcd.io/token": "x"}}}
	o, err := referenceOnly(scheme.New(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != "Namespace" || o.Name != "tenant-a" || o.Namespace != "tenant-a" || o.UID != "u1" || len(o.Annotations) != 0 {
		t.Fatalf("reference %+v", o)
	}
	for _, bad := range []string{"", "notification-controller:9090", "ftp://x/", "http://"} {
		if _, err := New(bad, scheme.New(), logr.Discard(), 0); err == nil {
			t.Errorf("--events-addr %q accepted", bad)
		}
	}
}

// TestOneNamespaceHoldsATenthOfTheQueue: a tenant's edit loop fills its own share of the queue
// and drops its own events; another namespace's event still gets a place, and a sent event
// gives its place back.
func TestOneNamespaceHoldsATenthOfTheQueue(t *testing.T) {
	f, dropped := undrained(t, 20)
	loud := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "loud"}}
	for range 5 {
		f.enqueue("c", loud, nil, corev1.EventTypeNormal, "Stored", "Deliver", "again")
	}
	f.enqueue("c", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "quiet"}}, nil, corev1.EventTypeWarning, "Failed", "Deliver", "once")
	if d := dropped(); d != 3 || len(f.queue) != 3 {
		t.Fatalf("dropped %v, queued %d; want 3 of the loud namespace's dropped and 3 queued", d, len(f.queue))
	}
	(<-f.queue).release() // as send does once the event is posted
	f.enqueue("c", loud, nil, corev1.EventTypeNormal, "Stored", "Deliver", "again")
	if len(f.queue) != 3 {
		t.Fatalf("a sent event did not give its place back: %d queued", len(f.queue))
	}
}

// undrained is a Forwarder with a queue of size that nothing drains (Start is not running), and
// how many events were dropped since.
func undrained(t *testing.T, size int) (*Forwarder, func() float64) {
	t.Helper()
	f, err := New("http://127.0.0.1:1/", scheme.New(), logr.Discard(), size)
	if err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(sent.WithLabelValues("dropped"))
	return f, func() float64 { return testutil.ToFloat64(sent.WithLabelValues("dropped")) - before }
}
