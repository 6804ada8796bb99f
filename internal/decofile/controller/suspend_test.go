package controller_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
)

// TestSuspendStoresNothingUntilResumed: a suspended Decofile's new content is not stored, and a
// ConfigMap changed meanwhile is not restored; on resume both happen.
func TestSuspendStoresNothingUntilResumed(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "suspend", nil)
	e.create(t, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(map[string]string{"home": `{"v":1}`})}})
	e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)

	e.update(t, ns, "site", func(df *decov1.Decofile) {
		df.Spec.Suspend = true
		df.Spec.Inline = inline(map[string]string{"home": `{"v":2}`})
	})
	// The Event says the reconcile of the suspended version ran; only then is "nothing changed"
	// a finding.
	e.hasEvent(t, ns, "site", corev1.EventTypeNormal, controller.ReasonSuspended, "delivery is suspended")
	if got := e.configMap(t, ns, "site").Data[decov1.KeyJSON]; !strings.Contains(got, `"v":1`) {
		t.Fatalf("a suspended Decofile's new content was stored: %s", got)
	}
	if df := e.get(t, ns, "site"); df.Status.ContentHash == "" || df.Status.ObservedGeneration == df.Generation {
		t.Fatalf("the status of a suspended Decofile moved on: observed %d of generation %d", df.Status.ObservedGeneration, df.Generation)
	}

	e.update(t, ns, "site", func(df *decov1.Decofile) { df.Spec.Suspend = false })
	testenv_eventuallyCM(t, e, ns, "site", func(cm *corev1.ConfigMap) bool { return strings.Contains(cm.Data[decov1.KeyJSON], `"v":2`) })
}
