package controller

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// setReady records in s, as Ready and Reconciling, the delivery's decision in next, followed to
// the pods. This controller owns Ready and Reconciling; the rollout controller owns what the
// pods confirmed (status.notifiedHash, PodsNotified), which s holds as last read and Ready
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
		if reason, status := pending(s, df); reason != "" {
			c.Status, c.Reason = status, reason
			c.Message = ready.Message + "; waiting for every pod to confirm it"
			if n := meta.FindStatusCondition(s.Conditions, decov1.ConditionPodsNotified); reason == decov1.ReasonPodsBehind && n != nil {
				c.Message = ready.Message + "; " + n.Message
			}
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

// pending is what keeps stored content from being delivered: RollingOut (Unknown) while the
// pods have not all confirmed it, PodsBehind (False) when the last rollout of it failed; ""
// when it is delivered or nothing needs to confirm it.
func pending(st *decov1.DecofileStatus, df *decov1.Decofile) (string, metav1.ConditionStatus) {
	if df.Spec.Silent || !df.TargetOrDefault().Supported() || st.ContentHash == "" || st.NotifiedHash == st.ContentHash {
		return "", ""
	}
	n := meta.FindStatusCondition(st.Conditions, decov1.ConditionPodsNotified)
	if n != nil && n.Status == metav1.ConditionFalse && st.Rollout != nil && st.Rollout.ID == decov1.RolloutID(st) {
		return decov1.ReasonPodsBehind, metav1.ConditionFalse
	}
	return decov1.ReasonRollingOut, metav1.ConditionUnknown
}

// readinessChanged lets through the rollout controller's status writes that change what Ready
// must say of the stored content (the pods confirmed it, or a rollout of it failed or started
// again), so this controller records it. Its own writes already agree with them, and rollout
// progress does not change Ready.
var readinessChanged = decofileUpdates(func(_, df *decov1.Decofile) bool {
	if !df.Status.ContentStored() {
		return false
	}
	ready := meta.FindStatusCondition(df.Status.Conditions, decov1.ConditionReady)
	want, _ := pending(&df.Status, df)
	if want == "" {
		return ready.Status != metav1.ConditionTrue
	}
	return ready.Reason != want
})
