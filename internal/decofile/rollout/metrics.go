package rollout

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	rolloutsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "deco_operator_decofile_rollouts_total",
		Help: "Decofile rollouts to running pods, by result (succeeded, failed, rolled_back).",
	}, []string{"result"})
	rolloutDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "deco_operator_decofile_rollout_duration_seconds",
		Help:    "Time to notify every pod of a Decofile about new content.",
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
	})
	podNotificationsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "deco_operator_decofile_pod_notifications_total",
		Help: "Pod notifications, by result (notified, failed, skipped).",
	}, []string{"result"})
)

func init() {
	metrics.Registry.MustRegister(rolloutsTotal, rolloutDuration, podNotificationsTotal)
}
