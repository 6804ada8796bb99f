// Package fluxevents sends every part's Kubernetes Events to Flux's notification-controller as
// well (--events-addr), in Flux's event format (github.com/fluxcd/pkg/runtime/events), so
// platform teams route siteops' rollout, rollback, cache and mirror alerts through the Alerts
// and Providers they already have.
//
// Sending never holds a reconciler: the Kubernetes Event is recorded as before, and the copy
// for Flux waits in a bounded queue that one sender drains; when notification-controller is slow
// or away and the queue is full, events are dropped and counted
// (siteops_flux_events_total{result="dropped"}). One namespace holds at most a tenth of the
// queue, so a tenant's edit loop drops its own events, not the others'. What reaches Flux names the object (kind,
// namespace, name, UID) and nothing else of it: its annotations, which a tenant writes, are not
// copied into the event's metadata.
package fluxevents

import (
	"context"
	"fmt"
	"net/url"
	"sync"

	fluxevents "github.com/fluxcd/pkg/runtime/events"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/reference"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/siteops/siteops/internal/decofile/budget"
)

// DefaultQueueSize is how many events wait for notification-controller before new ones are
// dropped.
const DefaultQueueSize = 1000

// retries is how many times one event is posted again after a failure; notification-controller
// answers a duplicate with 429, which is not retried.
const retries = 2

var sent = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "siteops_flux_events_total",
	Help: "Events for Flux's notification-controller (--events-addr) by result: queued, or dropped because the queue, or its namespace's share of it, was full.",
}, []string{"result"})

func init() { ctrlmetrics.Registry.MustRegister(sent) }

// Forwarder queues events for notification-controller and sends them, one at a time. It is a
// manager Runnable that runs on every replica (Events are recorded by the leader's controllers
// and by any replica's webhooks).
type Forwarder struct {
	addr   string
	scheme *runtime.Scheme
	log    logr.Logger
	queue  chan queued
	// share admits events into the queue, a tenth of it per namespace (its units are events).
	share *budget.Budget

	mu        sync.Mutex
	recorders map[string]fluxevents.Recorder
}

// queued is one event waiting to be sent, with the reference it was recorded on.
type queued struct {
	controller                      string
	object                          *metav1.PartialObjectMetadata
	annotations                     map[string]string
	eventType, reason, action, note string
	// release gives the event's place in the queue back.
	release func()
}

// New returns a Forwarder posting to addr, an http or https URL of notification-controller's
// events endpoint; queueSize events wait at most (DefaultQueueSize when 0).
func New(addr string, scheme *runtime.Scheme, log logr.Logger, queueSize int) (*Forwarder, error) {
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--events-addr %q: want the http(s) URL of notification-controller's events endpoint, such as http://notification-controller.flux-system.svc.cluster.local./", addr)
	}
	if queueSize <= 0 {
		queueSize = DefaultQueueSize
	}
	return &Forwarder{addr: addr, scheme: scheme, log: log, queue: make(chan queued, queueSize),
		share: budget.New(int64(queueSize), int64(max(queueSize/10, 1))), recorders: map[string]fluxevents.Recorder{}}, nil
}

// Start sends queued events until ctx ends.
func (f *Forwarder) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-f.queue:
			f.send(e)
		}
	}
}

// send posts e and gives its place in the queue back.
func (f *Forwarder) send(e queued) {
	defer e.release()
	rec, err := f.recorder(e.controller)
	if err != nil {
		f.log.Error(err, "cannot send events to notification-controller")
		return
	}
	rec.AnnotatedEventf(e.object, nil, e.annotations, e.eventType, e.reason, e.action, "%s", e.note)
}

// NeedLeaderElection is false: every replica sends the events it records.
func (f *Forwarder) NeedLeaderElection() bool { return false }

// recorder is the Flux recorder reporting as controller, which only posts (the Kubernetes Event
// is recorded by the caller's own recorder).
func (f *Forwarder) recorder(controller string) (fluxevents.Recorder, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.recorders[controller]; ok {
		return r, nil
	}
	r, err := fluxevents.NewRecorder(f.log.WithValues("controller", controller), f.addr, controller,
		fluxevents.WithScheme(f.scheme), fluxevents.WithRetryMax(retries))
	if err != nil {
		return nil, fmt.Errorf("events recorder for %s: %w", controller, err)
	}
	f.recorders[controller] = r
	return r, nil
}

// Recorder returns a recorder that records with k8s as before and queues a copy for Flux,
// reported by controller.
func (f *Forwarder) Recorder(controller string, k8s recorder.EventRecorder) recorder.EventRecorder {
	return &tee{k8s: k8s, f: f, controller: controller}
}

// enqueue queues an event on regarding without waiting; a full queue drops it.
func (f *Forwarder) enqueue(controller string, regarding runtime.Object, annotations map[string]string, eventType, reason, action, note string) {
	obj, err := referenceOnly(f.scheme, regarding)
	if err != nil {
		f.log.V(1).Info("event not sent to notification-controller", "reason", reason, "error", err.Error())
		return
	}
	release, ok := f.share.TryAcquire(obj.Namespace, 1)
	if !ok {
		sent.WithLabelValues("dropped").Inc()
		return
	}
	// The share never admits more than the queue holds: this send does not wait.
	f.queue <- queued{controller: controller, object: obj, annotations: annotations, eventType: eventType, reason: reason, action: action, note: note, release: release}
	sent.WithLabelValues("queued").Inc()
}

// referenceOnly is the part of o an event names: kind, namespace, name, UID. A Namespace (not
// namespaced itself) is named in its own namespace, as Flux's events need one and an Alert in
// the tenant's namespace is the one to select it.
func referenceOnly(scheme *runtime.Scheme, o runtime.Object) (*metav1.PartialObjectMetadata, error) {
	ref, err := reference.GetReference(scheme, o)
	if err != nil {
		return nil, fmt.Errorf("reference of the event's object: %w", err)
	}
	ns := ref.Namespace
	if ns == "" && ref.Kind == "Namespace" && ref.APIVersion == "v1" {
		ns = ref.Name
	}
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: ref.APIVersion, Kind: ref.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Namespace: ns, UID: ref.UID, ResourceVersion: ref.ResourceVersion},
	}, nil
}

// tee records each event with the Kubernetes recorder and queues it for Flux.
type tee struct {
	k8s        recorder.EventRecorder
	f          *Forwarder
	controller string
}

// Eventf implements recorder.EventRecorder.
func (t *tee) Eventf(regarding, related runtime.Object, eventType, reason, action, note string, args ...any) {
	t.k8s.Eventf(regarding, related, eventType, reason, action, note, args...)
	t.f.enqueue(t.controller, regarding, nil, eventType, reason, action, fmt.Sprintf(note, args...))
}

// AnnotatedEventf implements recorder.EventRecorder; the annotations (the caller's, not the
// object's) become the Flux event's metadata.
func (t *tee) AnnotatedEventf(regarding, related runtime.Object, annotations map[string]string, eventType, reason, action, note string, args ...any) {
	t.k8s.AnnotatedEventf(regarding, related, annotations, eventType, reason, action, note, args...)
	t.f.enqueue(t.controller, regarding, annotations, eventType, reason, action, fmt.Sprintf(note, args...))
}

// Manager is a manager whose GetEventRecorder also forwards to Flux.
type Manager struct {
	ctrl.Manager
	forwarder *Forwarder
}

// Wrap returns mgr with every recorder it hands out forwarding to f, and f added to it.
func Wrap(mgr ctrl.Manager, f *Forwarder) (*Manager, error) {
	if err := mgr.Add(f); err != nil {
		return nil, fmt.Errorf("add the Flux events forwarder: %w", err)
	}
	return &Manager{Manager: mgr, forwarder: f}, nil
}

// GetEventRecorder returns the manager's recorder for name, forwarding to Flux as well.
func (m *Manager) GetEventRecorder(name string) recorder.EventRecorder {
	return m.forwarder.Recorder(name, m.Manager.GetEventRecorder(name))
}
