package inject

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Results counted by AdmissionsTotal.
const (
	// ResultInjected: the Decofile was injected without anything to warn about.
	ResultInjected = "injected"
	// ResultWarned: admitted with warnings (missing or unready Decofile, Secret, S3 config, ...).
	ResultWarned = "warned"
	// ResultStripped: a workload no longer asking for injection had it removed.
	ResultStripped = "stripped"
	// ResultValkeyOnly: only the valkey-acl envFrom was considered.
	ResultValkeyOnly = "valkey_only"
	// ResultError: the request could not be handled.
	ResultError = "error"
)

// AdmissionsTotal counts the injection webhook's decisions by workload kind and result, so an
// alert can catch sites being admitted without their Decofile.
var AdmissionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "siteops_decofile_injection_admissions_total",
	Help: "Admission requests handled by the Decofile injection webhook, by workload kind and result.",
}, []string{"kind", "result"})

func init() { metrics.Registry.MustRegister(AdmissionsTotal) }
