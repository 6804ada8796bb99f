package audit

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// FactsRecorded counts attribution facts written by the audit receiver, by kind (object,
	// deletecollection).
	FactsRecorded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_mirror_attribution_facts_recorded_total",
		Help: "Attribution facts recorded from audit events, by kind.",
	}, []string{"kind"})
	// AuditEvents counts audit events received, by outcome: recorded, filtered (not a
	// persisted write), error (store failure) and rejected (a malformed or oversize request).
	AuditEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_mirror_attribution_audit_events_total",
		Help: "Audit events received by the audit webhook, by outcome.",
	}, []string{"outcome"})
)

func init() { crmetrics.Registry.MustRegister(FactsRecorded, AuditEvents) }
