package soak

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
)

// commitOutcome is how one CommitRequest ended.
type commitOutcome struct {
	took time.Duration
	// fallback says the committer authored the commit, as the request's AuthorAttributed=False
	// CommitterFallback said: no submitter was recorded at admission (the mirror's Redis was
	// unreachable, or restarted empty before the commit).
	fallback bool
}

// commitRequest has windowUser ask for a commit of the windowed target's pending changes and
// waits until the request says Committed=True. A request that ends Committed=False, is not done
// within ctx, or names another author than its submitter without saying it fell back to the
// committer, is an error.
func (m *mirrorLoad) commitRequest(ctx context.Context, message string) (commitOutcome, error) {
	var out commitOutcome
	c := m.users[windowUser]
	cr := &mirrorv1alpha1.CommitRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "soak-", Namespace: m.ns},
		Spec:       mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "main"}, Message: message},
	}
	start := time.Now()
	// A user retries a create the API server did not take: while it restarts the connection is
	// refused, and for a moment after, its RBAC authorizer has not read the bindings yet.
	var createErr error
	if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		createErr = c.Create(ctx, cr)
		return createErr == nil, nil
	}); err != nil {
		return out, fmt.Errorf("create a CommitRequest as %s: %w", windowUser, createErr)
	}
	var last *metav1.Condition
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(cr), cr); err != nil {
			return false, nil //nolint:nilerr // the API server may be restarting: the poll retries the read
		}
		last = meta.FindStatusCondition(cr.Status.Conditions, mirrorv1alpha1.ConditionCommitted)
		if last == nil || cr.Status.CompletionTime == nil {
			return false, nil
		}
		if last.Status != metav1.ConditionTrue {
			return false, fmt.Errorf("CommitRequest %s: Committed=%s %s: %s", cr.Name, last.Status, last.Reason, last.Message)
		}
		if cr.Status.Commit == "" || strings.HasPrefix(cr.Status.Author, windowUser+" ") {
			return true, nil
		}
		attributed := meta.FindStatusCondition(cr.Status.Conditions, mirrorv1alpha1.ConditionAuthorAttributed)
		if strings.HasPrefix(cr.Status.Author, committerName+" ") && attributed != nil &&
			attributed.Status == metav1.ConditionFalse && attributed.Reason == mirrorv1alpha1.ReasonCommitterFallback {
			out.fallback = true
			return true, nil
		}
		return false, fmt.Errorf("CommitRequest %s: commit %.10s authored by %q, want %s (AuthorAttributed %+v)", cr.Name, cr.Status.Commit, cr.Status.Author, windowUser, attributed)
	})
	if err != nil {
		return out, fmt.Errorf("%w (last Committed condition %+v)", err, last)
	}
	out.took = time.Since(start)
	return out, nil
}

// commitLoad sends CommitRequests while the run goes and counts how they ended.
type commitLoad struct {
	m *mirrorLoad

	mu        sync.Mutex
	sent      int
	committed int
	slowest   time.Duration
	failed    []string
	// fallbacks are when the requests the committer authored were sent, from the run's start.
	fallbacks []time.Duration
}

// requestCommits has windowUser send a CommitRequest every 10 s until ctx ends; each is awaited
// for up to recoveryTimeout, since a fault may hold it.
func (s *soak) requestCommits(ctx context.Context, wg *sync.WaitGroup) *commitLoad {
	l := &commitLoad{m: s.windowed}
	start := s.start
	wg.Go(func() {
		var pending sync.WaitGroup
		defer pending.Wait()
		wait.UntilWithContext(ctx, func(context.Context) {
			l.mu.Lock()
			l.sent++
			n := l.sent
			l.mu.Unlock()
			sent := time.Since(start)
			pending.Go(func() {
				rctx, cancel := context.WithTimeout(context.Background(), recoveryTimeout)
				defer cancel()
				out, err := l.m.commitRequest(rctx, fmt.Sprintf("soak request %d", n))
				l.mu.Lock()
				defer l.mu.Unlock()
				if err != nil {
					if len(l.failed) < 5 {
						l.failed = append(l.failed, err.Error())
					}
					return
				}
				l.committed++
				l.slowest = max(l.slowest, out.took)
				if out.fallback {
					l.fallbacks = append(l.fallbacks, sent)
				}
			})
		}, 10*time.Second)
	})
	return l
}

// fallbackWindow is how long after a mirror Redis restart began a CommitRequest may still find
// its submitter's record gone: sent while Redis was down, or recorded before the restart and
// committed after it.
const fallbackWindow = time.Minute

// apiServerFallbackWindow is how long after an API server restart began its admission calls may
// still not reach the manager (the webhook's failurePolicy is Ignore, so a CommitRequest is
// admitted without its submitter recorded, and says so in its CommitterFallback condition).
const apiServerFallbackWindow = 20 * time.Second

// invariant is the check of every CommitRequest the run sent: each committed, under its
// submitter unless it was sent while the mirror's Redis (which holds the submitters) or the API
// server (which calls the webhook that records them) restarted.
func (l *commitLoad) invariant(faults []FaultResult) Invariant {
	l.mu.Lock()
	defer l.mu.Unlock()
	inv := Invariant{Name: "every CommitRequest committed under its submitter", Held: true,
		Detail: fmt.Sprintf("%d of %d committed, the slowest in %s; %d authored by the committer as their AuthorAttributed=False/CommitterFallback said, each sent within %s of a mirror Redis restart or %s of an API server restart",
			l.committed, l.sent, l.slowest.Round(time.Millisecond), len(l.fallbacks), fallbackWindow, apiServerFallbackWindow)}
	var unexplained []string
	for _, at := range l.fallbacks {
		if !slices.ContainsFunc(faults, func(f FaultResult) bool {
			return f.Fault == FaultMirrorRedisRestart && at >= f.At-10*time.Second && at <= f.At+fallbackWindow ||
				f.Fault == FaultAPIServerRestart && at >= f.At && at <= f.At+apiServerFallbackWindow
		}) {
			unexplained = append(unexplained, at.Round(time.Second).String())
		}
	}
	switch {
	case l.committed < l.sent:
		inv.Held, inv.Detail = false, fmt.Sprintf("%d of %d committed: %s", l.committed, l.sent, strings.Join(l.failed, "; "))
	case l.sent == 0:
		inv.Held, inv.Detail = false, "no CommitRequest was sent"
	case len(unexplained) > 0:
		inv.Held, inv.Detail = false, "authored by the committer with no mirror Redis or API server restart near: sent at "+strings.Join(unexplained, ", ")
	}
	return inv
}
