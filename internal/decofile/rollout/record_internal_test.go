package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/notify"
)

// TestPodsBehindIsBounded: a rollout that fails on thousands of pods records the first few with
// their reasons, each reason short enough for the CRD's limit.
func TestPodsBehindIsBounded(t *testing.T) {
	var res notify.Result
	for i := range 1000 {
		res.Pods = append(res.Pods, notify.PodResult{Name: fmt.Sprintf("site-%04d", i), Outcome: notify.Failed,
			Reason: "timeout: " + strings.Repeat("x", 300), Attempts: 3})
	}
	res.Pods = append([]notify.PodResult{{Name: "fine", Outcome: notify.Notified}}, res.Pods...)
	b := podsBehind(res, nil)
	if len(b) != decov1alpha1.MaxPodsBehind || b[0].Name != "site-0000" || b[0].Attempts != 3 {
		t.Fatalf("%d pods behind, first %+v", len(b), b[0])
	}
	for _, p := range b {
		if len(p.Reason) > 256 || !strings.HasPrefix(p.Reason, "timeout: ") {
			t.Fatalf("reason of %d bytes: %q", len(p.Reason), p.Reason[:20])
		}
	}
	if len(podsBehind(notify.Result{}, nil)) != 0 {
		t.Error("pods behind without a failure")
	}
}

// TestHistoryKeepsTheLastRollouts: newest first, at most MaxHistory, and retries of a version
// that keeps failing are counted in one entry rather than pushing the others out.
func TestHistoryKeepsTheLastRollouts(t *testing.T) {
	var d decov1alpha1.Decofile
	start := metav1.NewTime(time.Unix(1764547200, 0))
	end := func(id, result string, sec int64) {
		ro := &decov1alpha1.RolloutStatus{ID: id, Total: 3, Notified: 2, StartedAt: &start}
		recordHistory(&d, ro, "hash-"+id, result, metav1.NewTime(start.Add(time.Duration(sec)*time.Second)))
	}
	end("commit:a", ResultSucceeded, 2)
	end("commit:b", ResultFailed, 3)
	end("commit:b", ResultFailed, 4)
	end("commit:b", ResultFailed, 5)
	if h := d.Status.History; len(h) != 2 || h[0].ID != "commit:b" || h[0].Count != 3 || h[1].ID != "commit:a" ||
		h[0].Duration.Duration != 5*time.Second || h[0].PodsConfirmed != 2 || h[0].Pods != 3 {
		t.Fatalf("history %+v", h)
	}
	end("commit:b", ResultSucceeded, 6)
	for i := range 6 {
		end(fmt.Sprintf("commit:%d", i), ResultSucceeded, int64(7+i))
	}
	h := d.Status.History
	if len(h) != decov1alpha1.MaxHistory || h[0].ID != "commit:5" || h[4].ID != "commit:1" {
		t.Fatalf("history of %d entries, newest %s, oldest %s", len(h), h[0].ID, h[len(h)-1].ID)
	}
}
