package controller

import (
	"fmt"

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

// notSupported is the outcome for a target siteops does not deliver (tanstack-kv, served by the
// published Decofile operator v0.11). It is Stalled: only a change of spec.target, or an
// operator that serves the target, moves it.
func notSupported(df *decov1.Decofile) outcome {
	return outcome{reason: decov1.ReasonTargetNotSupported, err: fmt.Errorf(
		"spec.target %s is served by the published Decofile operator (v0.11), not by siteops: this Decofile, its ConfigMap and its KV sync are left as they are; change spec.target to configmap or s3 to have siteops deliver it (see docs/migration.md)",
		df.TargetOrDefault())}
}
