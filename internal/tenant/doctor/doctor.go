// Package doctor keeps the settings checks of every Valkey node and Sentinel current in the
// manager: siteops_tenant_node_setting_gaps{node,setting} and a Warning Event per gap found, so a
// deployment that ACLs cannot protect (no maxmemory, an open default user or Sentinel) is
// reported rather than trusted.
package doctor

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/siteops/siteops/internal/tenant/settings"
)

// ReasonSettingGap is the Event reason for a Valkey node or Sentinel that lacks a setting
// multi-tenant use needs.
const ReasonSettingGap = "ValkeyNodeSettingGap"

// SettingGaps is 1 for every node and setting that failed the last check and 0 for those that
// passed; series of nodes no longer reported are removed.
var SettingGaps = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "siteops_tenant_node_setting_gaps",
	Help: "1 when a Valkey node or Sentinel lacks a setting a node shared by tenants needs (maxmemory, maxmemory-policy, proto-max-bulk-len, maxclients, default-user, sentinel-auth) in the last check, else 0; `siteops tenant doctor` says what to set.",
}, []string{"node", "setting"})

func init() { crmetrics.Registry.MustRegister(SettingGaps) }

// Recorder records Events (the events.k8s.io API's recorder signature).
type Recorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// Checker returns the findings of every node; acl.NodeSet implements it.
type Checker interface {
	Doctor(ctx context.Context) ([]settings.Finding, error)
}

// Reporter checks every node's settings on a period and reports the gaps. It is a manager
// Runnable that runs on the leader only.
type Reporter struct {
	// Nodes reads the settings.
	Nodes Checker
	// Events records a Warning per gap on Namespace, the manager's own (the gap concerns the
	// platform, not one tenant); nil records none.
	Events    Recorder
	Namespace string
	// Period is the time between checks.
	Period time.Duration

	seen   map[[2]string]bool // gaps already evented by this process
	series map[[2]string]bool // label pairs set in the last round
}

// NeedLeaderElection makes only the leader check.
func (r *Reporter) NeedLeaderElection() bool { return true }

// Start checks at once and then every Period until ctx ends.
func (r *Reporter) Start(ctx context.Context) error {
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) { r.Check(ctx) }, r.Period, 0.1, false)
	return nil
}

// Check runs one round and returns its findings.
func (r *Reporter) Check(ctx context.Context) []settings.Finding {
	log := logf.FromContext(ctx).WithName("tenant-doctor")
	fs, err := r.Nodes.Doctor(ctx)
	if err != nil {
		// The nodes that answered are still reported; the others keep their last values.
		log.Error(err, "could not read the settings of every Valkey node")
	}
	if r.seen == nil {
		r.seen, r.series = map[[2]string]bool{}, map[[2]string]bool{}
	}
	now := map[[2]string]bool{}
	for _, f := range fs {
		k := [2]string{f.Node, f.Setting}
		now[k] = true
		if f.OK {
			SettingGaps.WithLabelValues(f.Node, f.Setting).Set(0)
			delete(r.seen, k)
			continue
		}
		SettingGaps.WithLabelValues(f.Node, f.Setting).Set(1)
		if r.seen[k] {
			continue
		}
		r.seen[k] = true
		log.Info("Valkey node lacks a setting tenants need", "node", f.Node, "role", f.Role, "setting", f.Setting, "have", f.Have)
		if r.Events != nil {
			r.Events.Eventf(namespace(r.Namespace), nil, corev1.EventTypeWarning, ReasonSettingGap, "CheckSettings",
				"Valkey %s %s: %s is %s. %s", f.Role, f.Node, f.Setting, f.Have, f.Fix)
		}
	}
	if err == nil {
		for k := range r.series {
			if !now[k] {
				SettingGaps.DeleteLabelValues(k[0], k[1])
				delete(r.seen, k)
			}
		}
		r.series = now
	} else {
		for k := range now {
			r.series[k] = true
		}
	}
	return fs
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: name}}
}
