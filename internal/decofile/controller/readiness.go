package controller

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// setReady records in s, as Ready and Reconciling, the delivery's decision in next, followed to
// the pods. This controller owns Ready and Reconciling; the rollout controller owns what the
// pods confirmed (status.notifiedHash, rollout, history), which s holds as last read and Ready
// follows: content stored but not yet confirmed by every pod is Ready=Unknown, RollingOut, or
// Ready=False, PodsBehind, once a rollout of it failed and is retried; Reconciling=True in both,
// so kstatus (and Flux's health checks, `kubectl wait`) read the Decofile as InProgress until
// every pod has the content. A silent Decofile, and a target siteops does not notify, is Ready
// once stored. A failure to store stands as the delivery decided it.
func setReady(s, next *decov1.DecofileStatus, df *decov1.Decofile) {
	ready := meta.FindStatusCondition(next.Conditions, decov1.ConditionReady)
	reconciling := meta.FindStatusCondition(next.Conditions, decov1.ConditionReconciling)
	if ready == nil {
		meta.RemoveStatusCondition(&s.Conditions, decov1.ConditionReady)
		meta.RemoveStatusCondition(&s.Conditions, decov1.ConditionReconciling)
		return
	}
	c := *ready
	if c.Status == metav1.ConditionTrue {
		if reason, status, detail := pending(s, df); reason != "" {
			c.Status, c.Reason, c.Message = status, reason, ready.Message+"; "+detail
			reconciling = &metav1.Condition{Type: decov1.ConditionReconciling, Status: metav1.ConditionTrue,
				Reason: reason, Message: c.Message, ObservedGeneration: c.ObservedGeneration}
		}
	}
	meta.SetStatusCondition(&s.Conditions, c)
	if reconciling != nil {
		meta.SetStatusCondition(&s.Conditions, *reconciling)
	} else {
		meta.RemoveStatusCondition(&s.Conditions, decov1.ConditionReconciling)
	}
}

// pending is what keeps stored content from being delivered, with a line saying so: RollingOut
// (Unknown) while the pods have not all confirmed it, PodsBehind (False) from the first failed
// rollout of it until one succeeds, its retries included, so Ready does not flip at each retry.
// "" when it is delivered or nothing needs to confirm it. The pods' answers stay in
// PodsNotified; Ready names the pods behind only.
func pending(st *decov1.DecofileStatus, df *decov1.Decofile) (reason string, status metav1.ConditionStatus, detail string) {
	if df.Spec.Silent || !df.TargetOrDefault().Supported() || st.ContentHash == "" || st.NotifiedHash == st.ContentHash {
		return "", "", ""
	}
	if h := st.History; len(h) > 0 && h[0].ContentHash == st.ContentHash && h[0].Result == decov1.RolloutFailed {
		detail = "the last rollout of it failed"
		if h[0].Pods > 0 {
			detail = fmt.Sprintf("the last rollout of it was confirmed by %d of %d pods", h[0].PodsConfirmed, h[0].Pods)
		}
		if ro := st.Rollout; ro != nil && ro.FinishedAt != nil && len(ro.Behind) > 0 {
			names := make([]string, 0, 3)
			for _, b := range ro.Behind[:min(3, len(ro.Behind))] {
				names = append(names, b.Name)
			}
			detail += " (" + strings.Join(names, ", ") + ")"
		}
		return decov1.ReasonPodsBehind, metav1.ConditionFalse, detail + "; retrying, PodsNotified says why"
	}
	return decov1.ReasonRollingOut, metav1.ConditionUnknown, "waiting for every pod to confirm it"
}

// readinessChanged lets through the rollout controller's status writes that change what Ready
// must say of the stored content (the pods confirmed it, or a rollout of it failed), so this
// controller records it. Its own writes already agree with them, and rollout
// progress does not change Ready.
var readinessChanged = decofileUpdates(func(_, df *decov1.Decofile) bool {
	if !df.Status.ContentStored() {
		return false
	}
	ready := meta.FindStatusCondition(df.Status.Conditions, decov1.ConditionReady)
	want, _, _ := pending(&df.Status, df)
	if want == "" {
		return ready.Status != metav1.ConditionTrue
	}
	return ready.Reason != want
})
