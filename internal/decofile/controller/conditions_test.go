package controller

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// TestSetKstatus: each kind of outcome, recorded as Reconcile records it, reads in kstatus as
// expected: stored → Current, transient failure (retried) → InProgress, failure that needs a
// change → Failed; and a recovery removes the abnormal-true conditions.
func TestSetKstatus(t *testing.T) {
	df := &decov1.Decofile{TypeMeta: metav1.TypeMeta{APIVersion: decov1.GroupVersion.String(), Kind: "Decofile"},
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: "ns", Generation: 3}}
	df.Status.ObservedGeneration = 3
	for _, tc := range []struct {
		name string
		out  outcome
		want status.Status
	}{
		{"stored", outcome{reason: decov1.ReasonSucceeded}, status.CurrentStatus},
		{"transient", outcome{reason: ReasonStoreFailed, err: errors.New("write failed"), transient: true}, status.InProgressStatus},
		{"too large", outcome{reason: decov1.ReasonTooLarge, err: errors.New("too large")}, status.FailedStatus},
		{"conflict", conflict(df, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "older"}}), status.FailedStatus},
		{"recovered", outcome{reason: decov1.ReasonSucceeded}, status.CurrentStatus},
	} {
		ready := metav1.ConditionTrue
		if tc.out.err != nil {
			ready = metav1.ConditionFalse
			tc.out.message = tc.out.err.Error()
		}
		meta.SetStatusCondition(&df.Status.Conditions, metav1.Condition{Type: decov1.ConditionReady, Status: ready, Reason: tc.out.reason})
		setKstatus(&df.Status, tc.out, df.Generation)
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(df)
		if err != nil {
			t.Fatal(err)
		}
		res, err := status.Compute(&unstructured.Unstructured{Object: obj})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tc.want {
			t.Errorf("%s: kstatus %s (%s), want %s; conditions %+v", tc.name, res.Status, res.Message, tc.want, df.Status.Conditions)
		}
	}
	if n := len(df.Status.Conditions); n != 1 {
		t.Fatalf("after recovery: %+v, want Ready only", df.Status.Conditions)
	}
}
