package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	reconcilesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_decofile_reconciles_total",
		Help: "Decofile delivery reconciles by result: stored (content written), unchanged, restored (a ConfigMap changed outside the operator rewritten), adopted (an existing ConfigMap kept), waiting (every retrieval slot taken; looked at again in about a second), or the failure reason.",
	}, []string{"result"})
	fetchDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "siteops_decofile_source_fetch_duration_seconds",
		Help:    "Time to retrieve a Decofile's blocks (resolve, download and extract), by source type.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"source"})
	rawBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "siteops_decofile_raw_bytes",
		Help: "Size of a Decofile's merged JSON.",
	}, []string{"namespace", "name"})
	storedBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "siteops_decofile_stored_bytes",
		Help: "Size of a Decofile's stored form (JSON or base64 of brotli).",
	}, []string{"namespace", "name"})
	compressionDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "siteops_decofile_compression_duration_seconds",
		Help:    "Time to encode a Decofile's merged JSON (brotli and base64 when large).",
		Buckets: []float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	})
	githubRequestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_decofile_github_requests_total",
		Help: "Requests to GitHub by kind (resolve, archive) and HTTP status code (0: no answer).",
	}, []string{"kind", "code"})
)

func init() {
	metrics.Registry.MustRegister(reconcilesTotal, fetchDuration, rawBytes, storedBytes, compressionDuration, githubRequestsTotal)
}
