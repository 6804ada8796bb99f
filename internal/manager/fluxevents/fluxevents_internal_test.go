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
	f, err := New("http://127.0.0.1:1/", scheme.New(), logr.Discard(), 1)
	if err != nil {
		t.Fatal(err)
	}
	dropped := testutil.ToFloat64(sent.WithLabelValues("dropped"))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	for range 3 {
		f.enqueue("c", pod, nil, corev1.EventTypeNormal, "R", "A", "note") // Start is not running: nothing drains
	}
	if d := testutil.ToFloat64(sent.WithLabelValues("dropped")) - dropped; d != 2 {
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
