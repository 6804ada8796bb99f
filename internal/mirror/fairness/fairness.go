// Package fairness shares a controller's reconcile workers among namespaces: a Reconciler
// wrapped in Limit runs at most a few requests of one namespace at a time, so a tenant whose
// requests wait on a remote that never answers holds that many workers, never all of them. A
// request whose namespace is at its limit is put back in the queue for a short while instead of
// waiting on a worker.
package fairness

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// DefaultRetryAfter is the wait before a request deferred for its namespace's limit is tried again.
const DefaultRetryAfter = time.Second

// Deferred counts requests put back in the queue because their namespace already had its share
// of the workers, by controller.
var Deferred = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "siteops_mirror_reconciles_deferred_total",
	Help: "Reconciles put back in the queue because their namespace already held its share of the controller's workers, by controller.",
}, []string{"controller"})

func init() { crmetrics.Registry.MustRegister(Deferred) }

// Limit runs Inner with at most PerNamespace requests of one namespace at once. Requests of
// cluster-scoped objects share the namespace "".
type Limit struct {
	// Inner is the wrapped reconciler.
	Inner reconcile.Reconciler
	// Controller names the controller in the Deferred metric.
	Controller string
	// PerNamespace is how many requests of one namespace run at once; at least 1.
	PerNamespace int
	// RetryAfter is the wait before a deferred request is tried again; 0 means DefaultRetryAfter.
	RetryAfter time.Duration

	mu       sync.Mutex
	inFlight map[string]int
}

// Reconcile runs the request when its namespace has a free slot, and defers it otherwise.
func (l *Limit) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !l.acquire(req.Namespace) {
		Deferred.WithLabelValues(l.Controller).Inc()
		retry := l.RetryAfter
		if retry <= 0 {
			retry = DefaultRetryAfter
		}
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	defer l.release(req.Namespace)
	return l.Inner.Reconcile(ctx, req)
}

func (l *Limit) acquire(ns string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight == nil {
		l.inFlight = map[string]int{}
	}
	if l.inFlight[ns] >= max(l.PerNamespace, 1) {
		return false
	}
	l.inFlight[ns]++
	return true
}

func (l *Limit) release(ns string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight[ns]--; l.inFlight[ns] <= 0 {
		delete(l.inFlight, ns)
	}
}

// InFlight is how many requests of namespace ns are running now.
func (l *Limit) InFlight(ns string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlight[ns]
}
