package provision

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/siteops/siteops/internal/tenant/metrics"
)

// Why retiring passwords were removed before every restarted workload rolled out; the reason
// label of siteops_tenant_rotations_cut_total.
const (
	// CutMaxGrace: the passwords had been retiring for the maximum grace.
	CutMaxGrace = "max_grace"
	// CutRevokeNow: the platform asked for it (AnnotationRevoke, siteops tenant rotate --revoke-now).
	CutRevokeNow = "revoke_now"
)

// Event reasons of a cut rotation (Warning: pods still running with an old password are
// refused from now on).
const (
	ReasonRotationGraceExpired = "ValkeyACLRotationGraceExpired"
	ReasonPasswordsRevoked     = "ValkeyACLOldPasswordsRevoked"
)

// DefaultMaxGrace is how long an earlier password stays valid, at most, while the workloads
// roll out.
const DefaultMaxGrace = time.Hour

// cutRetiring ends the retirement of st's earlier passwords when the platform revokes them
// (a new value of AnnotationRevoke) or when they have been retiring for MaxGrace, and keeps
// RetiringSince: set when the list becomes non-empty, cleared when it empties. It returns the
// reason of a cut, or "".
//
// The grace counts from the oldest retiring password: a password retired later (the Secret was
// edited again, another rotation) ends with the others, so no password outlives RetiringSince
// plus MaxGrace however often the list grows.
func (r *Reconciler) cutRetiring(ns *corev1.Namespace, st *State, now time.Time) string {
	if v := ns.Annotations[AnnotationRevoke]; v != "" && v != st.Revoked {
		st.Revoked = v
		if len(st.Retiring) > 0 {
			st.Retiring, st.RetiringSince = nil, time.Time{}
			return CutRevokeNow
		}
	}
	switch {
	case len(st.Retiring) == 0:
		st.RetiringSince = time.Time{}
	case st.RetiringSince.IsZero() || st.RetiringSince.After(now):
		st.RetiringSince = now
	case r.MaxGrace > 0 && now.Sub(st.RetiringSince) >= r.MaxGrace:
		st.Retiring, st.RetiringSince = nil, time.Time{}
		return CutMaxGrace
	}
	return ""
}

// graceLeft is how long st's retiring passwords stay valid at most; 0 when none retires or no
// maximum is set.
func (r *Reconciler) graceLeft(st State, now time.Time) time.Duration {
	if len(st.Retiring) == 0 || r.MaxGrace <= 0 || st.RetiringSince.IsZero() {
		return 0
	}
	return max(st.RetiringSince.Add(r.MaxGrace).Sub(now), time.Millisecond)
}

// reportCut counts a cut and records a Warning on the namespace naming the workloads that had
// not rolled out (their pods that still use an old password are refused now).
func (r *Reconciler) reportCut(ctx context.Context, ns *corev1.Namespace, user, rev, reason string) {
	metrics.RotationsCut.WithLabelValues(reason).Inc()
	var waiting string
	if pending, err := r.Roller.Pending(ctx, ns.Name, rev); err == nil && len(pending) > 0 {
		names := make([]string, len(pending))
		for i, w := range pending {
			names[i] = w.String()
		}
		waiting = " (" + strings.Join(names, ", ") + " had not rolled out)"
	}
	switch reason {
	case CutMaxGrace:
		r.Events.Eventf(ns, nil, corev1.EventTypeWarning, ReasonRotationGraceExpired, "Rotate",
			"earlier Valkey passwords of %q were removed after %s (--valkey-rotation-max-grace) although not every workload had restarted%s; pods still using them are refused now",
			user, r.MaxGrace, waiting)
	case CutRevokeNow:
		r.Events.Eventf(ns, nil, corev1.EventTypeWarning, ReasonPasswordsRevoked, "Revoke",
			"earlier Valkey passwords of %q were revoked at once (annotation %s)%s; pods still using them are refused now",
			user, AnnotationRevoke, waiting)
	}
}
