package ruleaccess

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Reviews counts WatchRule and ClusterWatchRule admission checks by kind and result (allowed,
// denied, error).
var Reviews = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "siteops_mirror_watchrule_access_reviews_total",
	Help: "WatchRule and ClusterWatchRule admission checks of the author's read access, by kind and result.",
}, []string{"kind", "result"})

func init() { crmetrics.Registry.MustRegister(Reviews) }
