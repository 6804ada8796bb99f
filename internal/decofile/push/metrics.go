package push

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Results of a delivery, the result label of siteops_decofile_push_events_total.
const (
	ResultTriggered    = "triggered"    // Decofiles follow the ref and were asked to reconcile
	ResultUnmatched    = "unmatched"    // no Decofile follows the ref
	ResultPing         = "ping"         // a ping (GitHub, Gitea) was answered
	ResultIgnored      = "ignored"      // another event type
	ResultDuplicate    = "duplicate"    // a delivery seen before
	ResultUnauthorized = "unauthorized" // signature or token missing or wrong (401)
	ResultTooLarge     = "too_large"    // body over the limit (413)
	ResultRateLimited  = "rate_limited" // over the rate or concurrency bound (429)
	ResultBadRequest   = "bad_request"  // not a push event siteops understands (400)
	ResultError        = "error"        // the event could not be passed on, or checked against the replay cache (503)
)

var (
	eventsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_decofile_push_events_total",
		Help: "Push events received, by provider (github, gitea, gitlab) and result; result unauthorized counts deliveries with a missing or wrong signature.",
	}, []string{"provider", "result"})
	triggeredTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "siteops_decofile_push_reconciles_total",
		Help: "Decofile reconciles asked for by push events.",
	})
	replayErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_decofile_push_replay_errors_total",
		Help: "Failed API server requests of the push replay cache (Leases in the manager's namespace), by operation: check (the delivery was answered 503 and not acted on), release, sweep.",
	}, []string{"op"})
	replayRemoved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_decofile_push_replay_leases_removed_total",
		Help: "Push replay cache Leases the sweep deleted, by reason: expired (past the replay window) or bound (the oldest, past the bound on Leases).",
	}, []string{"reason"})
	replayLeases = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "siteops_decofile_push_replay_leases",
		Help: "Push replay cache Leases left after the leader's last sweep.",
	})
)

func init() {
	crmetrics.Registry.MustRegister(eventsTotal, triggeredTotal, replayErrors, replayRemoved, replayLeases)
}

func count(provider, result string) { eventsTotal.WithLabelValues(provider, result).Inc() }
