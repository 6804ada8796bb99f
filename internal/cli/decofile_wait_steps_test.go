package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/testenv"
)

// setStep records the step of a progressive rollout the way the rollout controller does.
func (f *waitFixture) setStep(commit string, status metav1.ConditionStatus, reason, msg string, step, steps, updated int32, phase string) {
	f.t.Helper()
	var d decov1alpha1.Decofile
	if err := f.c.Client.Get(context.Background(), client.ObjectKeyFromObject(f.df), &d); err != nil {
		f.t.Fatal(err)
	}
	d.Status.SourceType, d.Status.GitHubCommit, d.Status.ContentHash = decov1alpha1.SourceGitHub, commit, "hash-"+commit
	meta.SetStatusCondition(&d.Status.Conditions, metav1.Condition{Type: decov1alpha1.ConditionPodsNotified, Status: status, Reason: reason, Message: msg})
	d.Status.Rollout = &decov1alpha1.RolloutStatus{ID: "commit:" + commit, Total: 6, Notified: updated, Updated: updated,
		Step: step, Steps: steps, Phase: phase, StartedAt: &metav1.Time{Time: time.Now()}}
	if err := f.c.Client.Status().Update(context.Background(), &d); err != nil {
		f.t.Fatal(err)
	}
}

// TestDecofileWaitShowsSteps: a progressive rollout's steps appear live, and a rollback ends
// the wait with exit status 1 and the reason.
func TestDecofileWaitShowsSteps(t *testing.T) {
	f := newWaitFixture(t)
	const c1 = "dddddddddddddddddddddddddddddddddddddddd"
	out := &testenv.SyncBuffer{}
	wait := f.start(out, "--for", "commit:"+c1, "--timeout", "20s")
	seen := func(s string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, func() error {
			if !strings.Contains(out.String(), s) {
				return errors.New("not shown yet: " + out.String())
			}
			return nil
		})
	}
	f.setStep(c1, metav1.ConditionUnknown, decov1alpha1.ReasonNotificationInProgress, "Notifying pods for commit:"+c1, 1, 3, 1, "Pausing")
	seen("commit:" + c1 + ": step 1/3 pausing: 1/6 pods updated")
	f.setStep(c1, metav1.ConditionUnknown, decov1alpha1.ReasonNotificationInProgress, "Rolling back commit:"+c1+": step 2/3 failed its health check: shop-2: not Ready", 2, 3, 3, "RollingBack")
	seen("commit:" + c1 + ": rolling back at step 2/3: Rolling back commit:" + c1)
	f.setStep(c1, metav1.ConditionFalse, "RolledBack", "Rolled back commit:"+c1+": step 2/3 failed its health check: shop-2: not Ready; the store and 3 pods are back on commit:x", 2, 3, 3, "RolledBack")
	_, err := wait()
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "Rolled back commit:"+c1+": step 2/3") {
		t.Fatalf("exit %d (%v)", exitCode(err), err)
	}
}
