package controller

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// setKstatus sets the kstatus conditions next to Ready, with the polarity kstatus (and Flux's
// health checks built on it) expects: Reconciling=True while a transient failure is retried,
// Stalled=True when only a change of the Decofile or its source can help, neither once the
// content is stored. Without them a Decofile that is TooLarge reads as Current.
func setKstatus(next *decov1.DecofileStatus, out outcome, generation int64) {
	meta.RemoveStatusCondition(&next.Conditions, decov1.ConditionReconciling)
	meta.RemoveStatusCondition(&next.Conditions, decov1.ConditionStalled)
	if out.err == nil {
		return
	}
	typ := decov1.ConditionStalled
	if out.transient {
		typ = decov1.ConditionReconciling
	}
	meta.SetStatusCondition(&next.Conditions, metav1.Condition{
		Type: typ, Status: metav1.ConditionTrue, Reason: out.reason, Message: out.message, ObservedGeneration: generation,
	})
}
