package rollout

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/notify"
)

// TestLedgerCountsPodsByTheContentTheyHold: pods older than the last rollout every pod confirmed
// hold its content, a pod started since is not known until it confirms, skipped pods are not
// counted, and what a rollout saw is remembered for the next one, which needs no status to know.
func TestLedgerCountsPodsByTheContentTheyHold(t *testing.T) {
	r := &Reconciler{}
	confirmedAt := metav1.NewTime(time.Unix(1000, 0))
	df := &decov1alpha1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "blog"}}
	df.Status.NotifiedHash = "old"
	df.Status.Rollout = &decov1alpha1.RolloutStatus{FinishedAt: &confirmedAt}
	df.Status.Conditions = []metav1.Condition{{Type: decov1alpha1.ConditionPodsNotified, Status: metav1.ConditionTrue}}
	pod := func(name string, created int64, running bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(time.Unix(created, 0))}}
		if running {
			p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.1"
		}
		return p
	}
	pods := []corev1.Pod{pod("a", 900, true), pod("b", 950, true), pod("c", 1100, true), pod("d", 900, false)}
	targets := make([]notify.Pod, len(pods))
	for i := range pods {
		targets[i] = Target(&pods[i])
	}

	l := r.newLedger(df, "new", pods, targets)
	l.settle([]notify.PodResult{{Name: "a", Outcome: notify.Notified}, {Name: "b", Outcome: notify.Failed}, {Name: "c", Outcome: notify.Failed}})
	want := []decov1alpha1.ConfirmedContent{{ContentHash: "new", Pods: 1}, {ContentHash: "old", Pods: 1}, {ContentHash: "", Pods: 1}}
	if got := l.counts(); !equalCounts(got, want) {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
	if l.held("b") != "old" || l.held("c") != "" || l.held("nobody") != "" {
		t.Fatalf("held: b %q, c %q", l.held("b"), l.held("c"))
	}

	// The next rollout, with a status that says nothing (PodsNotified=False): what a pod confirmed
	// last time comes from the manager's memory; c confirms this time.
	df.Status.Conditions[0].Status = metav1.ConditionFalse
	l = r.newLedger(df, "newer", pods, targets)
	l.settle([]notify.PodResult{{Name: "a", Outcome: notify.Failed}, {Name: "b", Outcome: notify.Failed}, {Name: "c", Outcome: notify.Notified}})
	want = []decov1alpha1.ConfirmedContent{{ContentHash: "newer", Pods: 1}, {ContentHash: "new", Pods: 1}, {ContentHash: "old", Pods: 1}}
	if got := l.counts(); !equalCounts(got, want) {
		t.Fatalf("counts of the next rollout %+v, want %+v", got, want)
	}

	r.confirmed.forget(l.key)
	if r.newLedger(df, "x", pods, targets).held("a") != "" {
		t.Fatal("a deleted Decofile's pods are still remembered")
	}
	var none *ledger
	if none.counts() != nil || none.held("a") != "" {
		t.Fatal("a rollout without a ledger counts pods")
	}
}

func equalCounts(a, b []decov1alpha1.ConfirmedContent) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
