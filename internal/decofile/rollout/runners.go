package rollout

import (
	"context"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// runners runs each Decofile's rollout in a goroutine of its own, so a Decofile whose pods accept
// connections and never answer holds only its own runner (until its per-pod and rollout timeouts
// end it), never a worker another Decofile's rollout waits for. Per Decofile, one runner at a
// time: a newer version cancels the runner of the older one and starts when it has stopped.
// Each rollout still notifies at most notify.Config.Concurrency of its pods at once.
type runners struct {
	mu    sync.Mutex
	byKey map[string]*runner
	wg    sync.WaitGroup
	// base is the manager's context, set when the manager starts the runners (Start).
	base    context.Context
	started chan struct{}
	// requeue brings a Decofile back to the controller after a rollout's backoff.
	requeue chan event.GenericEvent
}

type runner struct {
	hash   string
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
}

func newRunners() runners {
	return runners{byKey: map[string]*runner{}, started: make(chan struct{}), requeue: make(chan event.GenericEvent)}
}

// Start implements manager.Runnable: it hands out the manager's context and, when the manager
// stops, waits until every running rollout has returned.
func (rs *runners) Start(ctx context.Context) error {
	rs.mu.Lock()
	rs.base = ctx
	close(rs.started)
	rs.mu.Unlock()
	<-ctx.Done()
	rs.wg.Wait()
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the leader rolls out.
func (rs *runners) NeedLeaderElection() bool { return true }

// startRunner runs the rollout of hash for df unless it runs already; a runner of an older
// version is cancelled first.
func (r *Reconciler) startRunner(ctx context.Context, df *decov1alpha1.Decofile, hash string) {
	rs := &r.runners
	select {
	case <-rs.started:
	case <-ctx.Done():
		return
	}
	key := client.ObjectKeyFromObject(df).String()
	rs.mu.Lock()
	prev := rs.byKey[key]
	if prev != nil && prev.hash == hash && prev.ctx.Err() == nil {
		rs.mu.Unlock()
		return
	}
	if prev != nil {
		prev.cancel(errSuperseded)
	}
	runCtx, cancel := context.WithCancelCause(rs.base)
	runCtx = logf.IntoContext(runCtx, logf.FromContext(ctx))
	run := &runner{hash: hash, ctx: runCtx, cancel: cancel, done: make(chan struct{})}
	rs.byKey[key] = run
	rs.wg.Add(1)
	rs.mu.Unlock()

	df = df.DeepCopy()
	go func() {
		defer rs.wg.Done()
		defer close(run.done)
		if prev != nil {
			<-prev.done // its requests end with its context; two versions never reach a pod at once
		}
		wait := time.Duration(0)
		if runCtx.Err() == nil {
			wait = r.rollout(runCtx, df, hash)
		}
		rs.mu.Lock()
		current := rs.byKey[key] == run
		if current {
			delete(rs.byKey, key)
		}
		rs.mu.Unlock()
		cancel(nil)
		if current && wait > 0 {
			rs.requeueAfter(wait, df)
		}
	}()
}

// stopRunner cancels the Decofile's running rollout, if any.
func (r *Reconciler) stopRunner(key string) {
	rs := &r.runners
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if run := rs.byKey[key]; run != nil {
		run.cancel(errSuperseded)
	}
}

// requeueAfter brings df back to the controller after wait.
func (rs *runners) requeueAfter(wait time.Duration, df *decov1alpha1.Decofile) {
	time.AfterFunc(wait, func() {
		select {
		case rs.requeue <- event.GenericEvent{Object: df}:
		case <-rs.base.Done():
		}
	})
}
