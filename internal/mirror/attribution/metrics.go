package attribution

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// Resolutions counts watch-event author resolutions by result (exact_user,
	// exact_serviceaccount, weak, exact_deletecollection_item, absent).
	Resolutions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_mirror_attribution_resolutions_total",
		Help: "Author resolutions of watch events, by result.",
	}, []string{"result"})
	// WaitSeconds is how long a watch event waited for its author fact.
	WaitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "siteops_mirror_attribution_wait_seconds",
		Help:    "Time a watch event waited for its author fact (up to the grace period).",
		Buckets: []float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10},
	})
	// Overflows counts watch events that did not wait for their audit facts because
	// --author-attribution-max-waiting events were already waiting; they are committed by the
	// committer (result absent).
	Overflows = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "siteops_mirror_attribution_overflow_total",
		Help: "Watch events committed by the committer without waiting for their audit facts, because too many events were waiting.",
	})
	// Waiting is the number of watch events waiting for their audit facts or for the writer.
	Waiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "siteops_mirror_attribution_waiting",
		Help: "Watch events waiting for their audit facts (or to be handed to the git writer), at most --author-attribution-max-waiting.",
	})
	// StoredFacts is the number of audit facts in Redis, refreshed by FactGauge with SCAN.
	StoredFacts = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "siteops_mirror_attribution_stored_facts",
		Help: "Attribution facts stored in Redis (SCAN of <prefix>:author:v1:audit:*).",
	})
)

func init() {
	crmetrics.Registry.MustRegister(Resolutions, WaitSeconds, StoredFacts, Overflows, Waiting)
}

// FactCounter counts stored audit facts (the store's AttributionIndex).
type FactCounter interface {
	CountFacts(ctx context.Context) (int, error)
}

// FactGauge refreshes StoredFacts periodically. SCAN walks the whole keyspace, so it runs on an
// interval rather than on every scrape. It is a manager Runnable.
type FactGauge struct {
	Counter  FactCounter
	Interval time.Duration
}

// Start refreshes the gauge until ctx ends.
func (g FactGauge) Start(ctx context.Context) error {
	interval := g.Interval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	log := logf.FromContext(ctx).WithName("attribution-fact-gauge")
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := g.Counter.CountFacts(ctx); err != nil {
			log.V(1).Info("count attribution facts", "error", err.Error())
		} else {
			StoredFacts.Set(float64(n))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection is false: counting is read-only and every replica exports the gauge.
func (g FactGauge) NeedLeaderElection() bool { return false }
