package resync

import (
	corev1 "k8s.io/api/core/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/siteops/siteops/internal/tenant/acl"
)

// ReasonUntrustedNode is the Event reason for a Sentinel reporting a master or replica outside
// the allow-list; the operator sent it nothing.
const ReasonUntrustedNode = "ValkeyUntrustedNode"

// UntrustedReporter logs every node the node set refused as unknown and records a Warning Event
// about it on the manager's own namespace: the refusal concerns the platform, not one tenant.
type UntrustedReporter struct {
	// Events records the Warning; nil records none.
	Events Recorder
	// Namespace is the manager's namespace, which the Event is recorded on.
	Namespace string
}

// Report records that node was refused.
func (r *UntrustedReporter) Report(node acl.Node) {
	logf.Log.WithName("tenant").Info("refused a Valkey node a Sentinel reported: it is not a known node, nothing was sent to it",
		"node", node.Addr, "role", node.Role)
	if r.Events == nil {
		return
	}
	r.Events.Eventf(Namespace(r.Namespace), nil, corev1.EventTypeWarning, ReasonUntrustedNode, "Refuse",
		"A Sentinel reports Valkey %s %s, which is not a known node: siteops sent it nothing (no admin AUTH, no ACL command). Someone may have re-pointed a Sentinel (SENTINEL REMOVE/MONITOR): check SENTINEL MASTERS on every Sentinel and require Sentinel auth; if the node is yours, add it to --valkey-allowed-nodes",
		node.Role, node.Addr)
}
