package shard

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	skipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_shard_skipped_requests_total",
		Help: "Reconcile requests dropped because their object belongs to another shard (a watch mapped to it, or it moved while queued), by object kind.",
	}, []string{"kind"})
	info = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "siteops_shard_info",
		Help: "1 for the shard this manager reconciles: its name (empty for an unsharded or main instance) and its --watch-label-selector; join on it to label the other series by shard.",
	}, []string{"shard", "selector"})
)

func init() { crmetrics.Registry.MustRegister(skipped, info) }

// Announce records in siteops_shard_info which shard this process reconciles.
func Announce(name string, sel Selector) {
	info.Reset()
	info.WithLabelValues(name, sel.String()).Set(1)
}
