package rollout_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/notify"
	"github.com/siteops/siteops/internal/decofile/rollout"
	"github.com/siteops/siteops/internal/testenv"
)

// TestKstatusFollowsTheRollout: with both controllers and real site pods, kstatus reads a
// Decofile as InProgress while its stored content is being rolled out (a pod holds the reload:
// Ready=Unknown RollingOut, Reconciling=True) and while a failed rollout is retried (the pod
// refuses: Ready=False PodsBehind, Reconciling=True), and Current only once every pod
// confirmed it.
func TestKstatusFollowsTheRollout(t *testing.T) {
	e := newEnv(t, rollout.Options{Notify: notify.Config{Attempts: 1, PodTimeout: 4 * time.Second}}, func(mgr ctrl.Manager) error {
		return controller.Setup(mgr, controller.Options{Rollout: rollout.Settler{Reader: mgr.GetAPIReader()}})
	})
	ctx := context.Background()
	df := &decov1alpha1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: e.ns},
		Spec: decov1alpha1.DecofileSpec{Source: decov1alpha1.SourceInline, Inline: &decov1alpha1.InlineSource{
			Value: map[string]apiextensionsv1.JSON{"site": {Raw: []byte(`{"v":0}`)}}}},
	}
	e.create(df)
	// No pod yet: stored is delivered.
	e.kstatus(df, status.CurrentStatus, metav1.ConditionTrue, decov1alpha1.ReasonSucceeded)
	token := e.reloadToken(df)
	const (
		answer int32 = iota
		hold
		refuse
	)
	var mode atomic.Int32
	mode.Store(hold)
	released := make(chan struct{})
	e.sitePod("site-a", podOpts{labels: labelled(df), token: token})
	e.sitePod("site-b", podOpts{labels: labelled(df), token: token, wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch mode.Load() {
			case hold:
				select {
				case <-released:
				case <-r.Context().Done():
				}
				http.Error(w, "held", http.StatusServiceUnavailable)
				return
			case refuse:
				http.Error(w, "database unavailable", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
		})
	}})

	setContent := func(v int) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			var d decov1alpha1.Decofile
			if err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(df), &d); err != nil {
				return err
			}
			d.Spec.Inline.Value["site"] = apiextensionsv1.JSON{Raw: []byte(fmt.Sprintf(`{"v":%d}`, v))}
			return e.c.Client.Update(ctx, &d)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// site-b holds the reload: stored, being delivered.
	setContent(1)
	e.kstatus(df, status.InProgressStatus, metav1.ConditionUnknown, decov1alpha1.ReasonRollingOut)
	// It refuses: the rollout failed and is retried.
	mode.Store(refuse)
	close(released)
	got := e.kstatus(df, status.InProgressStatus, metav1.ConditionFalse, decov1alpha1.ReasonPodsBehind)
	if c := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionReady); !strings.Contains(c.Message, "confirmed by 1 of 2 pods") {
		t.Fatalf("Ready does not say how far the rollout got: %+v", c)
	}
	// The retries (every few hundred milliseconds here) do not flip Ready back to RollingOut:
	// PodsBehind holds until a rollout of the content succeeds.
	retried := got.Status.History[0].Count
	deadline := time.Now().Add(20 * time.Second)
	for {
		cur := e.get(df)
		if c := meta.FindStatusCondition(cur.Status.Conditions, decov1alpha1.ConditionReady); c.Reason != decov1alpha1.ReasonPodsBehind {
			t.Fatalf("Ready during the retries: %+v", c)
		}
		if cur.Status.History[0].Count >= retried+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failed rollout was not retried twice: history %+v", cur.Status.History)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// It recovers: every pod confirms the content.
	mode.Store(answer)
	got = e.kstatus(df, status.CurrentStatus, metav1.ConditionTrue, decov1alpha1.ReasonSucceeded)
	if got.Status.NotifiedHash != got.Status.ContentHash || meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionReconciling) != nil {
		t.Fatalf("delivered: %+v", got.Status)
	}
	// Silent: pods are not told, so stored is all there is to wait for, refusing pod or not.
	mode.Store(refuse)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var d decov1alpha1.Decofile
		if err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(df), &d); err != nil {
			return err
		}
		d.Spec.Silent = true
		d.Spec.Inline.Value["site"] = apiextensionsv1.JSON{Raw: []byte(`{"v":"silent"}`)}
		return e.c.Client.Update(ctx, &d)
	})
	if err != nil {
		t.Fatal(err)
	}
	got = e.kstatus(df, status.CurrentStatus, metav1.ConditionTrue, decov1alpha1.ReasonSucceeded)
	if got.Status.NotifiedHash == got.Status.ContentHash {
		t.Fatal("a silent Decofile's content was rolled out")
	}
}

// kstatus waits until kstatus reads df as want, with Ready at status and reason (and
// Reconciling=True exactly while it is InProgress), and returns the Decofile seen.
func (e *env) kstatus(df *decov1alpha1.Decofile, want status.Status, ready metav1.ConditionStatus, reason string) *decov1alpha1.Decofile {
	e.t.Helper()
	var got *decov1alpha1.Decofile
	testenv.Eventually(e.t, 30*time.Second, func() error {
		got = e.get(df)
		res := testenv.Kstatus(e.t, got, decov1alpha1.GroupVersion.WithKind("Decofile"))
		c := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionReady)
		rec := meta.IsStatusConditionTrue(got.Status.Conditions, decov1alpha1.ConditionReconciling)
		if res.Status != want || c == nil || c.Status != ready || c.Reason != reason || rec != (want == status.InProgressStatus) {
			return fmt.Errorf("kstatus %s (%s), Ready %+v, Reconciling %v; want %s, Ready=%s %s", res.Status, res.Message, c, rec, want, ready, reason)
		}
		return nil
	})
	return got
}
