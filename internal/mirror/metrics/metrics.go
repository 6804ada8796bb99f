// Package metrics holds the mirror's Prometheus metrics (prefix siteops_mirror_), registered with
// the controller-runtime registry that the manager serves.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// Events counts watch events received, by type (added, modified, deleted, bookmark, skipped; lower case).
	Events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_mirror_events_total",
		Help: "Watch events received by the mirror, by type.",
	}, []string{"type"})
	// Commits counts commits created.
	Commits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "siteops_mirror_commits_total",
		Help: "Commits created by the mirror.",
	})
	// Pushes counts pushes by result (success, rejected, error).
	Pushes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_mirror_pushes_total",
		Help: "Pushes to git remotes, by result.",
	}, []string{"result"})
	// PendingWrites is the number of changes waiting to be pushed, per repository and branch.
	PendingWrites = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "siteops_mirror_pending_writes",
		Help: "Changes waiting to be pushed, per writer (repository and branch).",
	}, []string{"writer"})
	// PushLatency is the time from receiving a watch event to the push holding its change.
	PushLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "siteops_mirror_event_to_pushed_seconds",
		Help:    "Time from receiving a watch event to pushing the commit holding its change.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 30, 60, 120},
	})
	// CursorWrites counts resume cursor writes to Redis, by result (success, error).
	CursorWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_mirror_cursor_writes_total",
		Help: "Watch resume cursor writes to Redis, by result.",
	}, []string{"result"})
	// WritersStopping is the number of git writers stopping in the background (their last push
	// to the remote, bounded by the engine's stop timeout).
	WritersStopping = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "siteops_mirror_writers_stopping",
		Help: "Git writers stopping in the background (their last push, bounded by the stop timeout).",
	})
	// CommandsRefused counts CommitRequests a writer answered at once because its remote could
	// not be opened.
	CommandsRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "siteops_mirror_commands_remote_unavailable_total",
		Help: "CommitRequests answered at once with a failure because their writer's remote could not be opened.",
	})
	// Replays counts full replays of a watch stream, by reason (no-cursor, expired).
	Replays = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_mirror_replays_total",
		Help: "Full replays (list or initial events) of a watch stream, by reason.",
	}, []string{"reason"})
	// SharedWatches is the number of shared watches running: one per watched resource.
	SharedWatches = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "siteops_mirror_shared_watches",
		Help: "Shared watches of the API server, one per watched resource.",
	})
	// WatchSubscribers is the number of streams following the shared watches.
	WatchSubscribers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "siteops_mirror_watch_subscribers",
		Help: "Streams (GitTarget, resource, namespace) following the shared watches.",
	})
	// WatchRewinds counts the times a shared watch started again from an earlier position, for
	// streams that joined behind it.
	WatchRewinds = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "siteops_mirror_watch_rewinds_total",
		Help: "Times a shared watch started again from an earlier position for streams that joined behind it.",
	})
	// WatchOverflows counts streams let go by a shared watch because they fell behind.
	WatchOverflows = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "siteops_mirror_watch_overflows_total",
		Help: "Streams let go by a shared watch because they held too many undelivered events; each reconnects.",
	})
)

func init() {
	crmetrics.Registry.MustRegister(Events, Commits, Pushes, PendingWrites, PushLatency, CursorWrites, Replays, WritersStopping, CommandsRefused,
		SharedWatches, WatchSubscribers, WatchRewinds, WatchOverflows)
}
