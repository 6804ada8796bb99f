// Package metrics holds the tenant part's Prometheus metrics, named exactly as the operator's
// published dashboards expect, registered with controller-runtime's registry.
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Operations labelling ACLErrors.
const (
	OpUpsert = "upsert"
	OpDelete = "delete"
	OpCheck  = "check"
)

var (
	// Provisioned counts ACL users created for a namespace (first provision or new credentials).
	Provisioned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "deco_operator_valkey_acl_provisioned_total",
		Help: "ACL users provisioned.",
	})
	// Deleted counts ACL users removed on namespace deletion or opt-out.
	Deleted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "deco_operator_valkey_acl_deleted_total",
		Help: "ACL users deleted on namespace removal.",
	})
	// Errors counts failed operations by kind.
	Errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "deco_operator_valkey_acl_errors_total",
		Help: "Errors by operation (upsert/delete/check).",
	}, []string{"operation"})
	// SelfHealed counts users found missing on a node and provisioned again.
	SelfHealed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "deco_operator_valkey_acl_self_healed_total",
		Help: "Re-provisions after ACL loss.",
	})
	// Tenants is the number of namespaces with provisioned credentials.
	Tenants = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "deco_operator_valkey_tenants_provisioned",
		Help: "Current provisioned tenants (seeded on startup).",
	})
	// UserErrors counts, per namespace, failures of that tenant's own ACL user (invalid stored
	// state, or a node refusing its SETUSER) that did not stop the other tenants.
	UserErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_tenant_acl_user_errors_total",
		Help: "Failures of one tenant's ACL user that the other tenants' users did not wait for, by namespace.",
	}, []string{"namespace"})
	// IsolationViolations is, per node, how many forbidden commands (ACL DRYRUN probes) tenant
	// users were allowed in the last proof. Anything above 0 means a tenant can reach beyond its
	// own keys.
	IsolationViolations = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "siteops_tenant_isolation_violations",
		Help: "Forbidden commands (cross-tenant GET/SET, SCAN, KEYS, FLUSHALL, EVAL, CONFIG, PUBLISH) tenant users were allowed in the last ACL DRYRUN proof, by node.",
	}, []string{"node"})
	// SecretsRestored counts valkey-acl Secrets changed by someone else and written back.
	SecretsRestored = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "siteops_tenant_secrets_restored_total",
		Help: "valkey-acl Secrets found changed (username, password, immutability or operator annotations) and restored.",
	})
	// UntrustedNodes counts, per address, connections refused to a master or replica a
	// Sentinel reported outside the allow-list (--valkey-allowed-nodes). Anything above 0 means
	// a Sentinel was re-pointed, or a real node is missing from the list.
	UntrustedNodes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_tenant_untrusted_node_total",
		Help: "Valkey nodes a Sentinel reported outside --valkey-allowed-nodes, refused before anything was sent to them, by node (the first 20 addresses; later ones counted as node other).",
	}, []string{"node"})
	// RotationsCut counts rotations whose earlier passwords were removed before every restarted
	// workload had rolled out, by reason: max_grace (--valkey-rotation-max-grace ran out) or
	// revoke_now (the platform revoked them).
	RotationsCut = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siteops_tenant_rotations_cut_total",
		Help: "Rotations whose earlier passwords were removed before every restarted workload had rolled out, by reason (max_grace, revoke_now).",
	}, []string{"reason"})
	// Failovers counts Sentinel +switch-master events, once per failover.
	Failovers = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "deco_operator_valkey_sentinel_failovers_total",
		Help: "Sentinel +switch-master events detected.",
	})
)

func init() {
	crmetrics.Registry.MustRegister(Provisioned, Deleted, Errors, SelfHealed, Tenants, Failovers,
		UserErrors, IsolationViolations, SecretsRestored, UntrustedNodes, RotationsCut)
	for _, op := range []string{OpUpsert, OpDelete, OpCheck} {
		Errors.WithLabelValues(op)
	}
	for _, reason := range []string{"max_grace", "revoke_now"} {
		RotationsCut.WithLabelValues(reason)
	}
}

// maxUntrustedLabels bounds the node label of UntrustedNodes: whoever re-points a Sentinel
// chooses the addresses, and must not grow the metric without bound.
const maxUntrustedLabels = 20

var (
	untrustedMu     sync.Mutex
	untrustedLabels = map[string]bool{}
)

// CountUntrustedNode counts one refusal of addr in UntrustedNodes.
func CountUntrustedNode(addr string) {
	untrustedMu.Lock()
	if !untrustedLabels[addr] {
		if len(untrustedLabels) >= maxUntrustedLabels {
			addr = "other"
		} else {
			untrustedLabels[addr] = true
		}
	}
	untrustedMu.Unlock()
	UntrustedNodes.WithLabelValues(addr).Inc()
}
