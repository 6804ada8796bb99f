package provision

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// SecretEventInterval is the shortest time between two reconciles of one namespace caused by
// changes of its valkey-acl Secret. The tenant can write that Secret as often as the API server
// lets it; however often it does, its namespace is reconciled once per interval (the first
// change at once, the others merged into the next free slot), and other namespaces are not
// slowed down by it.
const SecretEventInterval = time.Second

// spacer gives each key at most one slot per interval: a request in a free slot starts at once,
// the others are deferred to the next slot, where the work queue merges them into one.
type spacer struct {
	interval time.Duration

	mu    sync.Mutex
	slots map[string]time.Time // key → start of the last slot given out
}

// maxIdleSlots is how many keys the spacer keeps before it forgets the ones whose last slot
// has passed.
const maxIdleSlots = 1024

// delay returns how long a request for key that arrives at now waits for its slot.
func (s *spacer) delay(key string, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slots == nil {
		s.slots = map[string]time.Time{}
	}
	last, ok := s.slots[key]
	switch {
	case !ok || now.Sub(last) >= s.interval:
		if len(s.slots) >= maxIdleSlots {
			for k, t := range s.slots {
				if now.Sub(t) >= s.interval {
					delete(s.slots, k)
				}
			}
		}
		s.slots[key] = now
		return 0
	case last.After(now):
		// The next slot is given out already: this request joins it.
		return last.Sub(now)
	default:
		next := last.Add(s.interval)
		s.slots[key] = next
		return next.Sub(now)
	}
}

// spacedSecretHandler enqueues the namespace of a changed valkey-acl Secret, at most once per
// interval per namespace.
type spacedSecretHandler struct {
	spacer *spacer
}

var _ handler.TypedEventHandler[*corev1.Secret, reconcile.Request] = (*spacedSecretHandler)(nil)

type requestQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// Create enqueues the Secret's namespace.
func (h *spacedSecretHandler) Create(_ context.Context, e event.TypedCreateEvent[*corev1.Secret], q requestQueue) {
	h.enqueue(e.Object, q)
}

// Update enqueues the Secret's namespace.
func (h *spacedSecretHandler) Update(_ context.Context, e event.TypedUpdateEvent[*corev1.Secret], q requestQueue) {
	h.enqueue(e.ObjectNew, q)
}

// Delete enqueues the Secret's namespace.
func (h *spacedSecretHandler) Delete(_ context.Context, e event.TypedDeleteEvent[*corev1.Secret], q requestQueue) {
	h.enqueue(e.Object, q)
}

// Generic enqueues the Secret's namespace.
func (h *spacedSecretHandler) Generic(_ context.Context, e event.TypedGenericEvent[*corev1.Secret], q requestQueue) {
	h.enqueue(e.Object, q)
}

func (h *spacedSecretHandler) enqueue(s *corev1.Secret, q requestQueue) {
	if s == nil {
		return
	}
	req := reconcile.Request{NamespacedName: client.ObjectKey{Name: s.Namespace}}
	if d := h.spacer.delay(s.Namespace, time.Now()); d > 0 {
		q.AddAfter(req, d)
		return
	}
	q.Add(req)
}
