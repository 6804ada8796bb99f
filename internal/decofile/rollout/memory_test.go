package rollout_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/notify"
	"github.com/siteops/siteops/internal/decofile/rollout"
	"github.com/siteops/siteops/internal/testenv"
)

// sized is a JSON document of n bytes.
func sized(n int) []byte { return []byte(`{"pad":"` + strings.Repeat("x", n-10) + `"}`) }

// tenantRollout sets spec.rollout of df as the namespace's tenant does.
func (e *env) tenantRollout(df *decov1alpha1.Decofile, ro *decov1alpha1.RolloutSpec) {
	e.t.Helper()
	tn := e.c.TenantIn(e.t, e.ns)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var d decov1alpha1.Decofile
		if err := tn.Client.Get(context.Background(), client.ObjectKeyFromObject(df), &d); err != nil {
			return err
		}
		d.Spec.Rollout = ro
		return tn.Client.Update(context.Background(), &d)
	})
	if err != nil {
		e.t.Fatalf("tenant sets spec.rollout: %v", err)
	}
}

// pausedAtLargestContent starts a progressive rollout of content at the size limit in e's
// namespace, one pod per step and the longest pause (10 minutes), and waits until it pauses after step 1.
func pausedAtLargestContent(t *testing.T, e *env, limit int, commit string) *decov1alpha1.Decofile {
	t.Helper()
	df := e.decofile("large", false)
	e.tenantRollout(df, &decov1alpha1.RolloutSpec{Steps: steps(1, "100%"), Pause: &metav1.Duration{Duration: 10 * time.Minute}})
	e.sitePod("large-a", podOpts{labels: labelled(df)})
	e.sitePod("large-b", podOpts{labels: labelled(df)})
	e.store(df, sized(limit), commit, 1732000000, false)
	testenv.Eventually(t, 30*time.Second, func() error {
		if ro := e.get(df).Status.Rollout; ro == nil || ro.Phase != rollout.PhasePausing {
			return fmt.Errorf("rollout %+v, want it pausing after step 1", ro)
		}
		return nil
	})
	return df
}

// TestPausedRolloutsHoldNoMemory: two tenants' progressive rollouts of the largest content, paused
// for 10 minutes, hold no rollout memory: a third tenant's rollout of content as large completes in
// its normal time, though the two would fill --notify-memory-bytes if they held their bodies.
func TestPausedRolloutsHoldNoMemory(t *testing.T) {
	const limit = 1000
	envs := newEnvs(t, 3, rollout.Options{MaxContentBytes: limit, MemoryBytes: 2 * limit,
		Notify: notify.Config{PodTimeout: time.Minute, Timeout: 2 * time.Minute}})
	for i, e := range envs[:2] {
		pausedAtLargestContent(t, e, limit, strings.Repeat(fmt.Sprint(i+1), 40))
	}
	third := envs[2]
	df := third.decofile("shop", false)
	p := third.sitePod("shop-a", podOpts{labels: labelled(df)})
	content := sized(limit)
	third.store(df, content, strings.Repeat("3", 40), 1732000001, false)
	third.podsNotified(df, metav1.ConditionTrue, "Successfully notified all pods", 20*time.Second)
	if p.rt.Current().Hash != encode.Hash(content) {
		t.Fatal("the third tenant's pod does not serve its content")
	}
	for _, e := range envs[:2] {
		if ro := e.get(&decov1alpha1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "large"}}).Status.Rollout; ro == nil || ro.Phase != rollout.PhasePausing {
			t.Fatalf("%s: rollout %+v, want it still pausing", e.ns, ro)
		}
	}
}

// TestTwoNamespacesNeverHoldAllRolloutMemory: with the default --notify-memory-bytes, two
// namespaces whose rollouts of the largest content hang leave room for a third's.
func TestTwoNamespacesNeverHoldAllRolloutMemory(t *testing.T) {
	const limit = 1000
	envs := newEnvs(t, 3, rollout.Options{MaxContentBytes: limit,
		Notify: notify.Config{PodTimeout: time.Minute, Timeout: 2 * time.Minute}})
	for i, e := range envs[:2] {
		df := e.decofile("large", false)
		reached := e.hangingPod("large-a", labelled(df))
		e.store(df, sized(limit), strings.Repeat(fmt.Sprint(i+1), 40), 1732000000, false)
		testenv.Eventually(t, 20*time.Second, func() error {
			if reached.Load() == 0 {
				return fmt.Errorf("%s: the hanging pod has not been reached yet", e.ns)
			}
			return nil
		})
	}
	third := envs[2]
	df := third.decofile("shop", false)
	third.sitePod("shop-a", podOpts{labels: labelled(df)})
	third.store(df, sized(limit), strings.Repeat("3", 40), 1732000001, false)
	third.podsNotified(df, metav1.ConditionTrue, "Successfully notified all pods", 20*time.Second)
}
