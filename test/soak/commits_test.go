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
	"sigs.k8s.io/controller-runtime/pkg/client"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
)

// commitRequest has windowUser ask for a commit of the windowed target's pending changes and
// waits until the request says Committed=True; it returns how long that took. A request that
// ends Committed=False, or is not done within ctx, is an error.
func (m *mirrorLoad) commitRequest(ctx context.Context, message string) (time.Duration, error) {
	c := m.users[windowUser]
	cr := &mirrorv1alpha1.CommitRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "soak-", Namespace: m.ns},
		Spec:       mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "main"}, Message: message},
	}
	start := time.Now()
	if err := c.Create(ctx, cr); err != nil {
		return 0, fmt.Errorf("create a CommitRequest as %s: %w", windowUser, err)
	}
	var last *metav1.Condition
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(cr), cr); err != nil {
			return false, nil // the API server may be restarting
		}
		last = meta.FindStatusCondition(cr.Status.Conditions, mirrorv1alpha1.ConditionCommitted)
		if last == nil || cr.Status.CompletionTime == nil {
			return false, nil
		}
		if last.Status != metav1.ConditionTrue {
			return false, fmt.Errorf("CommitRequest %s: Committed=%s %s: %s", cr.Name, last.Status, last.Reason, last.Message)
		}
		if cr.Status.Commit != "" && !strings.HasPrefix(cr.Status.Author, windowUser+" ") {
			return false, fmt.Errorf("CommitRequest %s: commit %.10s authored by %q, want %s", cr.Name, cr.Status.Commit, cr.Status.Author, windowUser)
		}
		return true, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%w (last Committed condition %+v)", err, last)
	}
	return time.Since(start), nil
}

// commitLoad sends CommitRequests while the run goes and counts how they ended.
type commitLoad struct {
	m *mirrorLoad

	mu        sync.Mutex
	sent      int
	committed int
	slowest   time.Duration
	failed    []string
}

// requestCommits has windowUser send a CommitRequest every 10 s until ctx ends; each is awaited
// for up to recoveryTimeout, since a fault may hold it.
func (s *soak) requestCommits(ctx context.Context, wg *sync.WaitGroup) *commitLoad {
	l := &commitLoad{m: s.windowed}
	wg.Go(func() {
		var pending sync.WaitGroup
		defer pending.Wait()
		wait.UntilWithContext(ctx, func(context.Context) {
			l.mu.Lock()
			l.sent++
			n := l.sent
			l.mu.Unlock()
			pending.Go(func() {
				rctx, cancel := context.WithTimeout(context.Background(), recoveryTimeout)
				defer cancel()
				took, err := l.m.commitRequest(rctx, fmt.Sprintf("soak request %d", n))
				l.mu.Lock()
				defer l.mu.Unlock()
				if err != nil {
					if len(l.failed) < 5 {
						l.failed = append(l.failed, err.Error())
					}
					return
				}
				l.committed++
				l.slowest = max(l.slowest, took)
			})
		}, 10*time.Second)
	})
	return l
}

// invariant is the check of every CommitRequest the run sent.
func (l *commitLoad) invariant() Invariant {
	l.mu.Lock()
	defer l.mu.Unlock()
	inv := Invariant{Name: "every CommitRequest committed under its submitter", Held: true,
		Detail: fmt.Sprintf("%d of %d committed, the slowest in %s", l.committed, l.sent, l.slowest.Round(time.Millisecond))}
	switch {
	case l.committed < l.sent:
		inv.Held, inv.Detail = false, fmt.Sprintf("%d of %d committed: %s", l.committed, l.sent, strings.Join(l.failed, "; "))
	case l.sent == 0:
		inv.Held, inv.Detail = false, "no CommitRequest was sent"
	}
	return inv
}
