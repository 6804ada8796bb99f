package source

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Results of a Fetch, the result label of siteops_decofile_source_fetches_total.
const (
	fetchDownloaded = "downloaded" // the content was downloaded from the remote
	fetchShared     = "shared"     // another Decofile's download of the same commit was used
)

var (
	fetchesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_decofile_source_fetches_total",
		Help: "Fetches of a commit's content by git and github sources, by result: downloaded from the remote, or shared (the download of the same commit, folder and credential for another Decofile, joined or kept for a minute).",
	}, []string{"source", "result"})
	busyTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_decofile_source_remote_busy_total",
		Help: "Retrievals not started because their remote is slow and already has as many in flight as one remote may (retried with backoff).",
	}, []string{"source"})
)

func init() { crmetrics.Registry.MustRegister(fetchesTotal, busyTotal) }
