package soak

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/rollout"
)

// rollbackWatch follows the progressive tenants' Decofiles while the load runs and notes every
// rolled-back version: a bad publish must be rolled back at its first step and never stand as
// the content every pod was notified of.
type rollbackWatch struct {
	s *soak

	mu sync.Mutex
	// atFirst and later are the bad publishes seen rolled back at step 1 and after it; good
	// counts good versions rolled back (a pod of the step hung or went away); notified lists
	// bad publishes seen with PodsNotified=True.
	atFirst  map[string]bool
	later    []string
	good     map[string]bool
	notified []string
}

// watchRollbacks polls the progressive tenants' Decofiles every 500 ms until ctx ends.
func (s *soak) watchRollbacks(ctx context.Context, wg *sync.WaitGroup) *rollbackWatch {
	w := &rollbackWatch{s: s, atFirst: map[string]bool{}, good: map[string]bool{}}
	wg.Go(func() { wait.UntilWithContext(ctx, w.look, 500*time.Millisecond) })
	return w
}

func (w *rollbackWatch) look(ctx context.Context) {
	for _, tn := range w.s.tenants {
		if !tn.progressive {
			continue
		}
		df, err := w.s.siteDecofile(ctx, tn)
		if err != nil {
			continue // the API server may be restarting
		}
		w.note(tn, df)
	}
}

// note records what df's status says of tn's rolled-back and notified versions.
func (w *rollbackWatch) note(tn *tenant, df *decov1alpha1.Decofile) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := df.Status
	// The condition names the version it is about: a True one left from the version before
	// while the new one is being stored is no finding.
	if c := meta.FindStatusCondition(st.Conditions, decov1alpha1.ConditionPodsNotified); c != nil && c.Status == metav1.ConditionTrue &&
		st.GitHubCommit != "" && tn.isBad(st.GitHubCommit) && strings.Contains(c.Message, decov1alpha1.RolloutID(&st)) {
		w.notified = append(w.notified, fmt.Sprintf("%s %.7s", tn.name, st.GitHubCommit))
	}
	ro := st.Rollout
	if ro == nil || ro.Phase != rollout.PhaseRolledBack || ro.FailedCommit == "" {
		return
	}
	key := tn.name + " " + ro.FailedCommit[:min(7, len(ro.FailedCommit))]
	switch {
	case !tn.isBad(ro.FailedCommit):
		w.good[key] = true
	case ro.Step <= 1:
		w.atFirst[key] = true
	default:
		if !strings.Contains(strings.Join(w.later, ";"), key) {
			w.later = append(w.later, fmt.Sprintf("%s at step %d of %d (%d pods updated)", key, ro.Step, ro.Steps, ro.Updated))
		}
	}
}

// badStands is how long a bad publish must stay its tenant's newest push before the run
// expects to see it rolled back: a rollout judges its first step within it, faults aside.
const badStands = 30 * time.Second

// invariant is the check of a run's bad publishes, ended at end.
func (w *rollbackWatch) invariant(end time.Time) Invariant {
	w.mu.Lock()
	defer w.mu.Unlock()
	bad, stood := 0, 0
	for _, tn := range w.s.tenants {
		tn.mu.Lock()
		for _, b := range tn.bad {
			if b {
				bad++
			}
		}
		tn.mu.Unlock()
		stood += tn.badStood(badStands, end)
	}
	inv := Invariant{Name: "a bad publish never reached past its first step", Held: true,
		Detail: fmt.Sprintf("%d bad publishes (%d the newest for %s or more), %d seen rolled back at step 1; %d good versions rolled back (a pod of the step hung or went away)", bad, stood, badStands, len(w.atFirst), len(w.good))}
	switch {
	case len(w.later) > 0:
		inv.Held, inv.Detail = false, "rolled back after step 1: "+strings.Join(w.later, "; ")
	case len(w.notified) > 0:
		inv.Held, inv.Detail = false, "a bad publish stood as notified to every pod: "+strings.Join(w.notified, "; ")
	case stood > 0 && len(w.atFirst) == 0:
		inv.Held, inv.Detail = false, fmt.Sprintf("%d bad publishes stood %s or more and none was seen rolled back: the progressive rollouts did not run", stood, badStands)
	}
	return inv
}
