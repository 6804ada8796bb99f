package controller

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/shard"
)

// Rules and CommitRequests are placed in the shard of the GitTarget they name, whatever labels
// they carry themselves; one naming no existing target goes to the main instance.
func TestTargetLabelsFollowTheTarget(t *testing.T) {
	target := &mirrorv1alpha1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "site", Name: "main", Labels: map[string]string{shard.Key: "a"}}}
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(target).Build()
	labelsOf := TargetLabels(cl)
	forged := map[string]string{shard.Key: "b"}
	for _, tc := range []struct {
		obj  client.Object
		want string
	}{
		{&mirrorv1alpha1.WatchRule{ObjectMeta: metav1.ObjectMeta{Namespace: "site", Name: "r", Labels: forged}, Spec: mirrorv1alpha1.WatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "main"}}}, "a"},
		{&mirrorv1alpha1.ClusterWatchRule{ObjectMeta: metav1.ObjectMeta{Name: "c", Labels: forged}, Spec: mirrorv1alpha1.ClusterWatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Namespace: "site", Name: "main"}}}, "a"},
		{&mirrorv1alpha1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "site", Name: "cr", Labels: forged}, Spec: mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "main"}}}, "a"},
		{&mirrorv1alpha1.WatchRule{ObjectMeta: metav1.ObjectMeta{Namespace: "site", Name: "orphan", Labels: forged}, Spec: mirrorv1alpha1.WatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "missing"}}}, ""},
	} {
		l, err := labelsOf(context.Background(), tc.obj)
		if err != nil {
			t.Fatal(err)
		}
		if got := l[shard.Key]; got != tc.want {
			t.Errorf("%T %s: shard %q, want %q", tc.obj, tc.obj.GetName(), got, tc.want)
		}
	}
}
