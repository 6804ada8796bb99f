package controller

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
)

// TestPushHistory: each new commit and each new push failure is recorded once, newest first;
// a failure that comes back before any push is counted in its entry; at most MaxHistory.
func TestPushHistory(t *testing.T) {
	var s mirrorv1alpha1.GitTargetStatus
	mirroring := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Mirroring"}
	failed := metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "PushFailed"}
	push := func(commit string, prev *metav1.Condition) {
		before := s.LastPushedCommit
		now := metav1.NewTime(time.Now())
		s.LastPushedCommit, s.LastPushTime = commit, &now
		recordPushHistory(&s, before, prev, mirroring)
	}
	push("c1", nil)
	recordPushHistory(&s, "c1", &mirroring, mirroring) // nothing new: nothing recorded
	recordPushHistory(&s, "c1", &mirroring, failed)
	recordPushHistory(&s, "c1", &failed, failed) // still failing: the same entry
	recordPushHistory(&s, "c1", &mirroring, failed)
	if h := s.History; len(h) != 2 || h[0].Result != "PushFailed" || h[0].Count != 2 || h[1].Commit != "c1" {
		t.Fatalf("history %+v", h)
	}
	for i := range 6 {
		push(fmt.Sprintf("d%d", i), &failed)
	}
	if h := s.History; len(h) != mirrorv1alpha1.MaxHistory || h[0].Commit != "d5" || h[4].Commit != "d1" {
		t.Fatalf("history %+v", h)
	}
}
